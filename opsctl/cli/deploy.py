"""Commands of the deploy room: profile show/schema, up, down, status, logs."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console

profile_app = typer.Typer(help="Inspect deployment profiles.", no_args_is_help=True)
app.add_typer(profile_app, name="profile")



@profile_app.command("show")
def profile_show(profile: ProfileOpt = None, variant: VariantOpt = None) -> None:
    """Validate a profile and print the sglang argv of a variant."""
    from opsctl.deploy.profiles import check_argv, load_profile

    deployment = load_profile(profile).resolve(variant)
    console.print(" ".join(check_argv(deployment)), highlight=False, soft_wrap=True)


@profile_app.command("schema")
def profile_schema() -> None:
    """Print the JSON schema of a deployment profile."""
    from opsctl.deploy.profiles import profile_schema as schema

    console.print_json(json.dumps(schema()))





@app.command()
def up(
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the docker run and sglang argv; touch nothing."),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(help="Readiness timeout in seconds (default: the profile's)."),
    ] = None,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Replace a running deployment with another configuration."),
    ] = False,
    image: Annotated[
        str | None,
        typer.Option(help="Run this image instead of the one `opsctl build` made."),
    ] = None,
) -> None:
    """Launch the profile's server (a variant) and wait until it truly serves."""
    from opsctl.deploy import lifecycle

    if dry_run:
        console.print(lifecycle.dry_run(profile, variant, image), highlight=False, soft_wrap=True)
        return
    running = lifecycle.up(profile, variant, image, timeout, replace, console)
    if running.already_up:
        console.print(f"already up: {running.container.name} at {running.base_url} (same configuration)")
    else:
        console.print(f"[green]ready[/] {running.container.name} at {running.base_url} "
                      f"after {running.elapsed_seconds:.1f} s")


@app.command()
def down(
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Only this profile's server (default: all of opsctl's)."),
    ] = None,
    grace: Annotated[
        int | None,
        typer.Option(help="Seconds to let the server stop before it is killed."),
    ] = None,
) -> None:
    """Stop and remove opsctl's server containers (found by label; nothing else is touched)."""
    from opsctl.deploy import lifecycle

    removed = lifecycle.down(profile, grace)
    console.print("removed: " + ", ".join(removed) if removed else "nothing to remove")


@app.command()
def status() -> None:
    """Show opsctl's deployments: profile, variant, image, patch sha, uptime, readiness."""
    from opsctl.deploy import lifecycle

    console.print(lifecycle.status_table())


@app.command()
def logs(
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Whose logs (default: the only server)."),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming.")] = False,
    tail: Annotated[int, typer.Option(help="Lines from the end.")] = 100,
) -> None:
    """Print the server container's log."""
    from opsctl.deploy import lifecycle

    for chunk in lifecycle.logs(profile, follow, tail):
        sys.stdout.write(chunk)
        sys.stdout.flush()

