"""opsctl's command line: typer declarations per room, errors mapped to exit codes in app.py."""

from opsctl.cli import decide, deploy, doctor, image, observe, render, sim, trace, traffic, tune, verify  # noqa: F401  (register the commands)
from opsctl.cli.app import app, main

__all__ = ["app", "main"]
