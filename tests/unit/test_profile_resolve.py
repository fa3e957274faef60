"""`opsctl profile resolve` without the wheel: GPU options, the config check, the record built
from a probe's dump, writing and the view. The real resolution runs in
tests/integration/test_profile_resolve_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from opsctl.argspec.resolution import GpuReport, Probed, installed, side_requirements
from opsctl.config import resolve
from opsctl.config.profiles import load_profile
from opsctl.core.errors import EXIT_USAGE, BuildError, ProfileError, UsageError
from opsctl.core.paths import PROJECT_DIR_ENV, project_root
from opsctl.deploy.app import ResolveResult, profile_resolve
from opsctl.deploy.view import resolve_text

GPU_PROFILE = "glm5-nvfp4-rtx6000"


def _deployment(profile: str = GPU_PROFILE, variant: str = "native") -> Any:
    return load_profile(profile).resolve(variant)


def test_the_target_gpu_is_the_profiles_box_and_options_change_each_part() -> None:
    gpu = resolve.gpu_report(_deployment())
    assert (gpu.name, gpu.count, gpu.memory_gb, gpu.capability) == (
        "RTX PRO 6000 Blackwell", 8, 96.0, (12, 0))
    # The simulator has no GPUs in its container: it stands for the same box at its tp_size.
    assert resolve.gpu_report(_deployment("sim")).count == load_profile("sim").server.tp_size
    changed = resolve.gpu_report(_deployment(), count=4, memory_gb=48, capability="10.0")
    assert (changed.count, changed.memory_gb, changed.capability) == (4, 48, (10, 0))


@pytest.mark.parametrize(("options", "message"), [
    ({"name": "H100"}, "unknown GPU 'H100'"),
    ({"capability": "12"}, "is not MAJOR.MINOR"),
    ({"capability": "twelve.0"}, "is not MAJOR.MINOR"),
])
def test_bad_gpu_options_are_usage_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        resolve.gpu_report(_deployment(), **options)
    assert caught.value.exit_code == EXIT_USAGE


def test_the_fixture_is_glm_shaped() -> None:
    config = resolve.check_model_config(project_root() / resolve.FIXTURE)
    assert config["architectures"] == [resolve.GLM_ARCHITECTURE]


@pytest.mark.parametrize(("text", "message"), [
    ('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}',
     "lacks GlmMoeDsaForCausalLM"),
    ("[1, 2]", "not a JSON object"),
    ("{not json", "not JSON"),
    (None, "cannot read"),
])
def test_a_config_that_is_not_glm_shaped_is_refused(tmp_path: Path, text: str | None,
                                                    message: str) -> None:
    path = tmp_path / "config.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UsageError, match=message):
        resolve.check_model_config(path)


def test_a_glm_config_without_its_geometry_is_refused(tmp_path: Path) -> None:
    config = json.loads((project_root() / resolve.FIXTURE).read_text())
    del config["kv_lora_rank"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(UsageError, match="no integer from 1 to 65536: kv_lora_rank"):
        resolve.check_model_config(path)


@pytest.mark.parametrize(("changes", "message"), [
    ({"architectures": 5}, "architectures lacks"),  # was a TypeError traceback
    ({"architectures": "GlmMoeDsaForCausalLMx"}, "architectures lacks"),  # was a substring match
    ({"architectures": {"GlmMoeDsaForCausalLM": 1}}, "architectures lacks"),
    ({"num_hidden_layers": -1}, "no integer from 1 to 65536: num_hidden_layers"),
    ({"num_attention_heads": 0}, "no integer from 1 to 65536: num_attention_heads"),
    ({"kv_lora_rank": True}, "no integer from 1 to 65536: kv_lora_rank"),
    ({"index_topk": 10**30}, "no integer from 1 to 65536: index_topk"),
    # sglang's resolution is linear in the layers: 2^31 - 1 ran past its 300 s probe timeout.
    ({"num_hidden_layers": 2**31 - 1}, "no integer from 1 to 65536: num_hidden_layers"),
])
def test_a_glm_config_with_wrong_types_is_refused_before_sglang(
        tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    config = json.loads((project_root() / resolve.FIXTURE).read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, **changes}))
    with pytest.raises(UsageError, match=message):
        resolve.check_model_config(path)


def _result(**changes: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "defaults": {"model_path": "M", "attention_backend": None, "page_size": None,
                     "tp_size": 1, "random_seed": None},
        "set_by_argv": ["model_path", "tp_size"],
        "resolved": {"model_path": "M", "attention_backend": "dsa", "page_size": 64,
                     "tp_size": 8, "random_seed": {"varies": "differs"},
                     "dsa_decode_backend": "x", "cuda_graph_config": {"decode": {"max_bs": 64}}},
        "kv_row": {"computed": True, "elements": 656, "bytes": 656, "pool_dtype": "float8_e4m3fn"},
        "gpu_calls": {"torch.cuda.is_available": 3},
        "log": ["Use dsa attention backend for DeepSeek with DSA."],
    }
    result.update(changes)
    return result


def test_left_to_sglang_is_what_changed_and_the_argv_did_not_set() -> None:
    left = resolve.left_to_sglang(_result())
    assert left == {"attention_backend": {"default": None, "resolved": "dsa"},
                    "page_size": {"default": None, "resolved": 64},
                    "random_seed": {"default": None, "resolved": {"varies": "differs"}}}


def test_the_summary_reads_either_releases_spelling() -> None:
    new = resolve.summary(
        {"dsa_decode_backend": "a", "cuda_graph_config": {"decode": {"max_bs": 8}}}
    )
    old = resolve.summary({"nsa_decode_backend": "b", "cuda_graph_max_bs": 16})
    assert (new["DSA decode backend"], new["decode CUDA-graph max batch"]) == ("a", 8)
    assert (old["DSA decode backend"], old["decode CUDA-graph max batch"]) == ("b", 16)
    assert old["speculative algorithm"] is None


class _Runner:
    """Stands in for the probe: records each call, answers with prepared results."""

    def __init__(self, results: list[dict[str, Any]]) -> None:
        self.results = results
        self.calls: list[tuple[str, list[list[str]], GpuReport]] = []

    def __call__(self, version: str, argvs: list[list[str]], gpu: GpuReport) -> Probed:
        self.calls.append((version, argvs, gpu))
        model_dir = argvs[0][1]
        answers = [json.loads(json.dumps(r).replace("M", model_dir)) for r in self.results]
        dump = {"results": answers[: len(argvs)], "torch_version": "2.13.0+cpu",
                "transformers_version": "5.19.0", "placeholder_modules": ["flashinfer"]}
        return Probed(dump=dump, wheel="sglang.whl", wheel_sha256="ab", pins={
            "transformers": "5.19.0", "torch": "2.14.1"}, side_packages=["x==1"])


def test_one_probe_per_release_and_gpu_and_the_model_path_is_the_profiles() -> None:
    profile = load_profile(GPU_PROFILE)
    deployments = [profile.resolve(v) for v in ("baseline", "native")]
    runner = _Runner([_result(), _result()])
    resolved = resolve.resolve(deployments, resolve.gpu_report, runner=runner)
    assert len(runner.calls) == 1
    version, argvs, _ = runner.calls[0]
    assert version == "0.5.23" and argvs[0][0] == "--model-path"
    assert (Path(argvs[0][1]) / "config.json").name == "config.json"
    record = resolved[1].record
    assert record["variant"] == "native" and record["outcome"] == "resolved"
    # The temp directory the probe read never reaches the record.
    assert record["resolved"]["model_path"] == profile.model.container_path
    assert record["argv"][record["argv"].index("--model-path") + 1] == (
        profile.model.container_path)
    assert record["server_info"]["attention backend"] == "dsa"
    assert record["kv_row"]["bytes"] == 656
    assert "torch.cuda.is_available (called 3x)" in record["faked"]
    assert record["provenance"]["torch_pinned"] == "2.14.1"
    assert resolved[1].path == (project_root() / "patches/sglang/0.5.23/resolved/"
                                "glm5-nvfp4-rtx6000.native.json")


def test_a_refusal_is_recorded_and_exits_2_for_one_variant() -> None:
    refused = {"defaults": {}, "refused": {"where": "sglang/srt/x.py:1 (f)",
                                           "error": "ValueError: no"}, "log": []}
    runner = _Runner([refused])
    result = profile_resolve([_deployment()], resolve.gpu_report, runner=runner)
    record = result.resolved[0].record
    assert record["outcome"] == "refused" and "server_info" not in record
    assert "refused: ValueError: no [sglang/srt/x.py:1 (f)]" in resolve_text(result)
    with pytest.raises(ProfileError, match="refuses variant 'native'") as caught:
        resolve.raise_on_refusal(result.resolved)
    assert caught.value.exit_code == EXIT_USAGE


def test_an_import_that_needs_the_gpu_is_unresolved_and_says_where() -> None:
    failed = {"unresolved": {"where": "sglang/srt/a.py:254 (<module>)", "error": "E: x",
                             "step": "importing sglang.srt.server_args"}, "log": []}
    record = resolve.resolve([_deployment()], resolve.gpu_report, runner=_Runner([failed]))[
        0
    ].record
    assert record["outcome"] == "unresolved"
    assert record["not_run"][0]["branch"].startswith("importing sglang.srt.server_args")
    resolve.raise_on_refusal([resolve.Resolved(record, Path("x"))])  # not an error


def test_write_replaces_records_whole_and_removes_vanished_variants(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROJECT_DIR_ENV, str(tmp_path))
    old = tmp_path / "patches/sglang/0.5.23/resolved/p.gone.json"
    other = tmp_path / "patches/sglang/0.5.23/resolved/q.kept.json"
    for path in (old, other):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    new = resolve.Resolved({"variant": "a"}, tmp_path / "patches/sglang/0.5.23/resolved/p.a.json")
    assert resolve.write([new], stale_from=["p"]) == [new.path]
    assert json.loads(new.path.read_text()) == {"variant": "a"}
    assert not old.exists() and other.exists()
    assert [p.name for p in new.path.parent.iterdir() if p.name.startswith(".")] == []


def test_the_view_shows_backends_kv_row_and_what_was_left_to_sglang() -> None:
    resolved = resolve.resolve([_deployment()], resolve.gpu_report, runner=_Runner([_result()]))
    text = resolve_text(ResolveResult(resolved))
    assert "glm5-nvfp4-rtx6000 / native: sglang 0.5.23 resolved" in text
    assert "8x RTX PRO 6000 Blackwell, sm_120, 96 GiB" in text
    assert "KV row                           656 bytes (656 x float8_e4m3fn" in text
    assert "page_size = 64 (default null)" in text
    assert "not run: CUDA-graph capture" in text


def test_the_side_environment_takes_the_wheels_own_transformers_pin(tmp_path: Path) -> None:
    assert side_requirements({"transformers": "5.19.0", "tokenizers": "0.23.2"})[:2] == [
        "transformers==5.19.0", "tokenizers==0.23.2"]
    with pytest.raises(BuildError, match="pins no transformers"):
        side_requirements({})
    (tmp_path / "typing_extensions-4.16.0.dist-info").mkdir()
    (tmp_path / "Pillow-13.0.0.dist-info").mkdir()
    assert installed(tmp_path) == ["pillow==13.0.0", "typing-extensions==4.16.0"]


def test_every_profile_under_deploy_has_records() -> None:
    assert resolve.record_profiles() == ["glm5-nvfp4-rtx6000", "glm51-nvfp4-rtx6000",
                                         "glm52-nvfp4-rtx6000", "sim"]
    for name in resolve.record_profiles():
        profile = load_profile(name)
        for variant in profile.variants:
            path = resolve.record_path(profile.resolve(variant))
            assert path.is_file(), f"{path} is missing: run opsctl profile resolve --write-records"
