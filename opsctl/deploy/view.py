"""How the deploy room's results look: the live readiness line of `up`, the status table, the
dry-run plan, `profile show` and `host p2p`. The only
module of opsctl/deploy/ that knows about rich.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from opsctl.config.profiles import Deployment
from opsctl.config.review import ProfileShow, VariantSummary
from opsctl.config.runspec import HEALTH_PATH
from opsctl.deploy.app import (
    DownResult,
    DryRun,
    LogsResult,
    Progress,
    ResolveResult,
    UpResult,
)
from opsctl.deploy.hostcheck import HostP2pReport
from opsctl.deploy.logsave import LOGS_DIR
from opsctl.deploy.readiness import HEARTBEAT_SECONDS, Phase
from opsctl.deploy.serverstatus import ServerStatus


def _variant_lines(summary: VariantSummary, indent: str = "") -> list[str]:
    return [
        f"# {indent}sglang {summary.sglang_version} on {summary.base}, "
        f"patch switch {'on' if summary.patched else 'off'}",
        f"# {indent}computes: {summary.computes}",
        *([f"# {indent}speculative: {summary.speculative}"] if summary.speculative else []),
        *(f"# {indent}warning: {warning}" for warning in summary.warnings),
    ]


def profile_text(shown: ProfileShow) -> str:
    """The chosen variant's argv, then each variant: release, image base, computes, warnings."""
    lines = [shlex.join(shown.argv)]
    for index, summary in enumerate(shown.variants):
        chosen = " (shown above)" if index == 0 else ""
        lines.append(f"# variant {summary.name}{chosen}: {summary.description}")
        lines += _variant_lines(summary, indent="  ")
    return "\n".join([*lines, *_source_lines(shown.deployment)])


def _source_lines(deployment: Deployment) -> list[str]:
    source = deployment.profile.source
    return [f"# profile file: {source}"] if source else []


def print_warnings(console: Console, summary: VariantSummary) -> None:
    for warning in summary.warnings:
        console.print(Text.assemble(("warning:", "bold yellow"), " ", warning),
                      highlight=False, soft_wrap=True)


def dry_run_text(plan: DryRun) -> str:
    deployment = plan.deployment
    return "\n".join([
        f"# profile {deployment.profile.name}, variant {deployment.variant}, "
        f"config {deployment.config_hash()[:12]}",
        *_variant_lines(plan.summary),
        "# docker run equivalent:",
        shlex.join(plan.spec.docker_run_argv()),
        "# sglang argv:",
        shlex.join(plan.spec.command),
        f"# ready when {plan.base_url}/health_generate is 200 and /v1/models lists "
        f"{deployment.model.served_name!r}",
        *_healing_lines(plan),
        *([f"# {plan.preflight}"] if plan.preflight else []),
        *_source_lines(deployment),
    ])


def _healing_lines(plan: DryRun) -> list[str]:
    """The restart policy, health check and log options of the plan, in words."""
    spec, lines = plan.spec, []
    if spec.restart_max is not None:
        lines.append(f"# restart policy: on-failure, at most {spec.restart_max} restarts"
                     if spec.restart_max else "# restart policy: never restart")
    if spec.healthcheck is not None:
        check = spec.healthcheck
        lines.append(f"# health check: sglang's {HEALTH_PATH} (no generation) every "
                     f"{check.interval_seconds} s, timeout {check.timeout_seconds} s, unhealthy "
                     f"after {check.retries} failures, not counted for the first "
                     f"{check.start_period_seconds} s (readiness.timeout_seconds)")
    if spec.log_rotation is not None:
        lines.append(f"# logs: json-file, {spec.log_rotation.max_files} files of "
                     f"{spec.log_rotation.max_size}; saved whole to {LOGS_DIR}/ before any removal")
    return lines


@contextmanager
def up_progress(console: Console, deployment: Deployment) -> Iterator[Callable[[Progress], None]]:
    """While `up` waits: a line per start-up phase and, while one lasts, a "still" line at least
    every readiness.REPORT_EVERY_SECONDS, on a terminal or not (piped, under nohup or systemd);
    on a terminal also a transient live line below them. Yields the callback that reports."""
    header = f"{deployment.profile.name}/{deployment.variant}"
    lines = PhaseLines(header)

    def render(progress: Progress) -> Text:
        state = progress.probe
        text = Text()
        text.append(f"{header} ", style="bold")
        text.append(
            f"{state.phase.value:<8}", style="green" if state.phase is Phase.READY else "yellow"
        )
        text.append(f" {progress.elapsed_seconds:7.1f} s  {state.detail}\n")
        text.append(f"  {progress.last_log_line}", style="dim")
        return text

    with Live(
        Text(f"{header} starting"), console=console, transient=True, refresh_per_second=4
    ) as live:

        def report(progress: Progress) -> None:
            line = lines.line(progress)
            if line is not None:
                live.console.print(Text(line), highlight=False, soft_wrap=True)
            live.update(render(progress))

        yield report


class PhaseLines:
    """Which of `up`'s readiness reports print a line, and the line: a new phase at once, a
    lasting one again after readiness.HEARTBEAT_SECONDS of silence (the reports come at least
    every readiness.TICK_SECONDS plus one probe, so lines are never further apart than
    readiness.REPORT_EVERY_SECONDS)."""

    def __init__(self, header: str) -> None:
        self._header = header
        self._shown: str | None = None
        self._at = 0.0

    def line(self, progress: Progress) -> str | None:
        phase, elapsed = _phase_words(progress), progress.elapsed_seconds
        still = phase == self._shown
        if still and elapsed - self._at < HEARTBEAT_SECONDS:
            return None
        self._shown, self._at = phase, elapsed
        state = progress.probe
        text = f"{self._header} {_minutes(elapsed)}  {'still ' if still else ''}{phase}"
        if state.phase is not Phase.READY:
            text += f" ({state.detail})"
        if still and progress.last_log_line:
            text += f"; log: {progress.last_log_line[-120:]}"
        return text


def _phase_words(progress: Progress) -> str:
    """The phase in words: the probe's when ready, else the server log's, else the probe's."""
    state = progress.probe
    if state.phase is Phase.READY:
        return state.detail
    if progress.server_phase:
        return progress.server_phase
    return "starting" if state.phase is Phase.LOADING else "warming up"


def _minutes(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60:3d}m{whole % 60:02d}s"


def print_up(console: Console, result: UpResult) -> None:
    if result.already_up:
        console.print(Text(f"already up: {result.container.name} at {result.base_url} "
                           "(same configuration)"), highlight=False, soft_wrap=True)
    else:
        console.print(Text.assemble(("ready", "green"), f" {result.container.name} at "
                                    f"{result.base_url} after {result.elapsed_seconds:.1f} s"),
                      highlight=False, soft_wrap=True)
    if result.verdict is not None:
        checkpoint = result.verdict.checkpoint
        shown = checkpoint.id[:12] if checkpoint.id else f"unavailable ({checkpoint.unavailable})"
        console.print(Text(f"verify: {result.verdict.summary()}; checkpoint {shown}"),
                      highlight=False, soft_wrap=True)


def print_down(console: Console, result: DownResult) -> None:
    console.print(Text("removed: " + ", ".join(result.removed) if result.removed
                       else "nothing to remove"), highlight=False, soft_wrap=True)
    for path in result.logs:
        console.print(Text(f"log saved: {path}"), highlight=False, soft_wrap=True)


def note(console: Console) -> Callable[[str], None]:
    """Prints what `up`/`down` do to a container as they do it (stopping, saving its log)."""
    return lambda line: console.print(Text.assemble(("note:", "bold"), " ", line),
                                      highlight=False, soft_wrap=True)


def status_json(servers: list[ServerStatus]) -> str:
    """`status --json`: {"servers": [{name, profile, variant, image, patch_sha256, uptime,
    readiness, verdict, health, restarts, last_exit, crash_loop}, ...]}."""
    return json.dumps({"servers": [dataclasses.asdict(server) for server in servers]}, indent=2)


def status_table(servers: list[ServerStatus]) -> Table:
    table = Table("container", "profile", "variant", "image", "patch sha", "uptime", "readiness",
                  "health", "restarts", "last exit", "verdict")
    for server in servers:
        verdict = Text(server.verdict, style="bold red" if server.verdict.startswith("MISMATCH")
                       else "green" if server.verdict.startswith("verified") else "")
        health = Text(server.health, style="bold red" if server.health.startswith("unhealthy")
                      else "green" if server.health == "healthy" else "")
        restarts = Text(f"{server.restarts} ({server.crash_loop})" if server.crash_loop
                        else server.restarts, style="bold red" if server.crash_loop else "")
        cells = (server.name, server.profile, server.variant, server.image,
                 server.patch_sha256[:12], server.uptime, server.readiness)
        table.add_row(*(Text(cell) for cell in cells), health, restarts, Text(server.last_exit),
                      verdict)
    if not table.row_count:
        table.caption = "no opsctl deployment found"
    return table


def write_logs(result: LogsResult, out: TextIO) -> None:
    """Raw log text as the server wrote it (no markup), flushed chunk by chunk for --follow."""
    for chunk in result.chunks:
        out.write(chunk)
        out.flush()


def host_p2p_text(report: HostP2pReport) -> str:
    """The GPU pairs across the root complex, the IOMMU and ACS state, and the verdict."""
    found = report.verdict
    crossing = ("none" if found.crossing_ok is None
                else "reported OK" if found.crossing_ok else "NOT reported OK")
    advice = {True: "advisable", False: "not advisable", None: "cannot tell yet"}[
        found.sys_advisable
    ]
    lines = [
        f"GPUs: {len(report.gpus)} ({' '.join(report.gpus)})",
        f"GPU pairs across the root complex (PHB/NODE/SYS): {found.crossing_pairs}, P2P {crossing}",
        *(f"  not OK: {pair}" for pair in found.not_ok),
        f"IOMMU: {report.iommu.mode} ({report.iommu.groups} groups; kernel args: "
        f"{' '.join(report.iommu.cmdline) or 'none'})",
        f"ACS: {report.acs.note}",
        f"NCCL_P2P_LEVEL=SYS: {advice}",
        *(f"  {reason}" for reason in found.reasons),
    ]
    if found.sys_advisable:
        lines.append("  set container.nccl_p2p_level: SYS in the profile to use it")
    return "\n".join(lines)


def _short(value: object, width: int = 100) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 3] + "..."


def resolve_text(result: ResolveResult) -> str:
    """Per variant: what its release resolved (as /server_info will say it), or its refusal."""
    lines: list[str] = []
    for item in result.resolved:
        record = item.record
        gpu = record["gpu"]
        lines.append(
            f"{record['profile']} / {record['variant']}: sglang {record['sglang_version']} "
            f"{record['outcome']} (reported GPU: {gpu['count']}x {gpu['name']}, "
            f"sm_{gpu['compute_capability'].replace('.', '')}, {gpu['memory_gib']:g} GiB)")
        if record["outcome"] != "resolved":
            failed = record[record["outcome"]]
            lines.append(f"  {record['outcome']}: {failed['error']} [{failed['where']}]")
            lines.extend(f"  not run: {n['branch']}: {n['why']}" for n in record["not_run"])
            continue
        for label, value in record["server_info"].items():
            lines.append(f"  {label:<32} {_short(value)}")
        row = record["kv_row"]
        lines.append(f"  {'KV row':<32} " + (
            f"{row['bytes']} bytes ({row['elements']} x {row['pool_dtype']}, sglang's pool sizing)"
            if row.get("computed") else f"not computed: {row['error']}"))
        shared = record.get("dsa_topk_shared")
        if shared:
            lines.append(f"  {'DSA top-k reused (IndexShare)':<32} " + (
                f"{shared['layers']} of {shared['of']} layers (sglang's dsa_layer_skips_topk)"
                if shared.get("computed") else f"not computed: {shared['error']}"))
        left = record["left_to_sglang"]
        lines.append(f"  left to sglang ({len(left)} settings sglang changed from its default):")
        lines.extend(f"    {name} = {_short(change['resolved'], 80)} "
                     f"(default {_short(change['default'], 30)})"
                     for name, change in left.items())
        lines.extend(f"  not run: {n['branch']}: {n['why']}" for n in record["not_run"])
    lines.extend(f"wrote {path}" for path in result.written)
    return "\n".join(lines)
