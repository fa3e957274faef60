"""Files a user names are read without blocking and never past a cap (issue 25, M).

A FIFO given as `--compare-with`, `verify --log`, an eval dataset, `--dataset-path`, the
receivers file or a tune state blocked forever in `open`; /dev/zero was read whole (a
MemoryError at about 5.4 GB). Each reader goes through core.files.open_regular: exit 2 and one
line for anything that is not a regular file. The FIFO test runs the reader in a thread and
opens the FIFO's write end when it is stuck, so the unfixed code fails instead of hanging; the
char device (/dev/zero's numbers, made with mknod in tmp) is only offered to the fixed readers.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from opsctl.config.resolve import check_model_config
from opsctl.core.errors import EXIT_USAGE, OpsctlError
from opsctl.core.files import read_bounded
from opsctl.observe.alertmanager import load_receivers
from opsctl.traffic.bench.workloads import WorkloadSpec, build
from opsctl.traffic.evals.dataset import load_gsm8k
from opsctl.traffic.smoke_report import load_reference
from opsctl.tune.state import STATE_FILE, load_state
from opsctl.verify.app import read_log

READERS: dict[str, Callable[[Path], object]] = {
    "compare-with": load_reference,
    "verify-log": read_log,
    "gsm8k-dataset": lambda path: load_gsm8k(path, "0" * 64),
    "dataset-path": lambda path: build(WorkloadSpec(name="sharegpt", dataset_path=path)),
    "receivers": load_receivers,
    "tune-state": lambda path: load_state(path.parent),
    "model-config": check_model_config,  # profile resolve --model-config
}


def _node(folder: Path, name: str, kind: str) -> Path:
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # as /dev/zero
        except PermissionError:
            pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


def _call(reader: Callable[[Path], object], path: Path, kind: str) -> BaseException | None:
    """Run `reader(path)`; a reader still blocked after 5 s is released and the test fails."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            reader(path)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive() and kind == "fifo":
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let the stuck open return
        thread.join(5)
        pytest.fail(f"reading a {kind} blocked")
    return outcome[0] if outcome else None


@pytest.mark.parametrize("kind", ["fifo", "char-device"])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_named_file_that_is_not_regular_is_exit_2_at_once(reader: str, kind: str,
                                                            tmp_path: Path) -> None:
    path = _node(tmp_path, STATE_FILE if reader == "tune-state" else "input", kind)
    error = _call(READERS[reader], path, kind)
    assert isinstance(error, OpsctlError), error
    assert error.exit_code == EXIT_USAGE
    assert "not a regular file" in error.message and "\n" not in error.message


def test_read_bounded_checks_the_cap_while_reading(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 2048)
    assert read_bounded(path, "--x", 2048) == b"x" * 2048
    with pytest.raises(OpsctlError, match="larger than 1024 bytes"):
        read_bounded(path, "--x", 1024)
