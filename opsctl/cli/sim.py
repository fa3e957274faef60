"""The simulator command."""

from __future__ import annotations

import typer

from opsctl.cli.app import app


@app.command(
    "sim",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def sim(ctx: typer.Context) -> None:
    """Run the sglang 0.5.23 API simulator with sglang's own launch flags.

    For example --model-path, --served-model-name, --port, --enable-metrics. Behaviour:
    OPSCTL_SIM_* variables and POST /_sim/config (see the opsctl.sim docstring)."""
    from opsctl.sim.server import run

    raise typer.Exit(run(list(ctx.args)))



