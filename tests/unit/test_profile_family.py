"""The GLM-5 family: one base profile, a member profile per checkpoint (`extends:`), each member's
config.json written from its card, its stack record and resolve records, and a member the pinned
release cannot load refused with the executed reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoints import write_checkpoint

from opsctl.argspec import stack
from opsctl.config import resolve
from opsctl.config.profiles import load_profile
from opsctl.core.errors import EXIT_USAGE, ProfileError
from opsctl.core.paths import project_root
from opsctl.deploy import preflight, preflight_probe

BASE = "glm5-nvfp4-rtx6000"
MEMBERS = {"glm51-nvfp4-rtx6000": "nvidia/GLM-5.1-NVFP4",
           "glm52-nvfp4-rtx6000": "nvidia/GLM-5.2-NVFP4"}


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_a_member_is_the_base_with_only_its_checkpoint_changed(name: str) -> None:
    base, member = load_profile(BASE), load_profile(name)
    assert member.model.repo == MEMBERS[name] and member.name == name
    assert member.model.mtp is None  # its MTP variants serve its own checkpoint
    for part in ("image", "server", "container", "readiness", "slo", "eval", "variants"):
        assert getattr(member, part) == getattr(base, part), part
    assert member.default_variant == base.default_variant
    drafting = member.resolve("native-mtp")
    assert drafting.model.host_path == member.model.host_path  # not GLM-5's MTP checkpoint


def _profile(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "member.yaml"
    path.write_text(text)
    return path


def test_a_member_overrides_one_nested_setting_and_keeps_the_rest(tmp_path: Path) -> None:
    path = _profile(tmp_path, f"extends: {BASE}\nname: tuned\nserver:\n  cuda_graph_max_bs: 32\n"
                              "  max_running_requests: 32\n")
    tuned, base = load_profile(str(path)), load_profile(BASE)
    assert tuned.server.cuda_graph_max_bs == 32
    assert tuned.server.kv_cache_dtype == base.server.kv_cache_dtype
    assert tuned.model == base.model


@pytest.mark.parametrize(("extends", "says"), [
    ("no-such-profile", "extends names unknown profile 'no-such-profile'"),
    ("glm51-nvfp4-rtx6000", "glm51-nvfp4-rtx6000 itself extends another profile"),
    ("deploy/sim.yaml", "extends must name a profile under deploy/"),
    ("[1, 2]", "extends must name a profile under deploy/"),
])
def test_a_bad_extends_is_one_line_naming_its_line(tmp_path: Path, extends: str, says: str
                                                   ) -> None:
    path = _profile(tmp_path, f"name: bad\nextends: {extends}\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert err.value.message.startswith(f"{path}:2: {says}")
    assert err.value.exit_code == EXIT_USAGE and "\n" not in err.value.message


@pytest.mark.parametrize("name", sorted(MEMBERS))
def test_each_member_resolves_with_the_config_written_from_its_card(name: str) -> None:
    profile = load_profile(name)
    fixture = project_root() / stack.MODEL_CONFIGS[MEMBERS[name]] / "config.json"
    for variant in profile.variants:
        deployment = profile.resolve(variant)
        assert resolve.model_config_for(deployment) == fixture
        record = json.loads(resolve.record_path(deployment).read_text())
        assert record["outcome"] == "resolved", variant
        assert record["model_config"]["path"] == fixture.relative_to(project_root()).as_posix()
        # A fixture edited after its records were made: regenerate them (--write-records).
        assert record["model_config"]["sha256"] == resolve.sha256_file(fixture)


def test_sglang_0_5_23_reads_glm52_indexshare_from_the_fixture() -> None:
    """The record's shared layers are what 0.5.23's own dsa_layer_skips_topk said, executed on
    the fixture: exactly the layers its indexer_types marks "shared" (57 of 78)."""
    config = json.loads((project_root() / "tests/fixtures/glm52/config.json").read_text())
    marked = [i for i, kind in enumerate(config["indexer_types"]) if kind == "shared"]
    profile = load_profile("glm52-nvfp4-rtx6000")
    for variant in profile.variants:
        record = json.loads(resolve.record_path(profile.resolve(variant)).read_text())
        shared = record["dsa_topk_shared"]
        assert shared["computed"] and shared["shared"] == marked and shared["layers"] == 57
    glm5 = load_profile(BASE)
    for variant in glm5.variants:  # GLM-5 computes a fresh top-k in every layer
        assert "dsa_topk_shared" not in json.loads(
            resolve.record_path(glm5.resolve(variant)).read_text())


def test_a_member_the_release_cannot_load_is_refused_with_the_executed_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What refuses a member is its own line of the release's stack record (made by running the
    pinned transformers on its config.json); its siblings still load."""
    real = stack.load("0.5.23")
    assert real is not None
    models = dict(real.models)
    models["nvidia/GLM-5.2-NVFP4"] = {**models["nvidia/GLM-5.2-NVFP4"], "loads": False,
                                      "error": "ValueError: unknown key indexer_types"}
    broken = stack.StackRecord(real.version, real.path, real.transformers, models)
    monkeypatch.setattr(stack, "load", lambda version: broken)
    with pytest.raises(ProfileError) as err:
        load_profile("glm52-nvfp4-rtx6000")
    assert "cannot load nvidia/GLM-5.2-NVFP4's config.json: ValueError: unknown key " \
           "indexer_types (executed on tests/fixtures/glm52/config.json" in err.value.message
    load_profile("glm51-nvfp4-rtx6000")
    load_profile(BASE)


@pytest.mark.parametrize("name", [BASE, *sorted(MEMBERS)])
def test_each_members_checkpoint_passes_the_preflight_with_its_nextn_layer(
        name: str, tmp_path: Path) -> None:
    """A checkpoint with the member's config.json (stand-in shards, the NextN layer at
    model.layers.78.*) passes the probe's file checks; the MTP variants ask for the NextN check.
    (The image's transformers and sglang loaders run in the integration tier.)"""
    profile = load_profile(name)
    config_path = resolve.model_config_for(profile.resolve())
    folder = write_checkpoint(tmp_path / "w", config=json.loads(config_path.read_text()))
    request = preflight.probe_request(profile.resolve("native-mtp"))
    assert request["mtp"] and request["strict"]
    found = preflight_probe.run_checks({**request, "model_dir": str(folder), "strict": False})
    assert all(row["ok"] for row in found), found
    nextn = next(row for row in found if row["check"] == "MTP (NextN) weights")
    assert "under model.layers.78.*" in nextn["detail"]
