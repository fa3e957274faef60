"""`opsctl verify` against the simulator started with a variant's own flags and environment:
it passes there, and fails with exit 4 naming the field when the server resolves otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest
from conftest import OpsctlRunner

from opsctl.config.profiles import Deployment, load_profile, to_argv
from opsctl.deploy import localsim
from opsctl.sim.releases import RELEASE_ENV
from opsctl.verify.app import run_verify

FAST = {"OPSCTL_SIM_LOAD_SECONDS": "0", "OPSCTL_SIM_WARMUP_SECONDS": "0"}
Start = Callable[..., localsim.LocalSim]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start the simulator for a deployment (its flags plus `extra`, its env plus `env`)."""
    running: list[localsim.LocalSim] = []

    def run(deployment: Deployment, extra: Sequence[str] = (),
            env: Mapping[str, str] | None = None) -> localsim.LocalSim:
        flags = to_argv(deployment)[len(deployment.server.entrypoint):]
        release = {RELEASE_ENV: deployment.profile.image.sglang_version}
        log = tmp_path / f"sim-{len(running)}.log"
        sim = localsim.start([*flags, *extra], {**deployment.env, **FAST, **release, **(env or {})},
                             log, ready_timeout_s=30)
        running.append(sim)
        return sim

    yield run
    for sim in running:
        sim.stop(timeout_s=10)


@pytest.mark.parametrize("profile, variant", [
    ("sim", "gathercast"), ("sim", "baseline"), ("sim", "bf16kv"),
    ("glm5-nvfp4-rtx6000", "gathercast"), ("glm5-nvfp4-rtx6000", "bf16kv"),
])
def test_verify_passes_against_the_variants_own_flags(start: Start, profile: str,
                                                     variant: str) -> None:
    deployment = load_profile(profile).resolve(variant)
    sim = start(deployment)
    with httpx.Client(base_url=sim.url) as client:
        result = run_verify(deployment, client, log_text=sim.logs())
    assert result.mismatches == [], result.mismatches
    statuses = {check.field: check.status for check in result.checks}
    assert statuses["patched_path"] == "ok"
    assert statuses["attention_backend"] == statuses["kv_cache_dtype"] == "ok"
    # Every variant under deploy/ has its release's own resolution recorded: nothing is left
    # unknown, and each expectation names the record it comes from.
    assert result.unknown == []
    page = next(check for check in result.checks if check.field == "page_size")
    assert (page.expected, page.status) == (64, "ok")
    assert f"resolved/{profile}.{variant}.json" in page.source


def test_without_a_current_record_verify_falls_back_to_the_hand_read_defaults(
        start: Start) -> None:
    """A variant whose argv differs from its record (an edited profile): the record is stale and
    not used; the checkpoint-shaped page size is unknown again, as the facts table says."""
    deployment = load_profile("glm5-nvfp4-rtx6000").resolve("gathercast")
    server = deployment.server.model_copy(update={"chunked_prefill_size": 4096})
    edited = deployment.model_copy(update={"server": server})
    sim = start(edited)
    with httpx.Client(base_url=sim.url) as client:
        result = run_verify(edited, client, log_text=sim.logs())
    assert [check.field for check in result.unknown] == ["page_size"]
    assert result.mismatches == []


def test_the_real_profile_expects_the_normalised_bf16_spelling(start: Start) -> None:
    deployment = load_profile("glm5-nvfp4-rtx6000").resolve("bf16kv")
    with httpx.Client(base_url=start(deployment).url) as client:
        result = run_verify(deployment, client)
    kv = next(check for check in result.checks if check.field == "kv_cache_dtype")
    assert (kv.expected, kv.resolved, kv.status) == ("bfloat16", "bfloat16", "ok")


def test_cli_passes_and_writes_json(start: Start, opsctl: OpsctlRunner, tmp_path: Path) -> None:
    sim = start(load_profile("sim").resolve("gathercast"))
    log = tmp_path / "server.log"
    log.write_text(sim.logs())
    report = tmp_path / "verify.json"
    done = opsctl("verify", "--base-url", sim.url, "--profile", "sim", "--variant", "gathercast",
                  "--json", str(report), "--log", str(log), COLUMNS="200")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 mismatch" in done.stdout
    saved = json.loads(report.read_text())
    assert saved["ok"] is True
    assert {c["field"]: c["status"] for c in saved["checks"]}["patched_path"] == "ok"


def test_another_attention_backend_exits_4_naming_the_field(start: Start,
                                                            opsctl: OpsctlRunner) -> None:
    sim = start(load_profile("sim").resolve("gathercast"), extra=["--attention-backend", "triton"])
    done = opsctl("verify", "--base-url", sim.url, "--profile", "sim", "--variant", "gathercast")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "attention_backend: expected flashinfer, resolved triton" in done.stderr
    assert "hint:" in done.stderr and "Traceback" not in done.stderr


def test_the_resolve_fault_exits_4(start: Start, opsctl: OpsctlRunner) -> None:
    sim = start(load_profile("sim").resolve("baseline"), env={"OPSCTL_SIM_FAULT": "misresolve"})
    done = opsctl("verify", "--base-url", sim.url, "--profile", "sim", "--variant", "baseline")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "attention_backend: expected flashinfer, resolved triton" in done.stderr


def test_a_patch_that_is_on_for_an_unpatched_variant_is_a_mismatch(start: Start) -> None:
    profile = load_profile("sim")
    sim = start(profile.resolve("gathercast"))
    with httpx.Client(base_url=sim.url) as client:
        result = run_verify(profile.resolve("baseline"), client, log_text=sim.logs())
    assert [(c.field, c.expected, c.resolved) for c in result.mismatches] == [
        ("patched_path", "not active", "active (1 line)")]


def test_another_release_than_the_pin_is_a_mismatch(start: Start) -> None:
    deployment = load_profile("sim").resolve("gathercast")
    sim = start(deployment, env={RELEASE_ENV: "0.5.15"})
    with httpx.Client(base_url=sim.url) as client:
        result = run_verify(deployment, client)
    assert ("sglang_version", "0.5.23", "0.5.15") in [
        (c.field, c.expected, c.resolved) for c in result.mismatches]


def test_server_text_is_printed_literally(start: Start, opsctl: OpsctlRunner) -> None:
    sim = start(load_profile("sim").resolve("gathercast"),
                extra=["--served-model-name", "[bold]glm[/bold]"])
    done = opsctl("verify", "--base-url", sim.url, "--profile", "sim", COLUMNS="200")
    assert done.returncode == 4
    assert "[bold]glm[/bold]" in done.stdout
    assert "served_model_name: expected glm-5, resolved [bold]glm[/bold]" in done.stderr


def test_unreachable_exits_4_and_a_bad_variant_exits_2(opsctl: OpsctlRunner) -> None:
    url = f"http://127.0.0.1:{localsim.free_port()}"
    unreachable = opsctl("verify", "--base-url", url, "--profile", "sim")
    assert unreachable.returncode == 4, unreachable.stderr
    assert "no server answers" in unreachable.stderr
    bad = opsctl("verify", "--base-url", url, "--profile", "sim", "--variant", "nope")
    assert bad.returncode == 2
    assert "no variant 'nope'" in bad.stderr
