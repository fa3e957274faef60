"""Text from profiles, servers, paths and options is printed as written, never as rich markup.

`[/x]` crashed rich's printer (a closing tag with nothing open) and `[red]a[/red]` was silently
eaten; both go through the error path and the view path of every command family (deploy,
image, traffic, observe, verify) and must come out literally, with the command's documented
exit code and no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO_ROOT, SimServer
from stubhttp import StubServer, json_answer

from opsctl.cli.app import console
from opsctl.core.paths import project_root
from opsctl.deploy import view as deploy_view
from opsctl.deploy.app import ServerStatus

CLOSING = "[/x]"
STYLED = "[red]a[/red]"
SIM = (project_root() / "deploy" / "sim.yaml").read_text()
FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2"}


def opsctl(*args: str, code: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSCTL_API")}
    run = subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                         env={**env, "COLUMNS": "300"}, cwd=REPO_ROOT, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == code, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "MarkupError" not in run.stderr
    return run.stdout + run.stderr


@pytest.fixture
def marked_profile(tmp_path: Path) -> Path:
    """sim.yaml with a variant named `[/x]` whose description is `[red]a[/red]`."""
    path = tmp_path / "marked.yaml"
    path.write_text(SIM.replace("  bf16kv:\n", f"  '{CLOSING}':\n    description: '{STYLED}'\n"
                                "  bf16kv:\n", 1))
    return path


# --- deploy ------------------------------------------------------------------------------------


def test_deploy_views_print_markup_literally(marked_profile: Path) -> None:
    shown = opsctl(
        "profile", "show", "--profile", str(marked_profile), "--variant", CLOSING, code=0
    )
    assert f"# variant {CLOSING} (shown above): {STYLED}" in shown
    dry = opsctl("up", "--dry-run", "--profile", str(marked_profile), "--variant", CLOSING, code=0)
    assert f"variant {CLOSING}," in dry


def test_deploy_errors_print_markup_literally(marked_profile: Path) -> None:
    out = opsctl("up", "--dry-run", "--profile", str(marked_profile), "--variant", STYLED, code=2)
    assert f"has no variant '{STYLED}'" in out and CLOSING in out


def test_status_table_prints_markup_literally(capsys: pytest.CaptureFixture[str]) -> None:
    server = ServerStatus(name=CLOSING, profile=STYLED, variant=CLOSING, image="[bold]img",
                          patch_sha256="none", uptime="1s", readiness="ready", verdict="verified")
    console.print(deploy_view.status_table([server]))
    out = capsys.readouterr().out
    assert CLOSING in out and STYLED in out and "[bold]img" in out


# --- image -------------------------------------------------------------------------------------


def test_image_view_and_errors_print_markup_literally(marked_profile: Path, tmp_path: Path) -> None:
    plans = opsctl("build", "--dry-run", "--profile", str(marked_profile), code=0)
    assert CLOSING in plans
    tag = opsctl("build", "--dry-run", "--profile", str(marked_profile), "--variant", "baseline",
                 "--tag", CLOSING, code=2)
    assert f"--tag '{CLOSING}'" in tag
    tree = tmp_path / STYLED
    tree.mkdir(parents=True)
    patch = opsctl("patch", "check", "--sglang-src", str(tree), "--version", "0.5.23", code=3)
    assert f"{tree} holds no sglang package" in patch


# --- traffic -----------------------------------------------------------------------------------


def test_traffic_views_print_server_text_literally(sim_server: Callable[..., SimServer],
                                                   tmp_path: Path) -> None:
    url = sim_server(env=FAST, args=["--served-model-name", STYLED, "--enable-metrics"]).url
    smoke = opsctl("smoke", "--base-url", url, "--json", str(tmp_path / "s.json"), code=0)
    assert f"model: '{STYLED}'" in smoke
    bench = opsctl("bench", "--base-url", f"{CLOSING}={url}", "--concurrency", "1",
                   "--requests", "2", "--output-tokens", "4", "--input-words", "4",
                   "--out", str(tmp_path / "bench"), code=0)
    assert CLOSING in bench


def test_traffic_errors_print_markup_literally() -> None:
    assert f"--api '{CLOSING}'" in opsctl("smoke", "--api", CLOSING, code=2)
    assert STYLED in opsctl("bench", "--base-url", "http://127.0.0.1:9", "--concurrency", STYLED,
                            code=2)


# --- observe and verify --------------------------------------------------------------------------


def test_observe_view_and_errors_print_markup_literally(tmp_path: Path) -> None:
    folder = tmp_path / STYLED
    dry = opsctl("monitor", "up", "--dry-run", "--profile", "sim", "--config-dir", str(folder),
                 code=0)
    assert f"# config rendered to {folder}" in dry
    assert f"bad duration '{CLOSING}'" in opsctl("report", "--since", CLOSING, code=2)
    answer = '{"status": "error", "error": "parse error [/x] at [bold]char 3"}'
    with StubServer({r"/api/v1/query_range": json_answer(400, answer)}) as prometheus:
        out = opsctl("report", "--prometheus", prometheus.url, "--out",
                     str(tmp_path / "r.png"), code=4)
    assert "parse error [/x] at [bold]char 3" in out


def test_verify_errors_print_markup_literally() -> None:
    out = opsctl("verify", "--base-url", "http://127.0.0.1:9", "--variant", CLOSING, code=2)
    assert f"has no variant '{CLOSING}'" in out
