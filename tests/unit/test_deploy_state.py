"""What `up` records once the server is ready: the verify verdict per container, the checkpoint
id (label and state file), and how `status` and `down` read and drop it; the state directory's
location and its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import Behaviour, FakeClock, FakeEngine, FakeSglang

from opsctl.config.profiles import Deployment, load_profile
from opsctl.core import labels
from opsctl.core.checkpoint import checkpoint_id
from opsctl.core.errors import EXIT_LAUNCH, UsageError
from opsctl.core.paths import default_state_dir
from opsctl.deploy import app
from opsctl.deploy.launch import Launch, up
from opsctl.deploy.state import CheckpointRecord, StateDir, host_checkpoint
from opsctl.verify.app import VerifyMismatch, VerifyResult
from opsctl.verify.checks import FieldCheck

PROFILE = load_profile("sim")
IMAGE = "opsctl/sim:test"
SERVED = PROFILE.model.served_name


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Removed servers' logs go to out/logs/ under the working directory: a temporary one here."""
    monkeypatch.chdir(tmp_path)


def verify_with(*checks: FieldCheck, seen: list[str] | None = None) -> app.Verifier:
    def run(deployment: Deployment, url: str, log_text: str) -> VerifyResult:
        if seen is not None:
            seen.append(log_text)
        return VerifyResult(base_url=url, profile=PROFILE.name, variant=deployment.variant,
                            sglang_version="0.5.23", checks=list(checks))
    return run


OK = FieldCheck("attention_backend", "flashinfer", "flashinfer", "ok", "argv", "/server_info")
UNKNOWN = FieldCheck("page_size", None, 64, "unknown", "", "/server_info", "depends on the GPU")
BAD = FieldCheck("kv_cache_dtype", "fp8_e4m3", "bfloat16", "mismatch", "argv", "/server_info")


def launch(engine: FakeEngine, state: StateDir, deployment: Deployment | None = None,
           verify: app.Verifier | None = None) -> app.UpResult:
    return up(deployment or PROFILE.resolve("baseline"),
              Launch(engine=engine, image_for=lambda _: IMAGE, verify=verify, state=state,
                     http=FakeSglang(SERVED, ["ready"]).client, clock=FakeClock()))


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(images={IMAGE: {}})


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(tmp_path / "state")


def status_verdicts(engine: FakeEngine, state: StateDir) -> list[str]:
    result = app.status(engine, http=FakeSglang(SERVED, ["ready"]).client, clock=FakeClock(),
                        state=state)
    return [server.verdict for server in result]


def test_up_verifies_with_the_containers_log_and_records_the_verdict(
    engine: FakeEngine, state: StateDir
) -> None:
    engine.next_run = Behaviour(log=["[opsctl] kv_gather_cast active"])
    logs: list[str] = []
    result = launch(engine, state, verify=verify_with(OK, UNKNOWN, seen=logs))
    assert logs == ["[opsctl] kv_gather_cast active\n"]
    assert result.verdict is not None and result.verdict.summary() == "verified (1 unknown)"
    recorded = json.loads((state.root / "containers" / f"{result.container.id}.json").read_text())
    assert recorded["fields"] == {"attention_backend": "ok", "page_size": "unknown"}
    assert recorded["verified"] is True and recorded["variant"] == "baseline"
    assert status_verdicts(engine, state) == ["verified (1 unknown)"]


def test_a_mismatch_removes_the_container_and_names_the_field(
    engine: FakeEngine, state: StateDir
) -> None:
    with pytest.raises(VerifyMismatch) as caught:
        launch(engine, state, verify=verify_with(OK, BAD))
    error = caught.value
    assert error.exit_code == EXIT_LAUNCH
    assert "kv_cache_dtype: expected fp8_e4m3, resolved bfloat16" in error.message
    assert any("container is removed" in line for line in error.details)
    assert engine.containers == {}
    assert list((state.root / "containers").iterdir()) == []  # its verdict went with it


def test_no_verify_is_recorded_as_not_verified(engine: FakeEngine, state: StateDir) -> None:
    result = launch(engine, state)
    assert result.verdict is not None and not result.verdict.verified
    assert status_verdicts(engine, state) == ["not verified"]


def test_status_shows_a_recorded_mismatch_and_survives_a_broken_state_file(
    engine: FakeEngine, state: StateDir
) -> None:
    started = launch(engine, state, verify=verify_with(OK))
    verdict = state.verdict(started.container.id)
    assert verdict is not None
    state.write_verdict(verdict.model_copy(update={
        "fields": {"kv_cache_dtype": "mismatch"}, "mismatches": ["kv_cache_dtype: ..."]}))
    assert status_verdicts(engine, state) == ["MISMATCH: kv_cache_dtype"]
    (state.root / "containers" / f"{started.container.id}.json").write_text("{not json")
    (shown,) = status_verdicts(engine, state)
    assert shown.startswith("unknown (state file")
    # A state file grown past any record opsctl writes is refused unread, not loaded whole:
    (state.root / "containers" / f"{started.container.id}.json").write_bytes(b" " * (2 << 20))
    (shown,) = status_verdicts(engine, state)
    assert shown.startswith("unknown (state file") and "larger than 1 MiB" in shown
    engine.add_container("opsctl-other", {labels.MANAGED: labels.TRUE,
                                          labels.ROLE: labels.ROLE_SERVER}, status="exited")
    assert status_verdicts(engine, state)[1] == "not verified"  # started before any record


def test_down_forgets_the_verdicts(engine: FakeEngine, state: StateDir) -> None:
    launch(engine, state, verify=verify_with(OK))
    assert app.down(engine, PROFILE.name, state=state).removed == ["opsctl-sim"]
    assert list((state.root / "containers").iterdir()) == []


# --- the checkpoint -------------------------------------------------------------------------------


def with_weights(path: Path) -> Deployment:
    model = PROFILE.model.model_copy(update={"host_path": str(path)})
    return PROFILE.model_copy(update={"model": model}).resolve("baseline")


def test_the_checkpoint_id_is_a_label_and_in_the_state_file(
    engine: FakeEngine, state: StateDir, tmp_path: Path
) -> None:
    weights = tmp_path / "GLM-5-NVFP4"
    weights.mkdir()
    (weights / "config.json").write_text('{"architectures": ["GlmMoeDsaForCausalLM"]}')
    (weights / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    result = launch(engine, state, with_weights(weights), verify=verify_with(OK))
    expected = checkpoint_id(weights)
    assert result.container.labels[labels.CHECKPOINT] == expected.combined
    verdict = state.verdict(result.container.id)
    assert verdict is not None and verdict.checkpoint.id == expected.combined
    assert verdict.checkpoint.files == expected.files
    assert app.checkpoint_of(result.container) == {"id": expected.combined, "unavailable": None}


def test_weights_that_cannot_be_hashed_are_unavailable_not_a_failure(
    engine: FakeEngine, state: StateDir, tmp_path: Path
) -> None:
    result = launch(engine, state)  # the sim profile mounts no weights
    label = result.container.labels[labels.CHECKPOINT]
    assert label == "unavailable: the profile mounts no weights (model.host_path unset)"
    assert app.checkpoint_of(result.container) == {
        "id": None, "unavailable": "the profile mounts no weights (model.host_path unset)"}
    assert host_checkpoint(str(tmp_path / "absent")).unavailable == (
        f"{tmp_path / 'absent'} is not a directory on this host")
    assert "no config.json" in (host_checkpoint(str(tmp_path)).unavailable or "")
    assert CheckpointRecord.from_label(None) is None


# --- the state directory --------------------------------------------------------------------------


def test_the_state_dir_follows_the_override_then_xdg_then_home(tmp_path: Path) -> None:
    assert default_state_dir({"OPSCTL_STATE_DIR": str(tmp_path)}) == tmp_path
    assert default_state_dir({"XDG_STATE_HOME": "/var/x"}) == Path("/var/x/opsctl")
    relative = default_state_dir({"XDG_STATE_HOME": "relative/path"})  # the spec ignores it
    assert relative == Path.home() / ".local" / "state" / "opsctl"


def test_names_that_cannot_be_file_names_are_refused(state: StateDir) -> None:
    with pytest.raises(UsageError, match="cannot name a state file"):
        state.last_good("../escape")
    assert state.last_good("never-gated") is None
