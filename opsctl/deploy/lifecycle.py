"""The `up`/`down`/`status`/`logs` use cases: profile -> engine -> launch, with live display.

launch.py holds the domain logic (RunSpec, readiness); this module wires it to a profile, the
engine and the screen, so cli.py stays a one-call-per-command layer.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from opsctl.core.errors import LaunchError, OpsctlError
from opsctl.deploy import launch
from opsctl.deploy.profiles import Deployment, load_profile
from opsctl.engine.dockerpy import Engine


def _image_for(deployment: Deployment, image: str | None) -> str:
    if image:
        return image
    from opsctl.image.build import expected_image

    return expected_image(deployment.profile)


def dry_run(profile: str | None, variant: str | None, image: str | None) -> str:
    deployment = load_profile(profile).resolve(variant)
    try:
        ref = _image_for(deployment, image)
    except OpsctlError as exc:
        # A dry run needs no engine and no prior build: say what is missing instead of failing.
        ref = f"<{deployment.profile.image.repository}: {exc.message}>"
    spec = launch.run_spec(deployment, ref)
    lines = [
        f"# profile {deployment.profile.name}, variant {deployment.variant}, "
        f"config {deployment.config_hash()[:12]}",
        "# docker run equivalent:",
        shlex.join(spec.docker_run_argv()),
        "# sglang argv:",
        shlex.join(spec.command),
        f"# ready when {launch.base_url(deployment)}/health_generate is 200 and /v1/models lists "
        f"{deployment.profile.model.served_name!r}",
    ]
    return "\n".join(lines)


def up(
    profile: str | None,
    variant: str | None,
    image: str | None,
    timeout: float | None,
    replace: bool,
    console: Console,
) -> launch.Running:
    deployment = load_profile(profile).resolve(variant)
    ref = _image_for(deployment, image)
    engine = Engine.connect()
    header = f"{deployment.profile.name}/{deployment.variant}"

    def render(state: launch.Probe, elapsed: float, last_line: str) -> Text:
        text = Text()
        text.append(f"{header} ", style="bold")
        text.append(f"{state.phase.value:<8}", style="green" if state.phase.value == "ready" else "yellow")
        text.append(f" {elapsed:7.1f} s  {state.detail}\n")
        text.append(f"  {last_line}", style="dim")
        return text

    with Live(Text(f"{header} starting"), console=console, transient=True, refresh_per_second=4) as live:
        return launch.up(
            deployment, ref, engine, timeout_seconds=timeout, replace=replace,
            on_progress=lambda state, elapsed, line: live.update(render(state, elapsed, line)),
        )


def down(profile: str | None, grace: int | None) -> list[str]:
    engine = Engine.connect()
    name = load_profile(profile).name if profile else None
    return launch.down(engine, name, grace)


def status_table() -> Table:
    engine = Engine.connect()
    table = Table("container", "profile", "variant", "image", "patch sha", "uptime", "readiness")
    for info in launch.find_servers(engine):
        labels = info.labels
        table.add_row(
            info.name,
            labels.get("opsctl.profile", "?"),
            labels.get("opsctl.variant", "?"),
            labels.get("opsctl.image", info.image),
            labels.get("opsctl.patch-sha256", "none")[:12],
            launch.uptime(info),
            launch.readiness_of(info),
        )
    if not table.row_count:
        table.caption = "no opsctl deployment found"
    return table


def logs(profile: str | None, follow: bool, tail: int) -> Iterator[str]:
    engine = Engine.connect()
    name = load_profile(profile).name if profile else None
    servers = launch.find_servers(engine, name)
    if not servers:
        raise LaunchError("no opsctl server container found", hint="`opsctl status` lists them")
    if len(servers) > 1:
        names = ", ".join(i.labels.get("opsctl.profile", i.name) for i in servers)
        raise LaunchError(f"several servers run ({names})", hint="choose one with --profile")
    if follow:
        yield from engine.follow_logs(servers[0].id, tail=tail)
    else:
        yield engine.logs(servers[0].id, tail=tail)
