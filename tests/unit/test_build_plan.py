"""`opsctl build` without an engine: planning, content hash, lock file, failure handling (fake
engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from opsctl.argspec.stack import stack_path
from opsctl.config import patchsets
from opsctl.config.profiles import PATCH_SWITCH_ENV, Profile, load_profile
from opsctl.core.errors import EXIT_BUILD, EXIT_USAGE, BuildError, ProfileError, UsageError
from opsctl.engine.api import BuildEvent
from opsctl.image import app as image_app
from opsctl.image import build, imagecheck, lock, patchset, trust
from opsctl.image.plan import BuildPlan, expected_image, plan, plans
from opsctl.image.view import BuildView

STANDIN = "opsctl/sglang-standin:0.5.23"
BASE_ID = "sha256:" + "a" * 64


@pytest.fixture(autouse=True)
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "locks"
    monkeypatch.setenv(lock.LOCK_DIR_ENV, str(path))
    monkeypatch.setenv("OPSCTL_STATE_DIR", str(tmp_path / "state"))  # the verification records
    return path


def sglang_profile(**image: Any) -> Profile:
    """deploy/sim.yaml turned into a patched-sglang profile (independent of the real profile's
    flags)."""
    sim = load_profile("sim")
    spec = sim.image.model_copy(
        update={
            "kind": "sglang",
            "repository": "opsctl/test-sglang",
            "base": "lmsysorg/sglang:v0.5.21-cu130",
            "dockerfile": "docker/Dockerfile",
            **image,
        }
    )
    return sim.model_copy(update={"name": "unit-sglang", "image": spec})


class FakeEngine:
    """Just enough of `Engine` for build(): images by ref, a scripted build and verification."""

    def __init__(self) -> None:
        self.images: dict[str, dict[str, Any]] = {
            STANDIN: {"id": BASE_ID, "labels": {}, "digests": []}
        }
        self.build_events: list[BuildEvent] = []
        self.build_fails = False
        self.verify_output = ""
        self.verify_code = 0
        self.removed: list[str] = []
        self.removed_if_unused: list[str] = []
        self.built: list[dict[str, Any]] = []

    def image_id(self, ref: str) -> str | None:
        image = self.images.get(ref)
        return image["id"] if image else None

    def image_labels(self, ref: str) -> dict[str, str] | None:
        image = self.images.get(ref)
        return dict(image["labels"]) if image else None

    def image_repo_digests(self, ref: str) -> list[str]:
        image = self.images.get(ref)
        return list(image["digests"]) if image else []

    def build(self, context_dir: Path, dockerfile: str, tag: str, build_args: dict[str, str],
              labels: dict[str, str], on_event: Callable[[BuildEvent], None]) -> str:
        self.built.append(
            {
                "context": sorted(
                    p.relative_to(context_dir).as_posix()
                    for p in context_dir.rglob("*")
                    if p.is_file()
                ),
                "build_args": build_args,
                "labels": labels,
                "expect": json.loads((context_dir / "opsctl-build/expect.json").read_text()),
            }
        )
        for event in self.build_events:
            on_event(event)
        if self.build_fails:
            raise BuildError("build failed at Step 3/3: The command returned a non-zero code: 3")
        self.images[tag] = {"id": "sha256:" + "b" * 64, "labels": labels, "digests": []}
        return "sha256:" + "b" * 64

    def run_to_completion(self, image: str, command: list[str]) -> tuple[int, str]:
        return self.verify_code, self.verify_output

    def remove_image(self, ref: str) -> None:
        self.removed.append(ref)

    def remove_image_if_unused(self, image_id: str) -> bool:
        self.removed_if_unused.append(image_id)
        return True

    def tag_image(self, image_id: str, ref: str) -> None:
        self.images[ref] = next(i for i in self.images.values() if i["id"] == image_id)


def passing_report() -> str:
    return json.dumps(
        {"ok": True, "results": [{"check": "sglang version", "ok": True, "detail": "x"}]}
    )


# --- planning ------------------------------------------------------------------------------------


def test_sglang_plan_stages_the_patch_set_and_expects_the_manifest_hashes() -> None:
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    manifest = patchsets.load_manifest("0.5.23")
    assert "opsctl-build/patchset.py" in the_plan.files
    assert "opsctl-build/imagecheck.py" in the_plan.files
    assert "opsctl-build/patches/manifest.json" in the_plan.files
    for entry in manifest["files"]:
        assert f"opsctl-build/patches/{entry['diff']}" in the_plan.files
        assert the_plan.expect["files"][entry["path"]] == entry["patched_sha256"]
    for entry in manifest["new_files"]:
        assert the_plan.expect["files"][entry["destination"]] == entry["sha256"]
    assert the_plan.expect["switch"] == PATCH_SWITCH_ENV
    assert the_plan.expect["distributions"] == {"sglang": "0.5.23"}
    assert the_plan.patch_set_sha256 == patchset.patch_set_sha256("0.5.23")
    assert the_plan.base_image == STANDIN and the_plan.base_overridden


def test_simulator_plan_stages_the_sim_package_and_a_pinned_wheel() -> None:
    the_plan = plan(load_profile("sim"))
    assert the_plan.kind == "simulator" and the_plan.patch_set_sha256 is None
    assert "app/opsctl/__init__.py" in the_plan.files
    assert any(name.startswith("app/opsctl/sim/") for name in the_plan.files)
    wheels = [name for name in the_plan.files if name.startswith("wheels/")]
    assert len(wheels) == 1 and wheels[0].startswith("wheels/prometheus_client-")
    assert the_plan.static_labels()["opsctl.patch-sha256"] == "none"


def test_content_hash_follows_every_input(tmp_path: Path) -> None:
    the_plan = plan(sglang_profile())
    first = the_plan.content_hash(BASE_ID)
    assert first == plan(sglang_profile()).content_hash(BASE_ID)
    assert first != the_plan.content_hash("sha256:" + "c" * 64)
    with_arg = plan(sglang_profile(build_args={"TORCH_CUDA_ARCH_LIST": "12.0a;9.0a"}))
    assert with_arg.content_hash(BASE_ID) != first
    changed = tmp_path / "kernel.py"
    changed.write_text("# another kernel\n")
    files = {**the_plan.files, "opsctl-build/patches/kv_gather_cast.py": changed}
    assert BuildPlan(**{**the_plan.__dict__, "files": files}).content_hash(BASE_ID) != first
    tag = the_plan.content_tag(BASE_ID)
    assert tag == f"opsctl/test-sglang:0.5.23-{first[:16]}"


def test_dry_run_rows_say_the_tag_waits_for_the_first_lock() -> None:
    rows = dict(plan(sglang_profile()).describe())
    assert "not locked yet" in rows["base digest"]
    assert "decided once the base digest is known" in rows["tag"]
    assert rows["patch set"] == f"sha256 {patchset.patch_set_sha256('0.5.23')}"


@pytest.mark.parametrize("name", ["HF_TOKEN", "hub_api_key", "REGISTRY_PASSWORD", "MY_SECRET"])
def test_secret_looking_build_args_are_refused(name: str) -> None:
    with pytest.raises(ProfileError, match="looks like a secret") as info:
        plan(sglang_profile(build_args={name: "x"}))
    assert info.value.exit_code == EXIT_USAGE


def test_build_args_that_opsctl_sets_are_refused() -> None:
    with pytest.raises(ProfileError, match="set by opsctl itself"):
        plan(sglang_profile(build_args={"BASE_IMAGE": "evil:latest"}))


def test_bad_tag_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="is not repository:tag") as info:
        plan(sglang_profile(), tag="no-tag-here")
    assert info.value.exit_code == EXIT_USAGE


def test_expected_image_follows_the_lock(lock_dir: Path) -> None:
    profile = sglang_profile()
    assert expected_image(profile.resolve()).endswith("-not-built")
    the_plan = plan(profile)
    base = lock.BaseResolution(profile.image.base, BASE_ID, BASE_ID, "image-id")
    lock.write_lock(the_plan.lock_path, profile.name, base)
    assert expected_image(profile.resolve()) == the_plan.content_tag(BASE_ID)


# --- one image per release the variants pin ------------------------------------------------------


OLD_BASE = "registry.test/sglang:0.5.15"  # a name for the test, not a published image


def two_release_profile(tmp_path: Path) -> Profile:
    """The GLM profile plus a variant `old` on sglang 0.5.15 (a test base image name)."""
    text = (Path(__file__).parents[2] / "deploy" / "glm5-nvfp4-rtx6000.yaml").read_text()
    text = text.replace("default_variant: gathercast", (
        "  old:\n    description: the same on 0.5.15\n"
        f'    image: {{sglang_version: "0.5.15", base: "{OLD_BASE}", install_release: false}}\n'
        "    server: {disable_prefill_cuda_graph: false}\n"
        "default_variant: gathercast"))
    path = tmp_path / "two.yaml"
    path.write_text(text)
    return load_profile(str(path))


def test_the_real_profile_needs_one_image(tmp_path: Path) -> None:
    [only] = plans(load_profile("glm5-nvfp4-rtx6000"))
    assert (only.sglang_version, only.base_image) == ("0.5.23", "lmsysorg/sglang:v0.5.21-cu130")
    assert only.variants == ("baseline", "gathercast", "bf16kv", "bf16kv-mtp", "fp8kv-mtp",
                             "gathercast-mtp", "native", "native-mtp")
    assert only.patch_set_sha256 == patchset.patch_set_sha256("0.5.23")
    [sim] = plans(load_profile("sim"))
    assert sim.variants == ("baseline", "gathercast", "bf16kv", "bf16kv-mtp", "fp8kv-mtp",
                            "gathercast-mtp", "native", "corrupt")


def test_a_profile_needs_one_image_per_release(tmp_path: Path) -> None:
    profile = two_release_profile(tmp_path)
    new, old = plans(profile)
    assert (old.sglang_version, old.base_image, old.variants) == (
        "0.5.15", OLD_BASE, ("old",))
    assert (new.sglang_version, new.base_image) == ("0.5.23", "lmsysorg/sglang:v0.5.21-cu130")
    # Each image carries its release's patch set, whether its variants switch it on or not.
    assert (old.patch_set_sha256, new.patch_set_sha256) == (
        patchset.patch_set_sha256("0.5.15"), patchset.patch_set_sha256("0.5.23"))
    # 0.5.23 is installed into a base of another release: every == pin of its wheel is proven.
    stack = json.loads(Path(stack_path("0.5.23")).read_text())
    assert new.expect["distributions"] == new.expect["overlay"]["pins"]
    assert new.expect["overlay"]["wheel_sha256"] == stack["provenance"]["wheel_sha256"]
    assert new.expect["distributions"] == {**stack["pins"], "sglang": "0.5.23"}
    assert old.expect["distributions"] == {"sglang": "0.5.15"}
    assert old.content_tag(BASE_ID) != new.content_tag(BASE_ID)
    assert old.lock_path == new.lock_path  # one lock file per profile, keyed by base
    assert [p.sglang_version for p in plans(profile, variant="native")] == ["0.5.23"]
    assert [p.sglang_version for p in plans(profile, variant="old")] == ["0.5.15"]


def test_expected_image_is_the_variants_image(lock_dir: Path, tmp_path: Path) -> None:
    profile = two_release_profile(tmp_path)
    new, old = plans(profile)
    for the_plan in (old, new):
        lock.write_lock(the_plan.lock_path, profile.name,
                        lock.BaseResolution(the_plan.base_image, BASE_ID, BASE_ID, "image-id"))
    assert expected_image(profile.resolve("native")) == new.content_tag(BASE_ID)
    assert expected_image(profile.resolve("old")) == old.content_tag(BASE_ID)
    assert new.content_tag(BASE_ID).startswith("opsctl/sglang-glm5:0.5.23-")


@pytest.mark.parametrize("option", ["base_image", "tag"])
def test_base_image_and_tag_name_one_image(option: str, tmp_path: Path) -> None:
    profile = two_release_profile(tmp_path)
    with pytest.raises(UsageError, match=r"needs 2 images \(sglang 0.5.23, 0.5.15\)") as info:
        plans(profile, **{option: "opsctl/x:1"})
    assert "--variant" in info.value.hint
    [only] = plans(profile, variant="native", **{option: "opsctl/x:1"})
    assert only.sglang_version == "0.5.23"


# --- base resolution and the lock file -----------------------------------------------------------


def test_resolve_base_prefers_the_registry_digest() -> None:
    engine = FakeEngine()
    digest = "sha256:" + "d" * 64
    engine.images["lmsysorg/sglang:v0.5.21-cu130"] = {
        "id": BASE_ID, "labels": {},
        "digests": [f"other/repo@sha256:{'e' * 64}", f"lmsysorg/sglang@{digest}"]}
    resolved = build.resolve_base(engine, "lmsysorg/sglang:v0.5.21-cu130")  # type: ignore[arg-type]
    assert (resolved.kind, resolved.digest) == ("repo-digest", digest)
    assert resolved.from_ref == f"lmsysorg/sglang@{digest}"


def test_resolve_base_falls_back_to_the_image_id_for_local_images() -> None:
    resolved = build.resolve_base(FakeEngine(), STANDIN)  # type: ignore[arg-type]
    assert (resolved.kind, resolved.digest, resolved.from_ref) == ("image-id", BASE_ID, BASE_ID)


def test_missing_base_says_opsctl_never_pulls() -> None:
    with pytest.raises(BuildError, match="not present") as info:
        build.resolve_base(FakeEngine(), "lmsysorg/sglang:v0.5.21-cu130")  # type: ignore[arg-type]
    assert "docker pull lmsysorg/sglang:v0.5.21-cu130" in info.value.hint
    assert info.value.exit_code == EXIT_BUILD


def test_lock_round_trip_and_corrupt_lock(lock_dir: Path) -> None:
    path = lock_dir / "p.json"
    assert lock.read_lock(path) == {}
    lock.write_lock(path, "p", lock.BaseResolution("a:1", BASE_ID, BASE_ID, "image-id"))
    lock.write_lock(
        path,
        "p",
        lock.BaseResolution("b:2", "b@sha256:" + "f" * 64, "sha256:" + "f" * 64, "repo-digest"),
    )
    assert lock.read_lock(path) == {"a:1": {"digest": BASE_ID, "kind": "image-id"},
                                     "b:2": {"digest": "sha256:" + "f" * 64, "kind": "repo-digest"}}
    assert not list(lock_dir.glob("*.tmp")) and not list(lock_dir.glob(".*.tmp"))
    for corrupt in ("{not json", '{"bases": []}', '{"bases": {"a:1": "sha256:x"}}', "[]"):
        path.write_text(corrupt)
        with pytest.raises(BuildError, match="not valid") as info:
            lock.read_lock(path)
        assert info.value.exit_code == EXIT_BUILD


# --- build() against a fake engine ---------------------------------------------------------------


def test_first_build_stages_builds_verifies_and_locks() -> None:
    engine = FakeEngine()
    engine.verify_output = "some log\n" + passing_report()
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    result = build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert not result.skipped and result.tag == the_plan.content_tag(BASE_ID)
    built = engine.built[0]
    assert built["build_args"]["BASE_IMAGE"] == BASE_ID  # FROM is pinned to the resolved base
    assert built["build_args"]["SGLANG_VERSION"] == "0.5.23"
    assert "opsctl-build/build.json" in built["context"] and "Dockerfile" in built["context"]
    assert built["expect"]["content_hash"] == result.content_hash
    labels = built["labels"]
    assert labels["opsctl.content-hash"] == result.content_hash
    assert labels["opsctl.base-digest"] == labels["org.opencontainers.image.base.digest"] == BASE_ID
    assert labels["opsctl.patch-sha256"] == patchset.patch_set_sha256("0.5.23")
    assert "org.opencontainers.image.created" not in labels
    assert lock.read_lock(the_plan.lock_path)[STANDIN]["digest"] == BASE_ID


def test_existing_verified_tag_with_the_same_content_is_skipped() -> None:
    engine = FakeEngine()
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    tag = the_plan.content_tag(BASE_ID)
    engine.images[tag] = {"id": "sha256:" + "9" * 64, "digests": [],
                          "labels": {"opsctl.content-hash": the_plan.content_hash(BASE_ID)}}
    trust.record_verified("sha256:" + "9" * 64, tag, the_plan.content_hash(BASE_ID))
    events: list[BuildEvent] = []
    result = build.build(the_plan, engine, force=False, on_event=events.append)  # type: ignore[arg-type]
    assert result.skipped and not engine.built
    assert any("up to date" in e.text for e in events)


def test_existing_tag_never_verified_here_is_verified_again_not_trusted() -> None:
    engine = FakeEngine()
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    tag, image_id = the_plan.content_tag(BASE_ID), "sha256:" + "9" * 64
    content = the_plan.content_hash(BASE_ID)
    engine.images[tag] = {"id": image_id, "digests": [], "labels": {"opsctl.content-hash": content}}
    engine.verify_code, engine.verify_output = 1, "python3: not found"
    with pytest.raises(BuildError, match="did not run"):
        build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert engine.removed == [image_id] and not trust.is_verified(image_id, content)
    engine.verify_code, engine.verify_output = 0, passing_report()
    result = build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert result.reverified and not result.skipped and not engine.built
    assert trust.is_verified(image_id, content)


def test_ctrl_c_during_verification_leaves_no_trusted_image() -> None:
    engine = FakeEngine()

    def interrupted(image: str, command: list[str]) -> tuple[int, str]:
        raise KeyboardInterrupt

    engine.run_to_completion = interrupted  # type: ignore[method-assign]
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    with pytest.raises(KeyboardInterrupt):
        build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    built = "sha256:" + "b" * 64
    assert engine.removed == [built]
    assert not trust.is_verified(built, the_plan.content_hash(BASE_ID))
    assert not lock.read_lock(the_plan.lock_path)


def _verified_then_forced(new_id: str) -> tuple[FakeEngine, str, str, str]:
    """A verified image under the plan's tag, then `build --force` (rebuilding as `new_id`)
    with a Ctrl-C during the new image's verification."""
    engine = FakeEngine()
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    tag, old_id = the_plan.content_tag(BASE_ID), "sha256:" + "9" * 64
    content = the_plan.content_hash(BASE_ID)
    engine.images[tag] = {"id": old_id, "digests": [], "labels": {"opsctl.content-hash": content}}
    trust.record_verified(old_id, tag, content)
    real_build = engine.build

    def rebuild(*args: Any) -> str:
        if new_id != old_id:  # the engine moves the tag; the old image stays, untagged
            engine.images["<none>:<none>"] = engine.images[tag]
        real_build(*args)
        engine.images[tag] = {**engine.images[tag], "id": new_id}
        return new_id

    def interrupted(image: str, command: list[str]) -> tuple[int, str]:
        raise KeyboardInterrupt

    engine.build = rebuild  # type: ignore[method-assign, assignment]
    engine.run_to_completion = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        build.build(the_plan, engine, force=True, on_event=lambda e: None)  # type: ignore[arg-type]
    return engine, tag, old_id, content


def test_force_interrupted_in_verification_keeps_the_verified_image_it_reproduced() -> None:
    """Issue 25, L: an unchanged --force rebuild is the verified image itself; the Ctrl-C
    removed it, leaving no tagged image."""
    engine, tag, old_id, content = _verified_then_forced("sha256:" + "9" * 64)
    assert engine.removed == [] and engine.image_id(tag) == old_id
    assert trust.is_verified(old_id, content)


def test_force_interrupted_in_verification_gives_the_tag_back_to_the_verified_image() -> None:
    """Issue 25, L: a changed rebuild took the tag; the Ctrl-C removed it, and the verified
    image was left untagged."""
    new_id = "sha256:" + "c" * 64
    engine, tag, old_id, content = _verified_then_forced(new_id)
    assert engine.removed == [new_id] and engine.image_id(tag) == old_id
    assert trust.is_verified(old_id, content) and not trust.is_verified(new_id, content)


def test_custom_tag_holding_other_content_is_not_overwritten_without_force() -> None:
    engine = FakeEngine()
    engine.images["mine:1"] = {"id": "sha256:" + "9" * 64, "digests": [],
                               "labels": {"opsctl.content-hash": "something else"}}
    the_plan = plan(sglang_profile(), base_image=STANDIN, tag="mine:1")
    with pytest.raises(BuildError, match="built from other inputs"):
        build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]


def test_moved_base_fails_unless_forced_and_force_relocks_loudly() -> None:
    engine = FakeEngine()
    engine.verify_output = passing_report()
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    old = "sha256:" + "0" * 64
    old_base = lock.BaseResolution(STANDIN, old, old, "image-id")
    lock.write_lock(the_plan.lock_path, the_plan.profile, old_base)
    with pytest.raises(BuildError, match="locked") as info:
        build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert "--force" in info.value.hint and not engine.built
    events: list[BuildEvent] = []
    result = build.build(the_plan, engine, force=True, on_event=events.append)  # type: ignore[arg-type]
    assert result.relocked
    assert any("WARNING: re-locking" in e.text for e in events)
    assert lock.read_lock(the_plan.lock_path)[STANDIN]["digest"] == BASE_ID


def test_failed_step_names_the_reason_and_removes_only_new_layers() -> None:
    engine = FakeEngine()
    engine.build_fails = True
    step = "Step 3/3 : RUN python3 /opt/opsctl/build/patchset.py apply"
    engine.build_events = [
        BuildEvent("Step 1/3 : FROM x", step="Step 1/3 : FROM x"),
        BuildEvent(" ---> Using cache", step="Step 1/3 : FROM x"),
        BuildEvent(" ---> 111111111111", step="Step 1/3 : FROM x"),
        BuildEvent("Step 2/3 : COPY a b", step="Step 2/3 : COPY a b"),
        BuildEvent(" ---> 222222222222", step="Step 2/3 : COPY a b"),
        BuildEvent(step, step=step),
        BuildEvent(" ---> Running in 333333333333", step=step),
        BuildEvent("error: flashinfer_mla_backend.py.diff: 1 of 3 hunks rejected", step=step),
        BuildEvent("hint: the upstream file differs", step=step),
    ]
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    with pytest.raises(BuildError) as info:
        build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert info.value.message == ("flashinfer_mla_backend.py.diff: 1 of 3 hunks rejected "
                                  "(build step 3/3 failed)")
    assert engine.removed_if_unused == ["222222222222"]  # the cache hit stays
    assert not lock.read_lock(the_plan.lock_path)  # a failed build locks nothing


def test_verification_failure_removes_the_image() -> None:
    engine = FakeEngine()
    engine.verify_code = 1
    engine.verify_output = json.dumps({"ok": False, "results": [
        {"check": "sglang version", "ok": False, "detail": "installed 0.5.15, pinned 0.5.23"}]})
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    with pytest.raises(BuildError, match="verification failed: sglang version: installed 0.5.15"):
        build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert engine.removed == ["sha256:" + "b" * 64]


def test_verification_that_prints_no_report_fails() -> None:
    engine = FakeEngine()
    engine.verify_code = 127
    engine.verify_output = "python3: not found"
    the_plan = plan(sglang_profile(), base_image=STANDIN)
    with pytest.raises(BuildError, match="did not run"):
        build.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert engine.removed


# --- imagecheck, run as the image runs it ---------------------------------------------------------


SWITCH_MODULE = f"""
SWITCH_ENV = "{PATCH_SWITCH_ENV}"

def switch_enabled(environ):
    return environ.get(SWITCH_ENV, "") == "1"
"""


def fake_site(root: Path, version: str, content: bytes, switch_module: str = SWITCH_MODULE) -> Path:
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("raise ImportError('never imported')\n")
    (root / "sglang" / "srt" / "mod.py").write_bytes(content)
    (root / "sglang" / "srt" / "switchmod.py").write_text(switch_module)
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


def expectations(site: Path, version: str = "0.5.23") -> dict[str, Any]:
    import hashlib

    files = {rel: hashlib.sha256((site / rel).read_bytes()).hexdigest()
             for rel in ("sglang/srt/mod.py", "sglang/srt/switchmod.py")}
    return {"distributions": {"sglang": version}, "switch": PATCH_SWITCH_ENV,
            "switch_module": "sglang/srt/switchmod.py", "files": files}


def run_imagecheck(site: Path, expect: dict[str, Any], *flags: str) -> tuple[int, dict[str, Any]]:
    source = Path(imagecheck.__file__).read_text()
    result = subprocess.run(
        [sys.executable, "-S", "-c", source, json.dumps(expect), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    return result.returncode, json.loads(result.stdout.splitlines()[-1])


def test_imagecheck_passes_on_the_expected_tree_and_compiles(tmp_path: Path) -> None:
    site = fake_site(tmp_path / "site", "0.5.23", b"from sglang.srt import switchmod\n")
    expect = expectations(site)
    code, report = run_imagecheck(site, expect, "--compile")
    assert code == 0 and report["ok"], report
    assert {r["check"] for r in report["results"]} >= {
        "sglang version",
        "pyc sglang/srt/mod.py",
        "runtime switch",
        "patched code uses the switch module",
    }
    code, report = run_imagecheck(site, expect)  # the post-build run finds the .pyc
    assert code == 0, report


def test_imagecheck_reports_each_mismatch(tmp_path: Path) -> None:
    site = fake_site(
        tmp_path / "site",
        "0.5.15",
        b"stock = True\n",
        switch_module='SWITCH_ENV = "OTHER"\ndef switch_enabled(e):\n    return True\n',
    )
    expect = {**expectations(site, "0.5.23"),
              "files": {"sglang/srt/mod.py": "0" * 64, "sglang/srt/switchmod.py": "0" * 64}}
    code, report = run_imagecheck(site, expect)
    failed = {r["check"] for r in report["results"] if not r["ok"]}
    assert code == 1
    assert failed == {"sglang version", "sha256 sglang/srt/mod.py", "pyc sglang/srt/mod.py",
                      "sha256 sglang/srt/switchmod.py", "pyc sglang/srt/switchmod.py",
                      "runtime switch", "patched code uses the switch module"}


def test_imagecheck_flips_the_switch_it_finds(tmp_path: Path) -> None:
    always_on = 'SWITCH_ENV = "OPSCTL_KV_GATHER_CAST"\ndef switch_enabled(e):\n    return True\n'
    site = fake_site(tmp_path / "site", "0.5.23", b"from sglang.srt import switchmod\n", always_on)
    code, report = run_imagecheck(site, expectations(site))
    switch = next(r for r in report["results"] if r["check"] == "runtime switch")
    assert code == 1 and not switch["ok"] and "=0 -> True" in switch["detail"]


# --- the terminal view ----------------------------------------------------------------------------


def test_build_view_prints_the_failing_step_and_its_tail() -> None:
    console = Console(record=True, width=200, force_terminal=False)
    step = "Step 8/9 : RUN python3 patchset.py apply"
    with pytest.raises(BuildError), BuildView(console, "building") as view:
        view.on_event(BuildEvent("Step 7/9 : COPY x y", step="Step 7/9 : COPY x y"))
        view.on_event(BuildEvent(step, step=step))
        view.on_event(BuildEvent("\x1b[91merror: hunk #1 FAILED\x1b[0m", step=step))
        raise BuildError("build failed")
    text = console.export_text()
    assert "Step 7/9 : COPY x y" in text
    assert f"failing step: {step}" in text
    assert "| error: hunk #1 FAILED" in text and "\x1b" not in text


def test_a_missing_opsctl_debian_base_is_built_not_pulled(monkeypatch: pytest.MonkeyPatch) -> None:
    from opsctl.image import baseimage

    engine = FakeEngine()
    engine.verify_output = passing_report()
    made: list[bool] = []

    def fake_build_debian_base(
        eng: FakeEngine, force: bool, on_event: Callable[[BuildEvent], None]
    ) -> None:
        made.append(force)
        eng.images[baseimage.DEBIAN_BASE] = {"id": BASE_ID, "labels": {}, "digests": []}

    monkeypatch.setattr(baseimage, "build_debian_base", fake_build_debian_base)
    the_plan = plan(sglang_profile(base=baseimage.DEBIAN_BASE))
    result = image_app.build(the_plan, engine, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert made == [False] and result.base.digest == BASE_ID
