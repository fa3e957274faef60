"""Host tools (nvidia-smi, lspci) run with a cap on their output and a deadline, everything they
started killed at either; what an error quotes of them is one short printable line (issue 37
items 4 and 5: a 50 MB stderr line kept doctor past its 60 s, an endless nvidia-smi took it to
6 GB, `host p2p` printed a 5 MB line, a field over csv's limit was a traceback).

The tools below are FAKE shell scripts written by these tests."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from test_doctor import Box

from opsctl.core.errors import HostNotReady
from opsctl.core.tools import (
    LINE_CHARS,
    MAX_LINE_CHARS,
    TIMED_OUT,
    TOO_MUCH_OUTPUT,
    last_line,
    run_lines,
    run_tool,
)
from opsctl.deploy import hostcheck
from opsctl.doctor.checks import FAIL, parse_gpus


def script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    """Running (a killed process that nobody reaped yet, a zombie, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_an_endless_tool_is_stopped_at_the_output_cap(tmp_path: Path) -> None:
    endless = script(tmp_path, "endless", "while :; do echo GPU0 GPU1 GPU2 GPU3; done\n")
    code, text = run_tool([str(endless)], timeout_s=60, max_bytes=1 << 16)
    assert code == TOO_MUCH_OUTPUT and "wrote more than 65536 bytes" in text
    assert len(text) < 200


def test_a_tool_whose_child_holds_the_pipe_is_killed_with_it_at_the_deadline(
        tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    held = script(tmp_path, "held", f"sleep 300 & echo $! > {pid_file}\nwait\n")
    code, text = run_tool([str(held)], timeout_s=3)  # time for a loaded machine to fork
    assert code == TIMED_OUT and "no answer within 3 s" in text
    child = int(pid_file.read_text())
    # Killed with its session, not left running (the kernel may take a moment to tear it down):
    gone_by = time.monotonic() + 10
    while alive(child) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not alive(child)


def test_a_tool_that_exits_while_a_child_keeps_the_pipe_returns_by_the_deadline(
        tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    forked = script(tmp_path, "forked", f"echo fine\nsleep 300 & echo $! > {pid_file}\n")
    code, text = run_tool([str(forked)], timeout_s=1)
    assert (code, text) == (0, "fine\n")
    os.kill(int(pid_file.read_text()), 9)


def test_last_line_is_one_short_printable_line() -> None:
    assert last_line("") == "no output"
    assert last_line("a\nb\x1b[31m\n\n") == "b\\x1b[31m"
    cut = last_line("x" * 5_000_000)
    assert len(cut) == LINE_CHARS + 3 and cut.endswith("...")


def test_p2p_quotes_a_huge_failure_line_short(tmp_path: Path) -> None:
    smi = script(tmp_path, "nvidia-smi", "head -c 3000000 /dev/zero | tr '\\0' x >&2; exit 3\n")
    with pytest.raises(HostNotReady) as caught:
        hostcheck.check_p2p(which=lambda name: str(smi) if name == "nvidia-smi" else None)
    assert len(caught.value.message) < 400 and "exit 125" in caught.value.message


def test_a_field_past_csvs_limit_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi output"):
        parse_gpus('0, "' + "x" * 200_000 + '", 12.0, 97887, 580.00.01\n')
    with pytest.raises(ValueError):
        parse_gpus("0, GPU, 12.0, " + "9" * 5000 + ", 580.00.01\n")


@pytest.mark.parametrize("body", [
    "head -c 50000000 /dev/zero | tr '\\0' x >&2; exit 1\n",  # a 50 MB stderr line
    "yes GPU0\n",  # never ends
    'printf \'0, "%s", 12.0, 97887, 580\\n\' "$(head -c 200000 /dev/zero | tr \'\\0\' x)"\n',
])
def test_doctor_stays_bounded_with_a_hostile_nvidia_smi(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    box = Box(tmp_path, monkeypatch, query=None)
    script(box.bin, "nvidia-smi", body)
    for tool in ("head", "tr", "yes", "printf"):
        if found := shutil.which(tool, path="/usr/bin:/bin"):
            os.symlink(found, box.bin / tool)
    rows = box.run(checkpoint=box.glm5_ready())
    for name in ("GPU count", "P2P, IOMMU, ACS"):
        assert rows[name].status == FAIL, name
        assert len(rows[name].detail) <= 500, (name, rows[name].detail[:300])


def test_run_lines_hands_on_lines_cut_and_stops_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    long = script(tmp_path, "long", "head -c 1000000 /dev/zero | tr '\\0' x\n"
                  f"printf '\\nnext\\n'\nsleep 300 & echo $! > {pid_file}\nwait\n")
    lines: list[str] = []
    code = run_lines([str(long)], 5, lines.append, line_chars=100)  # time for a loaded machine
    assert code == TIMED_OUT
    assert lines == ["x" * 100, "next", "no end within 5 s: stopped"]
    child = int(pid_file.read_text())
    gone_by = time.monotonic() + 10  # the kernel may take a moment to tear the session down
    while alive(child) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not alive(child)


def test_a_build_step_is_logged_in_bounded_lines_and_stopped_at_its_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opsctl.core.errors import BuildError
    from opsctl.engine.api import BuildEvent
    from opsctl.image import baseimage

    events: list[BuildEvent] = []
    failing = script(tmp_path, "failing", "head -c 3000000 /dev/zero | tr '\\0' y; exit 3\n")
    with pytest.raises(BuildError, match=r"exit 3\): y+$"):
        baseimage._run_logged([str(failing)], events.append, "debootstrap")
    assert events and all(len(event.text) <= MAX_LINE_CHARS for event in events)
    monkeypatch.setattr(baseimage, "DEBOOTSTRAP_TIMEOUT_SECONDS", 1)
    hung = script(tmp_path, "hung", "echo started\nexec sleep 300\n")
    with pytest.raises(BuildError, match="exit 124"):
        baseimage._run_logged([str(hung)], events.append, "debootstrap")


def test_gnu_patch_that_never_finishes_is_a_patch_error_at_its_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opsctl.core.errors import PatchError
    from opsctl.image import patchset

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir, "patch", "sleep 300\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(patchset, "PATCH_TIMEOUT_S", 1.0)
    with pytest.raises(PatchError, match=r"did not finish x\.diff within 1 s"):
        patchset._run_patch(tmp_path, tmp_path / "x.diff")
