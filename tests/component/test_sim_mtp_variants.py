"""The simulator speaks the FP8 KV + MTP variants (issue 35): from their `profile resolve` records,
and `opsctl verify` passes against it, the patch's start-up line read from its log."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import OpsctlRunner, SimServer

from opsctl.config.profiles import check_argv, load_profile


@pytest.mark.parametrize(("variant", "patched"), [("fp8kv-mtp", False), ("gathercast-mtp", True)])
def test_verify_passes_on_the_simulator(variant: str, patched: bool,
                                        sim_server: Callable[..., SimServer],
                                        opsctl: OpsctlRunner, tmp_path: Path) -> None:
    deployment = load_profile("sim").resolve(variant)
    argv = check_argv(deployment)[len(deployment.server.entrypoint):]
    server = sim_server(env=deployment.env, args=argv)
    assert server.log_path is not None
    done = opsctl("verify", "-p", "sim", "-v", variant, "--base-url", server.url,
                  "--log", str(server.log_path), "--json", str(tmp_path / "verify.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "verify.json").read_text())
    fields = {check["field"]: check for check in report["checks"]}
    assert fields["kv_cache_dtype"]["resolved"] == "fp8_e4m3"
    assert fields["patched_path"]["status"] == "ok"
    assert fields["patched_path"]["resolved"].startswith("active" if patched else "inactive")
    with urllib.request.urlopen(f"{server.url}/server_info", timeout=10) as reply:
        info = json.loads(reply.read())
    assert (info["speculative_algorithm"], info["speculative_num_draft_tokens"]) == ("EAGLE", 4)
