"""`opsctl doctor`: one table of checks of this host against a profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, app, console, err_console, within


@app.command()
def doctor(
    profile: ProfileOpt = None,
    checkpoint: Annotated[Path | None, typer.Option(
        help="Check this checkpoint folder instead of the profile's model.host_path.")] = None,
    gpu_count: Annotated[int | None, typer.Option(
        help="GPUs expected (default: the profile's container.gpus, else its tp_size).",
        callback=within(1, 64))] = None,
    write_json: Annotated[bool, typer.Option(
        "--json", help="Also write the report to out/doctor-<UTC time>.json.")] = False,
) -> None:
    """Is this host ready for the profile? One table, each check pass / warn / fail with the
    fix, in at most 60 s: Docker, GPUs from a container (never a pull), GPU count, model,
    compute capability and memory, the driver against each base's CUDA, P2P/IOMMU/ACS, the
    checkpoint's files, disk, /dev/shm, the port, each base against its lock. Exit 0 when no
    check fails (warnings do not count), 7 (host not ready) otherwise, 130 interrupted (with
    --json the checks so far are written, marked partial)."""
    from opsctl.config.profiles import load_profile
    from opsctl.core.clock import SYSTEM_CLOCK
    from opsctl.core.errors import HostNotReady, Interrupted, UsageError
    from opsctl.core.files import atomic_write_text, check_output_path
    from opsctl.core.reports import default_doctor_path
    from opsctl.core.tools import run_tool
    from opsctl.doctor import app as doctor_app
    from opsctl.doctor import view
    from opsctl.engine.dockerpy import connect

    loaded = load_profile(profile)
    if checkpoint is not None and not (checkpoint.is_dir() and _readable(checkpoint)):
        raise UsageError(f"--checkpoint {checkpoint} is not a readable folder",
                         hint="name the folder that holds config.json and the safetensors shards")
    json_path = check_output_path(default_doctor_path(), "--json") if write_json else None
    tools = doctor_app.Tools(connect=lambda: connect(timeout=5),
                             run=lambda argv, timeout: run_tool(argv, timeout_s=timeout),
                             clock=SYSTEM_CLOCK)
    report = doctor_app.doctor(doctor_app.DoctorRequest(loaded, checkpoint, gpu_count), tools)
    console.print(view.table(report))
    console.print(view.summary(report), highlight=False)
    if json_path is not None:
        atomic_write_text(json_path, json.dumps(report.to_json(), indent=2) + "\n")
        err_console.print(f"report: {json_path}", highlight=False, soft_wrap=True)
    if report.partial_reason is not None:
        saved = f"; the checks so far are in {json_path} (marked partial)" if json_path else ""
        raise Interrupted(f"doctor interrupted{saved}", hint="run `opsctl doctor` again")
    if report.failed:
        names = ", ".join(dict.fromkeys(check.name for check in report.failed))
        raise HostNotReady(f"host not ready for profile {report.profile}: {len(report.failed)} of "
                           f"{len(report.checks)} checks failed ({names})",
                           hint="each row's fix is in the table above; run `opsctl doctor` again "
                           "after fixing them")


def _readable(folder: Path) -> bool:
    import os

    return os.access(folder, os.R_OK | os.X_OK)
