"""`opsctl up --gate` on the real Docker engine with the simulator image.

A throwaway copy of deploy/sim.yaml mounts a small "weights" directory (config.json, a
safetensors index, and the synthetic GSM8K answer key the simulator's eval mode reads), so the
gate runs everything the shipped profile configures: verify, smoke, GSM8K, the long-context
probes and the greedy-output comparison. Gating `baseline` passes and records it; gating
`corrupt` (the simulator's corrupt fault) fails the comparison, exits 5 and leaves baseline
running again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from simprofile import add_weights, remove_containers, sim_profile_data, write_profile

from opsctl.core.checkpoint import checkpoint_id
from opsctl.core.errors import EXIT_SMOKE

pytestmark = pytest.mark.docker

GATE_TIMEOUT_S = 300  # each opsctl call; the simulator is ready in seconds


@pytest.fixture()
def gated_profile(tmp_path: Path, free_port) -> Iterator[tuple[Path, str, Path]]:
    """(profile path, profile name, weights dir); its containers are removed afterwards."""
    data, name = sim_profile_data("it-gate", free_port())
    weights = add_weights(data, tmp_path)
    for variant in data["variants"].values():
        variant.setdefault("env", {})["OPSCTL_SIM_ITL_MS"] = "5"  # a quicker smoke
    yield write_profile(data, tmp_path), name, weights
    remove_containers(name)


def running(name: str) -> list[dict[str, str]]:
    client = docker.from_env()
    return [c.labels for c in client.containers.list(filters={"label": f"opsctl.profile={name}"})]


def test_a_corrupting_variant_fails_the_gate_and_baseline_comes_back(
    opsctl, sim_image: str, gated_profile: tuple[Path, str, Path], tmp_path: Path
) -> None:
    path, name, weights = gated_profile
    state = tmp_path / "state"
    env = {"OPSCTL_STATE_DIR": str(state)}

    good = opsctl("up", "--profile", str(path), "--variant", "baseline", "--gate",
                  "--image", sim_image, timeout=GATE_TIMEOUT_S, **env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "gate passed" in good.stdout and "no last good variant recorded" in good.stdout
    last_good = json.loads((state / "gates" / name / "last-good.json").read_text())
    assert (last_good["variant"], last_good["image"]) == ("baseline", sim_image)
    report = json.loads(Path(last_good["report"]).read_text())
    checks = {check["name"]: check["status"] for check in report["checks"]}
    assert checks["gsm8k"] == checks["long_context"] == "pass", checks
    (labels,) = running(name)
    assert labels["opsctl.checkpoint"] == checkpoint_id(weights).combined
    assert last_good["checkpoint"]["id"] == labels["opsctl.checkpoint"]

    bad = opsctl("up", "--profile", str(path), "--variant", "corrupt", "--gate",
                 "--image", sim_image, timeout=GATE_TIMEOUT_S, **env)
    assert bad.returncode == EXIT_SMOKE, bad.stdout + bad.stderr
    assert "compared with last good 'baseline'" in bad.stdout
    assert "gate failed" in bad.stderr and "compare (greedy outputs differ" in bad.stderr
    assert "rolled back to 'baseline'" in bad.stderr and "Traceback" not in bad.stderr
    (labels,) = running(name)
    assert labels["opsctl.variant"] == "baseline"
    assert json.loads((state / "gates" / name / "last-good.json").read_text()) == last_good

    status = opsctl("status", **env)
    row = next(line for line in status.stdout.splitlines() if name in line)
    assert "baseline" in row and "verified" in row and "MISMATCH" not in row


def test_up_without_verify_is_recorded_as_not_verified(
    opsctl, sim_image: str, gated_profile: tuple[Path, str, Path], tmp_path: Path
) -> None:
    path, name, _ = gated_profile
    env = {"OPSCTL_STATE_DIR": str(tmp_path / "state")}
    up = opsctl("up", "--profile", str(path), "--variant", "baseline", "--no-verify",
                "--image", sim_image, timeout=GATE_TIMEOUT_S, **env)
    assert up.returncode == 0, up.stderr
    status = opsctl("status", **env)
    row = next(line for line in status.stdout.splitlines() if name in line)
    assert "not verified" in row


def _gate_interrupted_in_smoke(path: Path, variant: str, image: str,
                               env: dict[str, str]) -> tuple[int, str, str]:
    """`up --gate` with SIGINT once the gate has printed that smoke starts (as Ctrl-C sends it)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "opsctl", "up", "--profile", str(path), "--variant", variant,
         "--gate", "--image", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:
        seen.append(line)
        if "; smoke" in line:
            time.sleep(1.0)  # inside smoke's generations (the variant decodes slowly)
            process.send_signal(signal.SIGINT)
            break
    else:
        process.kill()
        pytest.fail("the gate never reached smoke: " + "".join(seen))
    rest, stderr = process.communicate(timeout=GATE_TIMEOUT_S)
    return process.returncode, "".join(seen) + rest, stderr


def test_ctrl_c_during_the_gates_smoke_is_130_and_never_a_pass(
    opsctl, sim_image: str, tmp_path: Path, free_port
) -> None:
    """Issue 25, H2: Ctrl-C during smoke printed "gate passed", exited 0 and recorded the
    partial smoke report as the last good."""
    data, name = sim_profile_data("it-gate-int", free_port())
    add_weights(data, tmp_path)
    for variant in data["variants"].values():
        variant.setdefault("env", {})["OPSCTL_SIM_ITL_MS"] = "5"
    data["variants"]["gathercast"]["env"]["OPSCTL_SIM_ITL_MS"] = "400"  # a smoke to interrupt
    path = write_profile(data, tmp_path)
    state = tmp_path / "state"
    env = {"OPSCTL_STATE_DIR": str(state)}
    record = state / "gates" / name / "last-good.json"
    try:
        code, out, err = _gate_interrupted_in_smoke(path, "gathercast", sim_image, env)
        assert code == 130, out + err
        assert "gate passed" not in out and "Traceback" not in err, out + err
        assert not record.exists()  # a first gate interrupted records nothing
        assert running(name) == []

        good = opsctl("up", "--profile", str(path), "--variant", "baseline", "--gate",
                      "--image", sim_image, timeout=GATE_TIMEOUT_S, **env)
        assert good.returncode == 0, good.stdout + good.stderr
        last_good = json.loads(record.read_text())

        code, out, err = _gate_interrupted_in_smoke(path, "gathercast", sim_image, env)
        assert code == 130, out + err
        assert "gate passed" not in out and "interrupted" in err, out + err
        assert json.loads(record.read_text()) == last_good  # never the partial report
        (labels,) = running(name)
        assert labels["opsctl.variant"] == "baseline"  # rolled back to the last good
    finally:
        remove_containers(name)
