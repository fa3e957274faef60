"""Profiles: golden argv and RunSpec per profile and variant; every way a profile can be wrong."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml

from opsctl.config import patchsets
from opsctl.config.profiles import PATCH_SWITCH_ENV, check_argv, load_profile
from opsctl.config.runspec import run_spec
from opsctl.core.errors import ProfileError, UsageError
from opsctl.core.paths import project_root

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
SHIPPED = sorted(p.stem for p in (project_root() / "deploy").glob("*.yaml"))
CASES = [(name, variant) for name in SHIPPED for variant in sorted(load_profile(name).variants)]


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.is_file(), (
        f"missing golden file {path}; run with OPSCTL_UPDATE_GOLDEN=1 and review it"
    )
    assert text == path.read_text()


def test_every_shipped_profile_has_the_four_variants() -> None:
    assert {"sim", "glm5-nvfp4-rtx6000"} <= set(SHIPPED)
    for name in SHIPPED:
        assert {"baseline", "gathercast", "bf16kv", "native"} <= set(load_profile(name).variants)


@pytest.mark.parametrize(("profile", "variant"), CASES)
def test_golden_argv(profile: str, variant: str) -> None:
    argv = check_argv(load_profile(profile).resolve(variant))
    _golden(f"{profile}.{variant}.argv", shlex.join(argv) + "\n")


@pytest.mark.parametrize(("profile", "variant"), CASES)
def test_golden_docker_run(profile: str, variant: str) -> None:
    deployment = load_profile(profile).resolve(variant)
    spec = run_spec(deployment, "IMAGE", {"opsctl.patch-sha256": "PATCHSHA"})
    _golden(f"{profile}.{variant}.docker-run", shlex.join(spec.docker_run_argv()) + "\n")


def test_the_jit_cache_volume_is_keyed_by_the_image() -> None:
    """Kernels one image's flashinfer/triton compiled never reach another image's server."""
    deployment = load_profile("glm5-nvfp4-rtx6000").resolve("baseline")

    def volume(image: str) -> str:
        (mount,) = [m for m in run_spec(deployment, image).mounts if m.kind == "volume"]
        assert mount.target == "/root/.cache"
        return mount.source

    old, new = volume("opsctl/sglang-glm5:aaaa"), volume("opsctl/sglang-glm5:bbbb")
    assert old != new and old == volume("opsctl/sglang-glm5:aaaa")
    assert old.startswith("opsctl-jit-cache-") and len(old) == len("opsctl-jit-cache-") + 12


def test_variants_are_overlays_not_copies() -> None:
    profile = load_profile("glm5-nvfp4-rtx6000")
    base, patched, bf16 = (profile.resolve(v) for v in ("baseline", "gathercast", "bf16kv"))
    assert base.env[PATCH_SWITCH_ENV] == "0" and patched.env[PATCH_SWITCH_ENV] == "1"
    assert patched.patched and not base.patched
    assert bf16.server.kv_cache_dtype == "bf16" and base.server.kv_cache_dtype == "fp8_e4m3"
    # everything the overlay does not name comes from the profile
    assert bf16.server.tp_size == base.server.tp_size == 8
    assert "NCCL_P2P_LEVEL" not in base.env  # left to NCCL unless `opsctl host p2p` advises SYS
    assert len({base.config_hash(), patched.config_hash(), bf16.config_hash()}) == 3


def test_real_profile_renders_the_tuned_flags() -> None:
    argv = check_argv(load_profile("glm5-nvfp4-rtx6000").resolve("gathercast"))
    joined = " ".join(argv)
    for expected in (
        "--tp-size 8",
        "--quantization modelopt_fp4",
        "--kv-cache-dtype fp8_e4m3",
        "--attention-backend flashinfer",
        "--moe-runner-backend flashinfer_cutlass",
        "--disable-shared-experts-fusion",
        "--host 0.0.0.0",
        "--enable-metrics",
        '--extra-metric-labels {"variant": "gathercast"}',
        "--served-model-name glm-5",
    ):
        assert expected in joined


def test_deployment_labels_and_gpu_request() -> None:
    deployment = load_profile("glm5-nvfp4-rtx6000").resolve("gathercast")
    spec = run_spec(deployment, "opsctl/sglang-glm5:abc")
    assert spec.gpus == list(range(8))
    assert spec.ipc_host and spec.ulimits["memlock"] == (-1, -1)
    assert [m.read_only for m in spec.mounts if m.target == "/models/GLM-5-NVFP4"] == [True]
    assert all(p.host_address == "127.0.0.1" for p in spec.ports)
    for key in ("opsctl.profile", "opsctl.variant", "opsctl.image", "opsctl.config-hash",
                "opsctl.patch-sha256", "opsctl.sglang-version"):
        assert spec.labels[key]


# --- bad profiles --------------------------------------------------------------------------------


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def _sim_text() -> str:
    return (project_root() / "deploy" / "sim.yaml").read_text()


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    text = _sim_text().replace("  tp_size: 8", "  tp_size: [8")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert str(path) in err.value.message and "invalid YAML" in err.value.message


def test_unknown_key_names_file_line_and_field(tmp_path: Path) -> None:
    text = _sim_text().replace("  tp_size: 8", "  tp_size: 8\n  tp_sizee: 4")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    line = _line_of(text, "tp_sizee")
    assert f"{path}:{line}: server.tp_sizee" in err.value.message


def test_wrong_type_names_the_field(tmp_path: Path) -> None:
    text = _sim_text().replace("  mem_fraction_static: 0.85", "  mem_fraction_static: lots")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert (
        f":{_line_of(text, 'mem_fraction_static: lots')}: server.mem_fraction_static"
        in err.value.message
    )


def test_duplicate_key_is_refused(tmp_path: Path) -> None:
    text = _sim_text().replace("  tp_size: 8", "  tp_size: 8\n  tp_size: 4")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert "duplicate key 'tp_size'" in err.value.message
    assert f"{path}:{_line_of(text, 'tp_size: 4')}" in err.value.message


@pytest.mark.parametrize("value", ["*hunter2-pw", "!hunter2-pw x"])
def test_a_yaml_error_never_quotes_what_may_be_a_secret(tmp_path: Path, value: str) -> None:
    """PyYAML's message quotes an alias or a tag from the line (issue 37, item 3)."""
    text = _sim_text().replace("  tp_size: 8", f"  tp_size: 8\n  api_key: {value}")
    with pytest.raises(ProfileError, match=r"invalid YAML|api_key") as err:
        load_profile(str(_write(tmp_path, text)))
    assert "hunter2" not in err.value.message + (err.value.hint or "")


def test_bad_variant_overlay_names_the_variant_field(tmp_path: Path) -> None:
    text = _sim_text().replace("server: {kv_cache_dtype: bf16}", "server: {kv_cache_dtyp: bf16}")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert "variants.bf16kv.server.kv_cache_dtyp" in err.value.message


def test_every_problem_is_listed_at_once_with_a_did_you_mean(tmp_path: Path) -> None:
    text = (_sim_text().replace("  tp_size: 8", "  tp_size: 8\n  max_runing_requests: 4")
            .replace("  mem_fraction_static: 0.85", "  mem_fraction_static: lots"))
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    found = err.value.details
    assert len(found) == 2 and "(and 1 more problem(s) in the profile, listed above)" in \
        err.value.message
    typo = next(line for line in found if "max_runing_requests" in line)
    assert typo.startswith(f"{path}:{_line_of(text, 'max_runing_requests')}: "
                           "server.max_runing_requests: ")
    assert typo.endswith("did you mean 'max_running_requests'?")
    assert any("server.mem_fraction_static" in line for line in found)


def test_every_variants_overlay_problem_is_listed_at_once(tmp_path: Path) -> None:
    data = yaml.safe_load(_sim_text())
    data["variants"]["baseline"]["server"] = {"kv_cache_dtyp": "bf16"}
    data["variants"]["bf16kv"]["server"] = {"mem_fraction_statc": 0.8}
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    found = err.value.details
    assert any("variants.baseline.server.kv_cache_dtyp" in line
               and "did you mean 'kv_cache_dtype'?" in line for line in found), found
    assert any("variants.bf16kv.server.mem_fraction_statc" in line
               and "did you mean 'mem_fraction_static'?" in line for line in found), found


def test_flag_unknown_to_pinned_sglang_is_refused(tmp_path: Path) -> None:
    text = _sim_text().replace("  watchdog_timeout: 1800",
                               "  watchdog_timeout: 1800\n  extra_args: [--no-such-flag]")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert "--no-such-flag" in err.value.message and "0.5.23" in err.value.message


def test_unknown_variant_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError) as err:
        load_profile("sim").resolve("fastest")
    assert "baseline" in err.value.hint and "gathercast" in err.value.hint


def test_unknown_profile_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError) as err:
        load_profile("nope")
    assert "sim" in err.value.hint


def test_default_variant_must_exist(tmp_path: Path) -> None:
    data = yaml.safe_load(_sim_text())
    data["default_variant"] = "turbo"
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ProfileError, match="default_variant"):
        load_profile(str(path))


# --- the patch switch -----------------------------------------------------------------------------


def test_patch_switch_is_rendered_from_requires_patch() -> None:
    for name in SHIPPED:
        profile = load_profile(name)
        for variant, spec in profile.variants.items():
            expected = "1" if spec.requires_patch else "0"
            assert profile.resolve(variant).env[PATCH_SWITCH_ENV] == expected, (name, variant)


@pytest.mark.parametrize("where", ["variant", "container"])
def test_setting_the_patch_switch_by_hand_is_refused(tmp_path: Path, where: str) -> None:
    data = yaml.safe_load(_sim_text())
    target = data["variants"]["baseline"] if where == "variant" else data["container"]
    target.setdefault("env", {})[PATCH_SWITCH_ENV] = "1"
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert f"{PATCH_SWITCH_ENV} is rendered from the variant's requires_patch" in err.value.message
    assert "\n" not in err.value.message


def test_one_switch_name_in_profiles_kernel_and_patch_sets() -> None:
    from opsctl.kernels import kv_gather_cast

    versions = patchsets.available_versions()
    assert versions
    names = {
        kv_gather_cast.SWITCH_ENV,
        *(patchsets.load_manifest(v)["switch_env"] for v in versions),
    }
    assert names == {PATCH_SWITCH_ENV}


def test_simulator_profiles_are_not_judged_by_the_patch_sets(tmp_path: Path) -> None:
    from simprofile import sim_without_the_real_profiles_dsa_settings as sim_wrong

    from opsctl.config.support import variant_support_problem

    sim = load_profile(str(sim_wrong(tmp_path)))  # loads, though
    # the same flags on an sglang image would be refused
    deployment = sim.resolve("gathercast")
    problem = variant_support_problem(
        sim.image.sglang_version, patched=deployment.patched, argv=check_argv(deployment),
        architecture=sim.model.architecture, attention_backend=deployment.server.attention_backend,
        kv_cache_dtype=deployment.server.kv_cache_dtype)
    assert problem is not None and "656-byte scaled DSA row" in problem


def test_every_mtp_variant_serves_the_mtp_checkpoint_at_the_same_container_path() -> None:
    profile = load_profile("glm5-nvfp4-rtx6000")
    plain = profile.resolve("gathercast")
    assert plain.model.repo == "nvidia/GLM-5-NVFP4" and profile.model.mtp is not None
    drafting = [v for v in profile.variants if profile.resolve(v).server.speculative_algorithm]
    assert len(drafting) >= 3
    for variant in drafting:
        mtp = profile.resolve(variant)
        assert (mtp.model.repo, mtp.model.host_path) == (profile.model.mtp.repo,
                                                         profile.model.mtp.host_path)
    for variant in set(profile.variants) - set(drafting):
        assert profile.resolve(variant).model.host_path == plain.model.host_path
    mtp = profile.resolve("bf16kv-mtp")
    # The server reads the same path, so its argv (and sglang's resolution records) stay as is:
    assert mtp.model.container_path == plain.model.container_path
    mount = next(m for m in run_spec(mtp, "img").mounts if m.target == mtp.model.container_path)
    assert mount.source == mtp.model.host_path and mount.read_only
    assert mtp.model.served_name == plain.model.served_name  # what the overlay leaves is shared


def test_a_checkpoint_of_another_repo_never_takes_the_profiles_revision(tmp_path: Path) -> None:
    """model.revision pinned to the profile's repo's commit: the MTP checkpoint (another repo)
    and a variant's own repo are fetched at their own revision (main unless named), and an MTP
    checkpoint without a repo is not the profile's repo downloaded into its folder."""
    data = yaml.safe_load((project_root() / "deploy" / "glm5-nvfp4-rtx6000.yaml").read_text())
    pinned = "0" * 40
    data["model"]["revision"] = pinned
    data["variants"]["bf16kv"]["model"] = {"repo": "owner/other", "host_path": "/models/o"}
    data["variants"]["native"]["model"] = {"host_path": "/models/n"}  # same repo, own folder
    profile = load_profile(str(_write(tmp_path, yaml.safe_dump(data))))
    assert profile.resolve("gathercast").model.revision == pinned
    assert profile.resolve("native").model.revision == pinned
    mtp = profile.resolve("fp8kv-mtp").model
    assert (mtp.repo, mtp.revision) == ("festr2/GLM-5-NVFP4-MTP", "main")
    assert profile.resolve("bf16kv").model.revision == "main"
    data["model"]["mtp"] = {"host_path": "/models/hand-placed", "revision": "v1"}
    profile = load_profile(str(_write(tmp_path, yaml.safe_dump(data))))
    assert profile.resolve("fp8kv-mtp").model.repo is None


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("repo", "no-slash", "Hugging Face repository id"),
    ("repo", "a/b--c", "Hugging Face repository id"),
    ("revision", "../x", "branch, tag or commit"),
    ("token_env", "HF TOKEN", "not an environment variable name"),
])
def test_a_bad_checkpoint_source_is_refused_at_load(tmp_path: Path, key: str, value: str,
                                                    problem: str) -> None:
    data = yaml.safe_load(_sim_text())
    data["model"][key] = value
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert f"model.{key}" in err.value.message and problem in err.value.message


def test_a_variant_with_its_own_repo_needs_its_own_folder(tmp_path: Path) -> None:
    data = yaml.safe_load(_sim_text())
    data["variants"]["baseline"]["model"] = {"repo": "owner/other"}
    path = _write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert "its own `host_path`" in err.value.message
