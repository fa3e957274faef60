"""`opsctl render k8s`: golden manifests per profile and variant, the argv byte-identical to
`up`'s, and every refusal (exit 2) before anything is written.

Regenerate the goldens after an intended change with
`OPSCTL_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render_k8s.py` and review the diff.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import FakeEngine

from opsctl.config.profiles import PATCH_SWITCH_ENV, Deployment, check_argv, load_profile
from opsctl.config.runspec import run_spec
from opsctl.core import labels
from opsctl.core.errors import EXIT_USAGE, UsageError
from opsctl.core.files import MARKER_WINDOW, OwnedFolder
from opsctl.deploy.launch import Launch, up
from opsctl.observe import dashboard
from opsctl.observe.promnames import slo_rules
from opsctl.observe.promrules import PRODUCTION_TIMING, alert_rules, recording_rules
from opsctl.render import app as render
from opsctl.render import outdir
from opsctl.render.monitoring import SGLANG_JOB
from opsctl.render.serving import LWS_WORKER_INDEX_LABEL
from opsctl.render.settings import RenderSettings

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
TWO_HOSTS = str(Path(__file__).parent.parent / "fixtures" / "profiles" / "glm5-2node.yaml")
IMAGE = "IMAGE"
ELIDED = "<observe.dashboard.dashboard_json(): test_monitoring_reuses_opsctls_rules_and_dashboard>"
GLM = "glm5-nvfp4-rtx6000"
CASES = [(GLM, variant, 2) for variant in sorted(load_profile(GLM).variants)] + [
    ("sim", "gathercast", 1), (TWO_HOSTS, "gathercast", 2)]


def _deployment(profile: str, variant: str) -> Deployment:
    return load_profile(profile).resolve(variant)


def _kind(
    objects: list[dict[str, Any]], kind: str, role: str = labels.ROLE_SERVER
) -> dict[str, Any]:
    return next(obj for obj in objects
                if obj["kind"] == kind and obj["metadata"]["labels"].get(labels.ROLE) == role)


def _pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every serving pod template's spec: the Deployment's, or the LWS leader's and worker's."""
    server = next(obj for obj in objects if obj["kind"] in {"Deployment", "LeaderWorkerSet"}
                  and obj["metadata"]["labels"][labels.ROLE] == labels.ROLE_SERVER)
    if server["kind"] == "Deployment":
        return [server["spec"]["template"]["spec"]]
    group = server["spec"]["leaderWorkerTemplate"]
    return [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]


@pytest.mark.parametrize(("profile", "variant", "replicas"), CASES)
def test_golden_manifests(profile: str, variant: str, replicas: int) -> None:
    objects = render.render_objects(_deployment(profile, variant), IMAGE,
                                    RenderSettings(replicas=replicas))
    for obj in objects:  # the dashboard is the same for all; a test below compares it whole
        if obj["kind"] == "ConfigMap":
            obj["data"] = {key: ELIDED for key in obj["data"]}
    files = render.manifest_files(objects)
    text = "---\n".join(f"# file: {name}\n{body}" for name, body in files.items())
    path = GOLDEN / "k8s" / f"{Path(profile).stem}.{variant}.yaml"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), (
        f"missing golden file {path}; run with OPSCTL_UPDATE_GOLDEN=1 and review it"
    )
    assert text == path.read_text()
    assert len(list(yaml.safe_load_all(text))) == len(files)


@pytest.mark.parametrize(("profile", "variant", "replicas"), CASES)
def test_args_are_ups_argv(profile: str, variant: str, replicas: int) -> None:
    deployment = _deployment(profile, variant)
    objects = render.render_objects(deployment, IMAGE, RenderSettings(replicas=replicas))
    argv = run_spec(deployment, IMAGE).command
    assert argv == check_argv(deployment)
    for pod in _pod_specs(objects):
        (container,) = pod["containers"]
        # like `docker run IMAGE ARGV`: the image's entrypoint stays
        assert "command" not in container
        if deployment.server.nnodes == 1:
            assert container["args"] == argv
            # and the golden argv `up` is tested against, byte for byte
            golden = GOLDEN / f"{profile}.{variant}.argv"
            assert container["args"] == shlex.split(golden.read_text())
        else:
            assert container["args"] == [*argv, "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000",
                                         "--node-rank", "$(LWS_WORKER_INDEX)"]
            assert argv[argv.index("--nnodes") + 1] == str(deployment.server.nnodes)


@pytest.mark.parametrize(("profile", "variant", "replicas"), CASES)
def test_pod_env_gpus_shm_and_volumes(profile: str, variant: str, replicas: int) -> None:
    deployment = _deployment(profile, variant)
    container_settings = deployment.profile.container
    for pod in _pod_specs(render.render_objects(deployment, IMAGE,
                                                        RenderSettings(replicas=replicas))):
        (container,) = pod["containers"]
        env = {entry["name"]: entry for entry in container["env"]}
        assert env[PATCH_SWITCH_ENV]["value"] == ("1" if deployment.patched else "0")
        for name, value in run_spec(deployment, IMAGE).env.items():
            if name in container_settings.env_from_host:  # a secret: from the Secret, never a value
                assert env[name]["valueFrom"]["secretKeyRef"]["key"] == name
            else:
                assert env[name] == {"name": name, "value": value}
        gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)
        assert gpus == len(container_settings.gpus)
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
        assert mounts["dshm"]["mountPath"] == "/dev/shm"
        model = deployment.model
        if model.host_path:
            assert volumes["model"]["hostPath"]["path"] == model.host_path
            assert mounts["model"] == {"name": "model", "mountPath": model.container_path,
                                       "readOnly": True}
        assert pod["terminationGracePeriodSeconds"] == container_settings.stop_grace_seconds
        assert pod["enableServiceLinks"] is False


def test_shm_is_sized_from_the_profile_only_when_it_gives_a_size() -> None:
    sim = _pod_specs(render.render_objects(_deployment("sim", "gathercast"), IMAGE))[0]
    glm = _pod_specs(render.render_objects(_deployment(GLM, "gathercast"), IMAGE))[0]
    # shm_size: 64m
    assert sim["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert glm["volumes"][0]["emptyDir"] == {"medium": "Memory"}  # ipc_host: no size to take


def test_probes_cover_the_load_and_never_generate_on_the_pinned_release() -> None:
    deployment = _deployment(GLM, "gathercast")
    assert deployment.image.sglang_version == "0.5.23"
    (container,) = _pod_specs(render.render_objects(deployment, IMAGE))[0]["containers"]
    startup = container["startupProbe"]
    budget = startup["failureThreshold"] * startup["periodSeconds"]
    assert budget >= deployment.profile.readiness.timeout_seconds
    assert startup["httpGet"]["path"] == "/health"
    # 0.5.23's GET /ready: no generation, no exec, no API key (http_server.py:714-718)
    ready = container["readinessProbe"]
    assert ready["httpGet"] == {"path": "/ready", "port": "http"} and "exec" not in ready
    live = container["livenessProbe"]
    # never /health_generate: no generation, no scheduler
    assert live["httpGet"]["path"] == "/health"
    assert live["failureThreshold"] * live["periodSeconds"] >= 60
    assert "health_generate" not in json.dumps([startup, ready, live])


def test_a_release_without_a_readiness_endpoint_keeps_ups_exec_check() -> None:
    glm = _deployment(GLM, "gathercast")
    old = glm.model_copy(update={
        "image": glm.image.model_copy(update={"sglang_version": "0.5.15"}),
        "server": glm.server.model_copy(update={"disable_prefill_cuda_graph": False})})
    (container,) = _pod_specs(render.render_objects(old, IMAGE))[0]["containers"]
    ready = container["readinessProbe"]["exec"]["command"]
    assert (
        ready[:2] == ["python3", "-c"]
        and "/health_generate" in ready[2]
        and "/v1/models" in ready[2]
    )
    assert ready[3:] == ["http://127.0.0.1:30000", "glm-5"]


def _with_container(deployment: Deployment, **changes: Any) -> Deployment:
    profile = deployment.profile
    container = profile.container.model_validate({**profile.container.model_dump(), **changes})
    return deployment.model_copy(update={"profile": profile.model_copy(update={
        "container": container})})


def test_pods_request_cpu_and_memory_so_they_are_not_best_effort() -> None:
    glm = _deployment(GLM, "gathercast")
    (container,) = _pod_specs(render.render_objects(glm, IMAGE))[0]["containers"]
    assert len(glm.profile.container.gpus) == 8
    # one core per rank plus 4; 16 GiB per GPU; GPUs a limit; no CPU or memory limit
    assert container["resources"] == {"requests": {"cpu": "12", "memory": "128Gi"},
                                      "limits": {"nvidia.com/gpu": 8}}
    (sim,) = _pod_specs(render.render_objects(_deployment("sim", "gathercast"), IMAGE))[0][
        "containers"]
    assert sim["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}}
    stated = _with_container(glm, cpu_request=0.5, memory_request="200g", memory_limit="256g")
    (container,) = _pod_specs(render.render_objects(stated, IMAGE))[0]["containers"]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "200Gi"},
                                      "limits": {"memory": "256Gi", "nvidia.com/gpu": 8}}
    assert stated.config_hash() == glm.config_hash()  # `render k8s`'s alone: `up` keeps its server
    capped = _with_container(glm, memory_limit="64g")  # the estimate never exceeds the limit
    (container,) = _pod_specs(render.render_objects(capped, IMAGE))[0]["containers"]
    assert container["resources"]["requests"]["memory"] == "64Gi"
    with pytest.raises(ValueError, match="memory_request 2g is above memory_limit 1g"):
        _with_container(glm, memory_request="2g", memory_limit="1g")


@pytest.mark.parametrize(("profile", "variant", "replicas"), CASES)
def test_every_object_carries_the_recommended_app_labels_and_no_selector_uses_them(
        profile: str, variant: str, replicas: int) -> None:
    deployment = _deployment(profile, variant)
    objects = render.render_objects(deployment, IMAGE, RenderSettings(replicas=replicas))
    name = f"{Path(profile).stem}-{variant}"
    for obj in objects:
        found = obj["metadata"]["labels"]
        role = found[labels.ROLE]
        assert found["app.kubernetes.io/managed-by"] == "opsctl"
        assert found["app.kubernetes.io/component"] == role
        stack = deployment.profile.name if role == labels.ROLE_MONITORING else name
        assert found["app.kubernetes.io/instance"] == found["app.kubernetes.io/part-of"] == stack
        assert found["app.kubernetes.io/name"] == {
            "server": "sglang",
            "router": "sglang-router",
        }.get(role, f"opsctl-{role}")
        if role == labels.ROLE_SERVER:
            assert found["app.kubernetes.io/version"] == deployment.image.sglang_version
        assert not [key for key in obj.get("spec", {}).get("selector", {}).get("matchLabels", {})
                    if key.startswith("app.kubernetes.io/")]


def test_multi_host_renders_a_leader_worker_set_and_the_router_picks_leaders() -> None:
    objects = render.render_objects(_deployment(TWO_HOSTS, "gathercast"), IMAGE,
                                    RenderSettings(replicas=2))
    lws = _kind(objects, "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["spec"]["replicas"] == 2
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2 and lws["spec"]["startupPolicy"] == "LeaderCreated"
    worker = group["workerTemplate"]["spec"]["containers"][0]
    assert worker["readinessProbe"]["httpGet"]["path"] == "/health"  # workers serve no API
    assert not [obj for obj in objects if obj["kind"] == "Deployment"
                and obj["metadata"]["labels"][labels.ROLE] == labels.ROLE_SERVER]
    args = _kind(objects, "Deployment", labels.ROLE_ROUTER)["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert f"{LWS_WORKER_INDEX_LABEL}=0" in args


def test_router_discovers_the_variants_ready_pods_with_a_namespaced_role() -> None:
    objects = render.render_objects(_deployment(GLM, "gathercast"), IMAGE,
                                    RenderSettings(replicas=2, namespace="llm"))
    pod = _kind(objects, "Deployment", labels.ROLE_ROUTER)["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[:3] == ["python3", "-m", "sglang_router.launch_router"]
    assert args[args.index("--policy") + 1] == "cache_aware" and "--service-discovery" in args
    assert args[args.index("--service-discovery-namespace") + 1] == "llm"
    selector = _kind(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    for key, value in selector.items():
        assert f"{key}={value}" in args
    role = _kind(objects, "Role", labels.ROLE_ROUTER)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list", "watch"]}]
    assert pod["serviceAccountName"] == role["metadata"]["name"]
    assert {obj["metadata"]["namespace"] for obj in objects} == {"llm"}


def test_monitoring_reuses_opsctls_rules_and_dashboard() -> None:
    deployment = _deployment(GLM, "gathercast")
    objects = render.render_objects(deployment, IMAGE)
    rule = next(obj for obj in objects if obj["kind"] == "PrometheusRule")
    slos = slo_rules(deployment.profile)
    assert rule["spec"]["groups"] == (recording_rules(slos, PRODUCTION_TIMING)["groups"]
                                      + alert_rules(slos, PRODUCTION_TIMING)["groups"])
    assert f'up{{job="{SGLANG_JOB}"}}' in yaml.safe_dump(rule)  # the job the PodMonitor sets
    monitor = _kind(objects, "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["replacement"] == SGLANG_JOB
    board = next(obj for obj in objects if obj["kind"] == "ConfigMap")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert list(board["data"].values()) == [dashboard.dashboard_json()]


def test_label_values_that_do_not_fit_become_annotations() -> None:
    image = "registry.example:5000/team/opsctl-sglang@sha256:" + "a" * 64
    server = _kind(render.render_objects(_deployment(GLM, "gathercast"), image), "Deployment")
    meta = server["metadata"]
    assert meta["annotations"][labels.IMAGE] == image and labels.IMAGE not in meta["labels"]
    assert len(meta["annotations"][labels.CONFIG_HASH]) == 64  # one over the label limit
    assert meta["labels"][labels.VARIANT] == "gathercast"
    assert server["spec"]["template"]["spec"]["containers"][0]["image"] == image


def _refused(deployment: Deployment, **options: Any) -> str:
    with pytest.raises(UsageError) as caught:
        render.render_objects(deployment, IMAGE, RenderSettings(**options))
    assert caught.value.exit_code == EXIT_USAGE and caught.value.hint
    return caught.value.message


def _with_server(deployment: Deployment, **changes: Any) -> Deployment:
    return deployment.model_copy(update={"server": deployment.server.model_copy(update=changes)})


def test_refusals() -> None:
    glm = _deployment(GLM, "gathercast")
    assert "--replicas 0" in _refused(glm, replicas=0)
    assert "namespace" in _refused(glm, namespace="Bad_Namespace")
    assert "--name" in _refused(glm, name="x" * 41)
    assert "server.host 127.0.0.1" in _refused(_with_server(glm, host="127.0.0.1"))
    no_weights = glm.model_copy(update={"model": glm.model.model_copy(
        update={"host_path": None})})
    assert "no model.host_path" in _refused(no_weights)
    render.render_objects(no_weights, IMAGE, RenderSettings(model_pvc="weights"))
    assert "'$('" in _refused(glm.model_copy(update={"env": {**glm.env, "X": "$(HOME)"}}))
    # Kubernetes turns `$$` into `$`: the pod would not get the profile's value.
    assert "'$$'" in _refused(glm.model_copy(update={"env": {**glm.env, "X": "a$$b"}}))
    two = _deployment(TWO_HOSTS, "gathercast")
    assert "--node-r" in _refused(_with_server(two, extra_args=["--node-r", "1"]))
    with pytest.raises(UsageError, match="no variant"):
        load_profile(GLM).resolve("nope")


def test_a_secret_named_twice_is_one_env_entry_and_one_key() -> None:
    glm = _deployment(GLM, "gathercast")
    twice = _with_server(glm, api_key_env="OPSCTL_KEY", admin_api_key_env="OPSCTL_KEY")
    env = _pod_specs(render.render_objects(twice, IMAGE))[0]["containers"][0]["env"]
    assert [entry["name"] for entry in env].count("OPSCTL_KEY") == 1


def test_model_pvc_replaces_the_host_path() -> None:
    objects = render.render_objects(_deployment(GLM, "gathercast"), IMAGE,
                                    RenderSettings(model_pvc="glm5-weights", cache_pvc="jit-cache"))
    volumes = {volume["name"]: volume for volume in _pod_specs(objects)[0]["volumes"]}
    assert volumes["model"] == {"name": "model", "persistentVolumeClaim": {
        "claimName": "glm5-weights", "readOnly": True}}
    assert volumes["cache"]["persistentVolumeClaim"] == {"claimName": "jit-cache"}


def _write(out: Path, pushed: bool = False, force: bool = False, **options: Any
           ) -> render.RenderResult:
    ref = ("registry.example/opsctl/sglang-glm5@sha256:" + "b" * 64, True) if pushed \
        else ("opsctl/sglang-glm5:local", False)
    return render.render_k8s(_deployment(GLM, "gathercast"), image_ref=lambda _: ref, out=out,
                             settings=RenderSettings(replicas=2, **options), force=force)


def test_render_writes_one_file_per_object_and_flags_a_local_tag(tmp_path: Path) -> None:
    local = _write(tmp_path / "local")
    objects = [path for path in local.files if path.name != render.KUSTOMIZATION]
    assert not local.pushed and len(objects) == len(local.objects) == len(local.files) - 1
    assert all("NOT DEPLOYABLE" in path.read_text() for path in local.files)
    assert any("hostPath" in note for note in local.notes)
    pushed = _write(tmp_path / "pushed", pushed=True)
    text = "".join(path.read_text() for path in pushed.files)
    assert "NOT DEPLOYABLE" not in text and "@sha256:" + "b" * 64 in text


def test_the_folder_is_a_kustomize_base_with_a_record_of_every_file(tmp_path: Path) -> None:
    out = tmp_path / "base"
    result = _write(out)
    base = yaml.safe_load((out / render.KUSTOMIZATION).read_text())
    assert base["apiVersion"] == render.KUSTOMIZE_API and base["kind"] == "Kustomization"
    assert base["resources"] == sorted(path.name for path in result.files
                                       if path.name != render.KUSTOMIZATION)
    record = json.loads((out / outdir.RECORD).read_text())
    assert "pending" not in record and record["files"] == {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in result.files}
    assert sorted(path.name for path in out.iterdir()) == sorted(
        [outdir.RECORD, *record["files"]])


def test_a_rerender_replaces_its_own_files_and_never_touches_anyone_elses(tmp_path: Path) -> None:
    out = tmp_path / "base"
    first = _write(out)
    (out / "my-patch.yaml").write_text("mine\n")  # an operator's file beside the render
    again = _write(out)  # nothing edited: no --force needed
    assert [path.name for path in again.files] == [path.name for path in first.files]
    renamed = _write(out, name="other")  # different objects: the old files go, the operator's stay
    kept = {path.name for path in renamed.files}
    assert renamed.removed and sorted(renamed.removed) == sorted(
        path.name for path in first.files if path.name not in kept)
    assert (out / "my-patch.yaml").read_text() == "mine\n"
    assert sorted(path.name for path in out.iterdir()) == sorted(
        [outdir.RECORD, "my-patch.yaml", *(path.name for path in renamed.files)])


def test_an_edited_file_is_refused_and_force_overwrites_only_recorded_files(tmp_path: Path) -> None:
    out = tmp_path / "base"
    first = _write(out)
    edited = first.files[0]
    edited.write_text(edited.read_text() + "# my change\n")
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    with pytest.raises(UsageError, match=f"{edited.name} was edited") as caught:
        _write(out)
    assert "overlay" in (caught.value.hint or "") and "--force" in (caught.value.hint or "")
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before  # nothing changed
    forced = _write(out, force=True)
    assert "# my change" not in edited.read_text() and edited in forced.files
    (out / "notes.txt").write_text("mine")
    clash = first.files[0].name.replace(first.files[0].name[:2], "99")
    (out / clash).write_text("also mine")
    _write(out, force=True)  # files nobody recorded stay as they are, with or without --force
    assert (out / "notes.txt").read_text() == "mine" and (out / clash).read_text() == "also mine"


def test_a_file_the_render_would_write_is_never_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "base"
    first = _write(out)
    taken = first.files[1]
    record = json.loads((out / outdir.RECORD).read_text())
    del record["files"][taken.name]  # a file of that name the render did not write
    (out / outdir.RECORD).write_text(json.dumps(record))
    with pytest.raises(
        UsageError, match=f"{taken.name} is there and `render k8s` did not write it"
    ):
        _write(out, force=True)


@pytest.mark.parametrize(("content", "words"), [
    ("{", "not JSON"), ('{"format": "other"}', "not a opsctl-render/1 record"),
    ('{"format": "opsctl-render/1", "files": {"../escape.yaml": "' + "0" * 64 + '"}}',
     "not a file of this folder"),
    ('{"format": "opsctl-render/1", "files": {"a.yaml": "x"}}', "not a sha256"),
])
def test_a_record_that_is_not_one_is_refused(tmp_path: Path, content: str, words: str) -> None:
    out = tmp_path / "base"
    out.mkdir()
    (out / outdir.RECORD).write_text(content)
    with pytest.raises(UsageError, match=words):
        _write(out, force=True)
    assert [path.name for path in out.iterdir()] == [outdir.RECORD]


def test_a_folder_of_someone_elses_files_is_refused_whole(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "docs"
    mine.mkdir()
    (mine / "README.md").write_text("mine")
    for force in (False, True):
        with pytest.raises(UsageError, match="did not write \\(README.md\\) and no"):
            _write(mine, force=force)
    assert [path.name for path in mine.iterdir()] == ["README.md"]
    monkeypatch.chdir(mine)  # `.` is a folder like any other
    with pytest.raises(UsageError, match="did not write"):
        _write(Path("."))
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")  # through a link: into the folder it names
    written = _write(tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "empty" / outdir.RECORD).is_file()
    assert written.out == tmp_path / "link"


def test_an_interrupted_write_leaves_a_folder_the_next_render_accepts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "manifests"
    _write(out)
    real = OwnedFolder.write
    calls = {"n": 0}

    def failing(self: OwnedFolder, relative: str, text: str, **kwargs: Any) -> Path:
        calls["n"] += 1
        if calls["n"] == 4:  # the pending record and two files are written, the third fails
            raise OSError(28, "No space left on device")
        return real(self, relative, text, **kwargs)

    monkeypatch.setattr(OwnedFolder, "write", failing)
    with pytest.raises(OSError):
        _write(out, name="other")
    monkeypatch.undo()
    assert "pending" in json.loads((out / outdir.RECORD).read_text())
    assert not [path for path in tmp_path.rglob(".*.tmp")]  # no staging left
    done = _write(out, name="other")  # no --force: half-written files are still the render's
    record = json.loads((out / outdir.RECORD).read_text())
    assert "pending" not in record and sorted(record["files"]) == sorted(
        path.name for path in done.files)
    assert sorted(path.name for path in out.iterdir()) == sorted([outdir.RECORD, *record["files"]])


def test_up_refuses_a_profile_spanning_hosts() -> None:
    deployment = _deployment(TWO_HOSTS, "gathercast")
    with pytest.raises(UsageError, match="spans 2 hosts"):
        up(deployment, Launch(engine=FakeEngine(), image_for=lambda _: IMAGE,
                                         verify=None, state=None))


def test_nnodes_renders_only_above_one() -> None:
    # the goldens stay as they were
    assert "--nnodes" not in check_argv(_deployment(GLM, "gathercast"))
    assert check_argv(_deployment(TWO_HOSTS, "gathercast")).count("--nnodes") == 1


def _forge(out: Path, name: str) -> None:
    """Name `name` in the record with its current hash, as a tampered record would."""
    record = json.loads((out / outdir.RECORD).read_text())
    record["files"][name] = hashlib.sha256((out / name).read_bytes()).hexdigest()
    (out / outdir.RECORD).write_text(json.dumps(record))


@pytest.mark.parametrize("force", [False, True])
def test_a_tampered_record_never_gets_an_operators_file_deleted(force: bool,
                                                                tmp_path: Path) -> None:
    out = tmp_path / "base"
    _write(out)
    (out / "overlay-notes.yaml").write_text("mine: true\n")
    _forge(out, "overlay-notes.yaml")
    with pytest.raises(UsageError, match="names overlay-notes.yaml, which lacks .* never deleted"):
        _write(out, force=force)
    assert (out / "overlay-notes.yaml").read_text() == "mine: true\n"


def test_a_tampered_record_never_gets_an_operators_file_overwritten_without_force(
        tmp_path: Path) -> None:
    out = tmp_path / "base"
    first = _write(out)
    taken = first.files[0]
    taken.write_text("mine: true\n")
    _forge(out, taken.name)  # the record's hash now matches the operator's file
    with pytest.raises(UsageError, match=f"{taken.name} was edited"):
        _write(out)
    assert taken.read_text() == "mine: true\n"
    _write(out, force=True)
    assert taken.read_text().startswith(f"# {outdir.MARKER}")


def test_a_recorded_file_that_became_a_link_is_neither_followed_nor_deleted(
        tmp_path: Path) -> None:
    out = tmp_path / "base"
    first = _write(out)
    outside = tmp_path / "outside.yaml"
    outside.write_text(first.files[0].read_text())  # even with the marker
    first.files[0].unlink()
    first.files[0].symlink_to(outside)
    for force in (False, True):
        with pytest.raises(UsageError, match="is a symbolic link"):
            _write(out, force=force, name="other")
    assert outside.read_text().startswith(f"# {outdir.MARKER}") and first.files[0].is_symlink()


def test_a_linked_record_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    _write(elsewhere)
    out = tmp_path / "base"
    out.mkdir()
    (out / outdir.RECORD).symlink_to(elsewhere / outdir.RECORD)
    with pytest.raises(UsageError, match="symbolic link"):
        _write(out, force=True)
    assert sorted(path.name for path in out.iterdir()) == [outdir.RECORD]


def test_every_file_render_writes_carries_the_marker(tmp_path: Path) -> None:
    out = tmp_path / "base"
    _write(out)
    for path in out.iterdir():
        assert outdir.MARKER in path.read_text()[:MARKER_WINDOW], path.name
