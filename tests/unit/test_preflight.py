"""`up`'s preflight against FakeEngine (what runs, where the checkpoint is mounted, how a failure
reads, that nothing starts or is replaced after one), and the probe's checks of a folder run
in-process (it is stdlib: the same code runs inside the image). The real images run it in
tests/integration/test_preflight_engine.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkpoints import glm5_config, write_checkpoint
from fakes import FakeClock, FakeEngine, FakeSglang, preflight_report

from opsctl.config.profiles import Deployment, load_profile
from opsctl.core.errors import EXIT_LAUNCH, LaunchError
from opsctl.deploy import app, preflight, preflight_probe
from opsctl.deploy.launch import Launch, up
from opsctl.deploy.state import StateDir
from opsctl.engine.api import Mount
from opsctl.gate import gate
from opsctl.traffic.app import Traffic
from opsctl.traffic.evals.dataset import load_gsm8k

IMAGE = "opsctl/sim:test"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def deployment(tmp_path: Path, variant: str = "baseline", extra_args: list[str] | None = None,
               host_path: Path | None = None) -> Deployment:
    """A sim variant with a checkpoint folder mounted (and extra flags)."""
    profile = load_profile("sim")
    model = profile.model.model_copy(update={"host_path": str(host_path or tmp_path / "weights")})
    resolved = profile.model_copy(update={"model": model}).resolve(variant)
    if extra_args:
        server = resolved.server.model_copy(update={"extra_args": extra_args})
        resolved = resolved.model_copy(update={"server": server})
    return resolved


def test_a_variant_is_mtp_when_it_drafts_with_eagle_or_nextn_on_the_checkpoint_itself() -> None:
    assert preflight.is_mtp(["x", "--speculative-algorithm", "EAGLE"])
    assert preflight.is_mtp(["x", "--speculative-algorithm=NEXTN"])
    assert not preflight.is_mtp(["x", "--speculative-algorithm", "EAGLE3"])
    assert not preflight.is_mtp(["x", "--speculative-algorithm", "EAGLE",
                                 "--speculative-draft-model-path", "/models/draft"])
    assert not preflight.is_mtp(["x", "--kv-cache-dtype", "fp8_e4m3"])


def test_the_probe_runs_in_the_image_with_the_checkpoint_read_only_where_the_server_reads_it(
        tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    engine = FakeEngine(images={IMAGE: {}})
    shown = deployment(tmp_path)
    result = preflight.run_preflight(shown, engine, IMAGE)
    ((image, command, mounts),) = engine.preflights
    assert image == IMAGE
    assert mounts == (Mount(source=str(tmp_path / "weights"),
                            target=shown.profile.model.container_path, read_only=True),)
    assert command[:2] == ["python3", "-c"]
    assert command[2] == Path(preflight_probe.__file__).read_text()
    assert json.loads(command[3]) == {"model_dir": shown.profile.model.container_path,
                                      "mtp": False, "strict": False,
                                      "trust_remote_code": False}
    assert result.summary().startswith(f"preflight passed in {IMAGE}")


def test_without_a_mounted_checkpoint_nothing_runs_and_it_says_why() -> None:
    engine = FakeEngine(images={IMAGE: {}})
    result = preflight.run_preflight(load_profile("sim").resolve(), engine, IMAGE)
    assert engine.preflights == []
    assert result.summary() == ("preflight skipped: no checkpoint is mounted "
                                "(model.host_path is unset)")


def test_a_failed_check_is_one_line_naming_the_image_with_the_others_as_details(
        tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    engine = FakeEngine(images={IMAGE: {}})
    engine.preflight_answer = (
        1,
        "some library's chatter\n"
        + preflight_report(
            ("config.json", True, "model_type 'glm_moe_dsa'"),
            (
                "transformers config",
                False,
                "model_type 'glm_moe_dsa' is unknown to transformers 4.57.1",
            ),
            ("safetensors", False, "model.safetensors.index.json names 2 shards; x is missing"),
        ),
    )
    with pytest.raises(LaunchError) as failed:
        preflight.run_preflight(deployment(tmp_path), engine, IMAGE)
    error = failed.value
    assert error.exit_code == EXIT_LAUNCH
    assert error.message == f"model_type 'glm_moe_dsa' is unknown to transformers 4.57.1 in {IMAGE}"
    assert error.details == ["preflight safetensors: model.safetensors.index.json names 2 shards; "
                             "x is missing"]
    assert "cannot load the checkpoint" in error.hint and "--skip-preflight" in error.hint


@pytest.mark.parametrize(("answer", "said"), [
    ((124, "verification container timed out"), "preflight did not finish within 180 s in"),
    ((127, "python3: not found"), "preflight did not run in opsctl/sim:test (exit 127): "
     "python3: not found"),
])
def test_a_probe_that_times_out_or_never_reports_is_a_launch_error(
        tmp_path: Path, answer: tuple[int, str], said: str) -> None:
    (tmp_path / "weights").mkdir()
    engine = FakeEngine(images={IMAGE: {}})
    engine.preflight_answer = answer
    with pytest.raises(LaunchError, match="^" + said.replace("(", r"\(").replace(")", r"\)")):
        preflight.run_preflight(deployment(tmp_path), engine, IMAGE)


def test_a_checkpoint_folder_missing_on_the_host_is_named(tmp_path: Path) -> None:
    engine = FakeEngine(images={IMAGE: {}})
    with pytest.raises(LaunchError, match="checkpoint folder .* does not exist on this host"):
        preflight.run_preflight(deployment(tmp_path), engine, IMAGE)
    assert engine.preflights == []


def started_by(engine: FakeEngine, **collaborators: Any) -> Launch:
    """The launch `up` gets here: the fake engine, a server that is ready, no verify, no state."""
    return Launch(engine=engine, image_for=lambda _: IMAGE, verify=None, state=None,
                  http=FakeSglang("glm-5", ["ready"]).client, clock=FakeClock(), **collaborators)


def test_up_after_a_failed_preflight_starts_nothing_and_replaces_nothing(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    engine = FakeEngine(images={IMAGE: {}})
    good = deployment(tmp_path, "baseline")
    up(good, started_by(engine))
    engine.preflight_answer = (1, preflight_report(("safetensors", False, "x is missing")))
    with pytest.raises(LaunchError, match=f"^x is missing in {IMAGE}$"):
        up(deployment(tmp_path, "bf16kv"), started_by(engine), replace=True)
    assert [c.labels["opsctl.variant"] for c in engine.containers.values()] == ["baseline"]
    assert engine.stopped == [] and len(engine.specs) == 1


def test_skip_preflight_starts_without_it(tmp_path: Path) -> None:
    engine = FakeEngine(images={IMAGE: {}})
    engine.preflight_answer = (1, preflight_report(("safetensors", False, "x is missing")))
    up(deployment(tmp_path), started_by(engine, preflight=None))
    assert engine.preflights == [] and len(engine.specs) == 1


def test_a_gate_whose_preflight_fails_stops_nothing(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    engine = FakeEngine(images={IMAGE: {}})
    up(deployment(tmp_path, "baseline"), started_by(engine))
    engine.preflight_answer = (1, preflight_report(("safetensors", False, "x is missing")))

    def no_smoke(*args: object, **kwargs: object) -> Any:
        raise AssertionError("smoke must not run")

    with pytest.raises(LaunchError, match="x is missing"):
        gate.gate(deployment(tmp_path, "bf16kv"),
                  launch=Launch(engine=engine, image_for=lambda _: IMAGE,
                                state=StateDir(tmp_path / "state"), verify=lambda *a: None,  # type: ignore[arg-type,return-value]
                                clock=FakeClock()),
                  traffic=Traffic(api_key=None, client_factory=no_smoke, push=no_smoke,
                                  load_dataset=load_gsm8k, plot=no_smoke, send_smoke=no_smoke))
    assert [c.labels["opsctl.variant"] for c in engine.containers.values()] == ["baseline"]
    assert engine.stopped == []


def test_dry_run_says_what_the_preflight_would_check(tmp_path: Path) -> None:
    shown = app.dry_run(deployment(tmp_path, extra_args=["--speculative-algorithm", "EAGLE"]),
                        lambda _: IMAGE)
    assert shown.preflight.startswith(f"preflight: in a throwaway container of {IMAGE} (no "
                                      "network, no GPU, ")
    assert "the NextN (MTP) layer's weights" in shown.preflight
    assert app.dry_run(deployment(tmp_path), lambda _: IMAGE, preflight=False).preflight == \
        "preflight: skipped (--skip-preflight)"


# --- the probe's checks of a folder, in-process ----------------------------------------------


def rows(folder: Path, mtp: bool = False) -> dict[str, dict[str, Any]]:
    report = preflight_probe.Report()
    weight_map = preflight_probe.check_shards(report, folder)
    if mtp:
        config = json.loads((folder / "config.json").read_text())
        preflight_probe.check_nextn(report, config, weight_map)
    return {row["check"]: row for row in report.results}


def test_the_probe_passes_a_whole_checkpoint_and_names_its_nextn_layer(tmp_path: Path) -> None:
    found = rows(write_checkpoint(tmp_path / "w", tokenizer=False), mtp=True)
    assert found["safetensors"]["ok"], found
    assert found["safetensors"]["detail"].startswith("8 tensors in 2 shards")
    assert found["MTP (NextN) weights"]["ok"]


def test_the_probe_refuses_a_missing_an_empty_and_an_outside_shard(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "w", missing_shard=True, tokenizer=False)
    assert rows(folder)["safetensors"]["detail"] == (
        "model.safetensors.index.json names 2 shards; model-00002-of-00002.safetensors is missing")
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"")
    assert rows(folder)["safetensors"]["detail"].endswith(
        "model-00002-of-00002.safetensors is empty"
    )
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["x"] = "../elsewhere.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "lies outside the checkpoint folder" in rows(folder)["safetensors"]["detail"]


def test_the_probe_refuses_shards_smaller_than_the_index_total(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "w", tokenizer=False)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["metadata"]["total_size"] = 10**12
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "less than the index's total_size" in rows(folder)["safetensors"]["detail"]


def test_the_probe_wants_num_nextn_predict_layers_1_for_mtp(tmp_path: Path) -> None:
    config = glm5_config()
    del config["num_nextn_predict_layers"]
    folder = write_checkpoint(tmp_path / "w", config=config, tokenizer=False)
    assert rows(folder, mtp=True)["MTP (NextN) weights"]["detail"] == (
        "config.json num_nextn_predict_layers is None; sglang's NextN loader needs exactly 1")


def test_the_probe_without_transformers_reads_config_and_tokenizer_files_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_checkpoint(tmp_path / "w", tokenizer=False)
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text("{}")
    monkeypatch.setattr(preflight_probe, "version_of", lambda dist: None)
    monkeypatch.setattr(preflight_probe.importlib.util, "find_spec", lambda name: None)
    relaxed = preflight_probe.run_checks({"model_dir": str(folder), "strict": False})
    assert all(row["ok"] for row in relaxed), relaxed
    strict = preflight_probe.run_checks({"model_dir": str(folder), "strict": True})
    assert [row["detail"] for row in strict if not row["ok"]] == [
        "sglang is not installed in this image", "transformers is not installed in this image"]


def test_the_glm5_mtp_variants_ask_for_the_nextn_check_and_load_as_the_server_does() -> None:
    profile = load_profile("glm5-nvfp4-rtx6000")
    requests = {name: preflight.probe_request(profile.resolve(name)) for name in profile.variants}
    assert {name for name, asked in requests.items() if asked["mtp"]} == {
        "bf16kv-mtp", "fp8kv-mtp", "gathercast-mtp", "native-mtp"}
    assert all(asked["strict"] and asked["trust_remote_code"] for asked in requests.values())


# --- a hostile checkpoint folder (adversarial pass): a report, never a hang or a traceback ---


def _hostile(folder: Path, case: str) -> None:
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    config = glm5_config()
    if case in ("config-fifo", "index-fifo"):
        target = folder / ("config.json" if case == "config-fifo" else index_path.name)
        target.unlink()
        os.mkfifo(target)
    elif case == "architectures-int":
        (folder / "config.json").write_text(json.dumps({**config, "architectures": 5}))
    elif case == "architectures-object":
        (folder / "config.json").write_text(json.dumps({**config, "architectures": {"a": 1}}))
    elif case in ("metadata-list", "metadata-string"):
        index["metadata"] = [1] if case == "metadata-list" else "x"
    elif case == "shard-name-too-long":
        index["weight_map"]["x"] = "x" * 5000
    elif case == "shard-name-nul":
        index["weight_map"]["x"] = "a\0b"
    elif case == "shard-symlink-loop":
        (folder / "loop.safetensors").symlink_to("loop.safetensors")
        index["weight_map"]["x"] = "loop.safetensors"
    elif case == "too-many-shards":
        index["weight_map"] = {f"t{i}": f"s{i}.safetensors" for i in range(200_000)}
    if not case.endswith("-fifo"):
        index_path.write_text(json.dumps(index))


@pytest.mark.parametrize(
    "case",
    [
        "config-fifo",
        "index-fifo",
        "architectures-int",
        "architectures-object",
        "metadata-list",
        "metadata-string",
        "shard-name-too-long",
        "shard-name-nul",
        "shard-symlink-loop",
        "too-many-shards",
    ],
)
def test_a_hostile_checkpoint_is_a_failed_check_never_a_hang_or_a_traceback(
    tmp_path: Path, case: str
) -> None:
    """The probe as the container runs it (stdlib only: -S -I): before, a FIFO blocked it until
    the 180 s container timeout, the rest ended in a traceback (no report: `up` said 'the image
    has no working python3?'), 200 000 shard names were all stat-ed."""
    folder = write_checkpoint(tmp_path / "w", tokenizer=False)
    _hostile(folder, case)
    request = json.dumps({"model_dir": str(folder), "mtp": True, "strict": False})
    try:
        done = subprocess.run([sys.executable, "-S", "-I", preflight_probe.__file__, request],
                              capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the probe hung on {case}")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    checks = preflight.parse_report(done.stdout)
    assert checks is not None
    failed = {c.check: c.detail for c in checks if not c.ok}
    expected = {"config-fifo": ("config.json", "not a regular file"),
                "index-fifo": ("safetensors", "not a regular file"),
                "too-many-shards": ("safetensors", "200000 shards, more than 100000"),
                "shard-name-too-long": ("safetensors", "cannot be read"),
                "shard-name-nul": ("safetensors", "cannot be read"),
                "shard-symlink-loop": ("safetensors", "cannot be read")}.get(case)
    if expected:
        assert expected[1] in failed[expected[0]], failed
