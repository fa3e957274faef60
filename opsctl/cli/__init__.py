"""opsctl's command line: typer declarations per room, errors mapped to exit codes in app.py."""

from opsctl.cli import (  # noqa: F401  (register the commands)
    decide,
    deploy,
    doctor,
    image,
    model,
    observe,
    render,
    sim,
    trace,
    traffic,
    tune,
    verify,
)
from opsctl.cli.app import app, main

__all__ = ["app", "main"]
