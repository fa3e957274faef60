"""`opsctl render k8s`: golden manifests per profile and variant, the argv byte-identical to
`up`'s, and every refusal (exit 2) before anything is written.

Regenerate the goldens after an intended change with
`OPSCTL_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render_k8s.py` and review the diff.
"""

from __future__ import annotations

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
from opsctl.deploy import app as deploy_app
from opsctl.deploy.launch import Launch
from opsctl.observe import dashboard
from opsctl.observe.promnames import slo_rules
from opsctl.observe.promrules import PRODUCTION_TIMING, alert_rules, recording_rules
from opsctl.render import app as render
from opsctl.render.monitoring import SGLANG_JOB
from opsctl.render.serving import LWS_WORKER_INDEX_LABEL

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


def _kind(objects: list[dict[str, Any]], kind: str, role: str = labels.ROLE_SERVER) -> dict[str, Any]:
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
    objects = render.render_objects(_deployment(profile, variant), IMAGE, replicas=replicas)
    for obj in objects:  # the dashboard is the same for all; a test below compares it whole
        if obj["kind"] == "ConfigMap":
            obj["data"] = {key: ELIDED for key in obj["data"]}
    files = render.manifest_files(objects)
    text = "---\n".join(f"# file: {name}\n{body}" for name, body in files.items())
    path = GOLDEN / "k8s" / f"{Path(profile).stem}.{variant}.yaml"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with OPSCTL_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text()
    assert len(list(yaml.safe_load_all(text))) == len(files)


@pytest.mark.parametrize(("profile", "variant", "replicas"), CASES)
def test_args_are_ups_argv(profile: str, variant: str, replicas: int) -> None:
    deployment = _deployment(profile, variant)
    objects = render.render_objects(deployment, IMAGE, replicas=replicas)
    argv = run_spec(deployment, IMAGE).command
    assert argv == check_argv(deployment)
    for pod in _pod_specs(objects):
        (container,) = pod["containers"]
        assert "command" not in container  # like `docker run IMAGE ARGV`: the image's entrypoint stays
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
    for pod in _pod_specs(render.render_objects(deployment, IMAGE, replicas=replicas)):
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
        model = deployment.profile.model
        if model.host_path:
            assert volumes["model"]["hostPath"]["path"] == model.host_path
            assert mounts["model"] == {"name": "model", "mountPath": model.container_path,
                                       "readOnly": True}
        assert pod["terminationGracePeriodSeconds"] == container_settings.stop_grace_seconds
        assert pod["enableServiceLinks"] is False


def test_shm_is_sized_from_the_profile_only_when_it_gives_a_size() -> None:
    sim = _pod_specs(render.render_objects(_deployment("sim", "gathercast"), IMAGE))[0]
    glm = _pod_specs(render.render_objects(_deployment(GLM, "gathercast"), IMAGE))[0]
    assert sim["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}  # shm_size: 64m
    assert glm["volumes"][0]["emptyDir"] == {"medium": "Memory"}  # ipc_host: no size to take


def test_probes_cover_the_load_and_mean_ups_readiness() -> None:
    deployment = _deployment(GLM, "gathercast")
    (container,) = _pod_specs(render.render_objects(deployment, IMAGE))[0]["containers"]
    startup = container["startupProbe"]
    budget = startup["failureThreshold"] * startup["periodSeconds"]
    assert budget >= deployment.profile.readiness.timeout_seconds
    assert startup["httpGet"]["path"] == "/health"
    ready = container["readinessProbe"]["exec"]["command"]
    assert ready[:2] == ["python3", "-c"] and "/health_generate" in ready[2] and "/v1/models" in ready[2]
    assert ready[3:] == ["http://127.0.0.1:30000", "glm-5"]
    live = container["livenessProbe"]
    assert live["httpGet"]["path"] == "/health"  # never /health_generate: no generation, no scheduler
    assert live["failureThreshold"] * live["periodSeconds"] >= 60


def test_multi_host_renders_a_leader_worker_set_and_the_router_picks_leaders() -> None:
    objects = render.render_objects(_deployment(TWO_HOSTS, "gathercast"), IMAGE, replicas=2)
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
    objects = render.render_objects(_deployment(GLM, "gathercast"), IMAGE, replicas=2,
                                    namespace="llm")
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
        render.render_objects(deployment, IMAGE, **options)
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
    no_weights = glm.profile.model_copy(update={"model": glm.profile.model.model_copy(
        update={"host_path": None})})
    assert "no model.host_path" in _refused(glm.model_copy(update={"profile": no_weights}))
    render.render_objects(glm.model_copy(update={"profile": no_weights}), IMAGE, model_pvc="weights")
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
    objects = render.render_objects(_deployment(GLM, "gathercast"), IMAGE, model_pvc="glm5-weights",
                                    cache_pvc="jit-cache")
    volumes = {volume["name"]: volume for volume in _pod_specs(objects)[0]["volumes"]}
    assert volumes["model"] == {"name": "model", "persistentVolumeClaim": {
        "claimName": "glm5-weights", "readOnly": True}}
    assert volumes["cache"]["persistentVolumeClaim"] == {"claimName": "jit-cache"}


def _write(out: Path, pushed: bool = False, **options: Any) -> render.RenderResult:
    ref = ("registry.example/opsctl/sglang-glm5@sha256:" + "b" * 64, True) if pushed \
        else ("opsctl/sglang-glm5:local", False)
    return render.render_k8s(_deployment(GLM, "gathercast"), image_ref=lambda _: ref, out=out,
                             replicas=2, **options)


def test_render_writes_one_file_per_object_and_flags_a_local_tag(tmp_path: Path) -> None:
    local = _write(tmp_path / "local")
    assert not local.pushed and len(local.files) == len(local.objects)
    assert all("NOT DEPLOYABLE" in path.read_text() for path in local.files)
    assert any("hostPath" in note for note in local.notes)
    pushed = _write(tmp_path / "pushed", pushed=True)
    text = "".join(path.read_text() for path in pushed.files)
    assert "NOT DEPLOYABLE" not in text and "@sha256:" + "b" * 64 in text


def test_out_is_replaced_only_with_force_and_only_when_it_holds_a_render(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    first = _write(out)
    with pytest.raises(UsageError, match="earlier render"):
        _write(out)
    second = _write(out, force=True, name="other")
    assert sorted(out.iterdir()) == sorted(second.files) and first.files[0] not in second.files
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="did not write"):
        _write(out, force=True)
    assert (out / "notes.txt").read_text() == "mine"


def test_out_that_a_whole_replace_would_betray_is_refused(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic link would be renamed away (its target left stale, the link left behind);
    the current directory (`.`, or `x/..`) would be replaced under the shell standing in it."""
    target = tmp_path / "real"
    _write(target)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        _write(tmp_path / "link", force=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for out in (Path("."), Path("x/.."), Path("..")):
        with pytest.raises(UsageError, match="current directory"):
            _write(out, force=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link", "real", "work"]
    assert not any((tmp_path / "work").iterdir())
    written = _write(Path("sub/../k8s"))
    assert written.out == tmp_path / "work" / "k8s" and sorted(
        path.name for path in (tmp_path / "work").iterdir()) == ["k8s"]


def test_a_failed_write_leaves_the_earlier_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    out = tmp_path / "manifests"
    before = {path.name: path.read_text() for path in _write(out).files}
    real = Path.write_text
    calls = {"n": 0}

    def failing(self: Path, text: str, *args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(OSError):
        _write(out, force=True)
    monkeypatch.undo()
    assert {path.name: path.read_text() for path in out.iterdir()} == before
    assert [path.name for path in tmp_path.iterdir()] == ["manifests"]  # no staging left


def test_up_refuses_a_profile_spanning_hosts() -> None:
    deployment = _deployment(TWO_HOSTS, "gathercast")
    with pytest.raises(UsageError, match="spans 2 hosts"):
        deploy_app.up(deployment, Launch(engine=FakeEngine(), image_for=lambda _: IMAGE,
                                         verify=None, state=None))


def test_nnodes_renders_only_above_one() -> None:
    assert "--nnodes" not in check_argv(_deployment(GLM, "gathercast"))  # the goldens stay as they were
    assert check_argv(_deployment(TWO_HOSTS, "gathercast")).count("--nnodes") == 1


