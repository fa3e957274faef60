"""opsctl's command line: parse, call one domain function, print. Errors are reported here only.

Exit codes: 0 ok · 1 unexpected bug · 2 bad usage or invalid profile · 3 build failed ·
4 launch/readiness failed · 5 smoke or SLO failed · 6 Docker daemon unreachable.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from opsctl.errors import OpsctlError

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 unexpected bug; 2 bad usage or invalid profile; 3 build failed; "
    "4 launch/readiness failed; 5 smoke or SLO failed; 6 Docker daemon unreachable; 130 interrupted."
)

app = typer.Typer(
    help="Deploy GLM-5-NVFP4 with sglang on one 8x RTX PRO 6000 host.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
profile_app = typer.Typer(help="Inspect deployment profiles.", no_args_is_help=True)
app.add_typer(profile_app, name="profile")

# Piped output (CI logs, scripts) keeps whole table cells instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", "-p", help="Profile name under deploy/ or a YAML path "
                 "(default: $OPSCTL_PROFILE or 'sim')."),
]
VariantOpt = Annotated[str | None, typer.Option("--variant", "-v", help="Variant of the profile.")]


def main() -> None:
    """Console entry point: every OpsctlError becomes one line, a hint and its exit code.

    typer runs in standalone mode, so its own usage errors already exit 2 with click's message.
    """
    try:
        app()
    except OpsctlError as exc:
        for line in exc.details:
            err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
        err_console.print(f"[bold red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        if exc.hint:
            err_console.print(f"[dim]hint:[/] {exc.hint}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


# --- profile commands --------------------------------------------------------------------------


@profile_app.command("show")
def profile_show(profile: ProfileOpt = None, variant: VariantOpt = None) -> None:
    """Validate a profile and print the sglang argv of a variant."""
    from opsctl.profiles import check_argv, load_profile

    deployment = load_profile(profile).resolve(variant)
    console.print(" ".join(check_argv(deployment)), highlight=False, soft_wrap=True)


@profile_app.command("schema")
def profile_schema() -> None:
    """Print the JSON schema of a deployment profile."""
    from opsctl.profiles import profile_schema as schema

    console.print_json(json.dumps(schema()))


# --- sglang-args commands (issue 2) -----------------------------------------------------------

sglang_args_app = typer.Typer(
    help="The pinned sglang versions' real argument parsers, against which flags are checked.",
    no_args_is_help=True,
)
app.add_typer(sglang_args_app, name="sglang-args")


@sglang_args_app.command("extract")
def sglang_args_extract(
    version: Annotated[str, typer.Option("--version", help="sglang release, e.g. 0.5.23.")],
    wheel_dir: Annotated[
        str | None,
        typer.Option("--wheel-dir", help="Wheel cache (default /var/cache/opsctl-wheels)."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", help="Write here instead of sglang/<version>/cli-args.json."),
    ] = None,
) -> None:
    """Record sglang's parser from the real wheel into sglang/<version>/cli-args.json."""
    from pathlib import Path

    from opsctl.sglang_args_extract import DEFAULT_WHEEL_DIR, extract

    result = extract(
        version,
        Path(wheel_dir) if wheel_dir else DEFAULT_WHEEL_DIR,
        Path(output) if output else None,
    )
    console.print(
        f"wrote {result.path}: {result.actions} arguments of sglang {version} "
        f"({result.wheel.name})",
        highlight=False,
        soft_wrap=True,
    )


# --- lifecycle commands (issue 2) --------------------------------------------------------------


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
    from opsctl import lifecycle

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
    from opsctl import lifecycle

    removed = lifecycle.down(profile, grace)
    console.print("removed: " + ", ".join(removed) if removed else "nothing to remove")


@app.command()
def status() -> None:
    """Show opsctl's deployments: profile, variant, image, patch sha, uptime, readiness."""
    from opsctl import lifecycle

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
    from opsctl import lifecycle

    for chunk in lifecycle.logs(profile, follow, tail):
        sys.stdout.write(chunk)
        sys.stdout.flush()


# --- patch commands (issue 3) ------------------------------------------------------------------

patch_app = typer.Typer(help="Check and apply the gather-then-cast patch sets.", no_args_is_help=True)
app.add_typer(patch_app, name="patch")


def _print_patch_report(lines: list[str]) -> None:
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


@patch_app.command("check")
def patch_check(
    sglang_src: Annotated[str | None, typer.Option(
        "--sglang-src", help="Directory holding the sglang package (unpacked wheel or "
        "site-packages).")] = None,
    sglang_version: Annotated[str | None, typer.Option(
        "--sglang-version", help="Download this sglang release (pip download --no-deps, cached "
        "in $OPSCTL_WHEEL_CACHE) and check against it.")] = None,
    version: Annotated[str | None, typer.Option(
        "--version", help="Patch set to use (default: the tree's or release's version).")] = None,
) -> None:
    """Apply a patch set to a temporary copy of a real sglang tree, with zero fuzz."""
    from pathlib import Path

    from opsctl import patchset
    from opsctl.errors import UsageError

    if (sglang_src is None) == (sglang_version is None):
        raise UsageError("give exactly one of --sglang-src DIR and --sglang-version X",
                         hint="opsctl patch check --sglang-version 0.5.9")
    if sglang_version is not None:
        report = patchset.check_release(sglang_version, version)
    else:
        src = Path(sglang_src or "")
        chosen = version or patchset.tree_version(src)
        if chosen is None:
            raise UsageError(f"cannot tell the sglang version of {src}",
                             hint="pass --version X, or a directory that holds sglang/")
        report = patchset.check(src, chosen)
    _print_patch_report(report.lines())


@patch_app.command("apply")
def patch_apply(
    sglang_src: Annotated[str, typer.Option(
        "--sglang-src", help="Directory holding the sglang package, patched in place.")],
    version: Annotated[str | None, typer.Option(
        "--version", help="Patch set to use (default: the tree's version).")] = None,
) -> None:
    """Verify, then patch a real sglang tree in place (the build's code path)."""
    from pathlib import Path

    from opsctl import patchset
    from opsctl.errors import UsageError

    src = Path(sglang_src)
    chosen = version or patchset.tree_version(src)
    if chosen is None:
        raise UsageError(f"cannot tell the sglang version of {src}",
                         hint="pass --version X, or a directory that holds sglang/")
    report = patchset.apply(src, patchset.patch_set_dir(chosen))
    _print_patch_report(report.lines())


# --- build command (issue 4) -------------------------------------------------------------------


@app.command("build")
def build_command(
    profile: ProfileOpt = None,
    base_image: Annotated[str | None, typer.Option(
        "--base-image", help="Build on this image instead of the profile's image.base "
        "(e.g. a local stand-in); its digest is locked like the profile's.")] = None,
    tag: Annotated[str | None, typer.Option(
        "--tag", help="Tag to build (default: <repository>:<sglang version>-<content hash>).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Rebuild even if the tag exists; re-lock a base whose digest moved.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the plan (base, tag, patch set, build args); no engine needed.")] = False,
) -> None:
    """Build and verify the image `opsctl up` runs (exit 3 on any failure, 6 without a daemon)."""
    from opsctl import build as builder
    from opsctl.buildview import BuildView
    from opsctl.engine import Engine
    from opsctl.profiles import load_profile

    the_plan = builder.plan(load_profile(profile), base_image=base_image, tag=tag)
    if dry_run:
        for name, value in the_plan.describe():
            console.print(f"[bold]{name:>12}[/]  {value}", highlight=False, soft_wrap=True)
        return
    engine = Engine.connect()
    with BuildView(err_console, f"building {the_plan.repository} ({the_plan.profile})") as view:
        result = builder.build(the_plan, engine, force=force, on_event=view.on_event)
    if result.relocked:
        err_console.print(f"[bold yellow]re-locked[/] {result.base.ref} -> {result.base.digest} "
                          f"in {the_plan.lock_path}", highlight=False, soft_wrap=True)
    state = "up to date" if result.skipped else f"built and verified ({len(result.checks)} checks)"
    err_console.print(f"[green]{state}:[/] {result.tag}", highlight=False, soft_wrap=True)
    console.print(result.tag, highlight=False, soft_wrap=True)


@app.command("base-image")
def base_image_command(
    sglang_standin: Annotated[str | None, typer.Option(
        "--sglang-standin", metavar="VERSION", help="Also build opsctl/sglang-standin:VERSION "
        "(the base + the real sglang wheel, --no-deps) for testing the real Dockerfile.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if present.")] = False,
) -> None:
    """Build the local Debian base (debootstrap + docker import; needs root) for hosts without a registry."""
    from opsctl import baseimage
    from opsctl.buildview import BuildView
    from opsctl.engine import Engine

    engine = Engine.connect()
    with BuildView(err_console, "building base images") as view:
        results = [baseimage.build_debian_base(engine, force=force, on_event=view.on_event)]
        if sglang_standin:
            results.append(baseimage.build_standin(engine, sglang_standin, force=force,
                                                   on_event=view.on_event))
    for result in results:
        state = "present" if result.skipped else "built"
        console.print(f"{result.ref} {state} ({result.image_id[:19]})", highlight=False)

# --- smoke and bench commands (issue 5) --------------------------------------------------------


ApiOpt = Annotated[
    str, typer.Option("--api", help="OpenAI endpoint to exercise: 'completions' or 'chat'.")
]
PushOpt = Annotated[
    str | None, typer.Option("--pushgateway", help="Push results to this Pushgateway URL "
                             "(default: $OPSCTL_PUSHGATEWAY; unset: no push).")
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="Served model name to use when /v1/models lists "
                             "several and none is the profile's (never guessed otherwise).")
]


@app.command()
def smoke(
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Check this server "
                        "instead of the profile's running container.")] = None,
    json_path: Annotated[str | None, typer.Option("--json", help="Write the JSON report here "
                         "(overwritten; default out/smoke-<UTC time>.json).")] = None,
    compare_with: Annotated[str | None, typer.Option(
        "--compare-with",
        help="A smoke JSON report of another variant; fail if any greedy output differs.",
    )] = None,
    model: ModelOpt = None,
    api: ApiOpt = "completions",
    request_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 120.0,
    timeout: Annotated[float, typer.Option(help="Seconds for the whole smoke run.")] = 600.0,
    pushgateway: PushOpt = None,
) -> None:
    """Post-deploy check: readiness, served model name, generations, TTFT/TPOT, metrics, SLO.

    The API key comes from $OPSCTL_API_KEY and is masked in every output.
    Exit 0 pass, 2 bad usage, 4 server unreachable, 5 a check or the SLO failed.
    """
    from pathlib import Path

    from opsctl.smoke import smoke_command

    smoke_command(
        profile=profile, variant=variant, base_url=base_url, model=model, api=api,
        json_path=Path(json_path) if json_path else None,
        compare_with=Path(compare_with) if compare_with else None,
        request_timeout_s=request_timeout, overall_timeout_s=timeout,
        pushgateway=pushgateway, console=console,
    )


@app.command()
def bench(
    profile: ProfileOpt = None,
    variants: Annotated[str | None, typer.Option("--variants", help="Comma-separated variants: "
                        "each is brought up, swept and taken down (or names the --base-url "
                        "targets in order).")] = None,
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="Comma-separated "
                           "levels (default 1,2,4,8,16,32,64).")] = None,
    base_url: Annotated[list[str] | None, typer.Option("--base-url", help="[NAME=]URL of a "
                        "running server; repeat for several.")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Report directory (default "
                   "out/bench-<UTC time>/).")] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=1, help="Measured requests "
                        "per level (default max(16, 4 x concurrency)).")] = None,
    input_words: Annotated[int, typer.Option(min=1, help="Prompt length in words "
                           "(about one token each).")] = 256,
    output_tokens: Annotated[int, typer.Option(min=2, help="Output tokens per request.")] = 256,
    model: ModelOpt = None,
    api: ApiOpt = "completions",
    request_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 600.0,
    pushgateway: PushOpt = None,
) -> None:
    """Concurrency sweep per variant: TTFT/ITL/TPOT percentiles, throughput, failures.

    Writes bench.json, bench.md (table with deltas vs the first variant), tpot.png and
    throughput.png.
    Exit 0 ok, 2 bad usage, 4 a target unreachable or not launched, 5 any request failed.
    """
    from pathlib import Path

    from opsctl.bench import bench_command

    bench_command(
        profile=profile, variants=variants, base_urls=base_url or [], concurrency=concurrency,
        requests_per_level=requests, input_words=input_words, output_tokens=output_tokens,
        model=model, api=api, request_timeout_s=request_timeout,
        out_dir=Path(out) if out else None, pushgateway=pushgateway, console=console,
    )


# --- observability commands (issue 6) ----------------------------------------------------------

monitor_app = typer.Typer(
    help="Prometheus, Pushgateway and Grafana for this host (127.0.0.1 only).",
    no_args_is_help=True,
)
app.add_typer(monitor_app, name="monitor")


@monitor_app.command("render")
def monitor_render(
    profile: ProfileOpt = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Folder to write into (default: the checkout's monitoring/, rendered "
        "for the shipped profile).")] = None,
) -> None:
    """Render the scrape config, rules, Grafana provisioning and dashboard."""
    from pathlib import Path

    from opsctl import monitoring
    from opsctl.paths import project_root
    from opsctl.profiles import load_profile

    chosen = profile or (None if out else monitoring.SHIPPED_PROFILE)
    files = monitoring.render_for_profile(load_profile(chosen))
    root = Path(out) if out else project_root() / "monitoring"
    for path in monitoring.write_files(files, root):
        console.print(str(path), highlight=False)


@monitor_app.command("up")
def monitor_up(
    profile: ProfileOpt = None,
    config_dir: Annotated[str | None, typer.Option(
        "--config-dir", help="Where the rendered config goes (default: "
        "$XDG_STATE_HOME/opsctl/monitoring).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Render the config and print the docker run commands; start nothing."
    )] = False,
) -> None:
    """Start Prometheus, a Pushgateway and Grafana as containers bound to 127.0.0.1."""
    from pathlib import Path

    from opsctl import monitoring
    from opsctl.profiles import load_profile

    loaded = load_profile(profile)
    folder = Path(config_dir) if config_dir else monitoring.default_config_dir()
    if dry_run:
        result = monitoring.plan(loaded, folder, create_secrets=False)
        monitoring.write_files(result.files, folder)
        console.print(monitoring.dry_run_text(result), highlight=False, soft_wrap=True)
        return
    from opsctl.engine import Engine

    for name in monitoring.up(Engine.connect(), loaded, folder):
        console.print(f"started {name}", highlight=False)
    console.print(
        f"Grafana http://127.0.0.1:{monitoring.GRAFANA_PORT} (admin password in "
        f"{folder / monitoring.GRAFANA_PASSWORD_FILE}), Prometheus "
        f"http://127.0.0.1:{monitoring.PROMETHEUS_PORT}, Pushgateway "
        f"http://127.0.0.1:{monitoring.PUSHGATEWAY_PORT}", highlight=False, soft_wrap=True)


@monitor_app.command("down")
def monitor_down() -> None:
    """Stop and remove the monitoring containers (their data volumes stay)."""
    from opsctl import monitoring
    from opsctl.engine import Engine

    for name in monitoring.down(Engine.connect()):
        console.print(f"removed {name}", highlight=False)


@app.command("exporter")
def exporter(
    port: Annotated[int, typer.Option("--port", help="Port to serve /metrics on.")] = 9464,
    address: Annotated[str, typer.Option("--address", help="Address to bind.")] = "127.0.0.1",
    profile: ProfileOpt = None,
    variant: Annotated[str | None, typer.Option(
        "--variant", "-v", help="Describe this variant of the profile instead of asking Docker "
        "what runs.")] = None,
    image: Annotated[str | None, typer.Option(
        "--image", help="Image reference to report with --variant.")] = None,
    reports: Annotated[str, typer.Option(
        "--reports", help="Folder of smoke/bench report files to serve.")] = "out",
) -> None:
    """Serve opsctl_* metrics: the running deployment and the latest smoke and bench results."""
    from pathlib import Path

    from opsctl import metrics

    source = (metrics.static_source(profile, variant, image) if variant
              else metrics.docker_source(profile))
    registry = metrics.exporter_registry(source, Path(reports))
    console.print(f"serving opsctl metrics on http://{address}:{port}/metrics", highlight=False)
    metrics.serve(registry, address, port)


@app.command("report")
def report(
    prometheus: Annotated[str, typer.Option(
        "--prometheus", help="Prometheus base URL.")] = "http://127.0.0.1:9090",
    since: Annotated[str, typer.Option("--since", help="Time range back from now.")] = "30m",
    variant: Annotated[str, typer.Option(
        "--variant", help="Regex of variants to draw (the dashboard's $variant).")] = ".*",
    out: Annotated[str, typer.Option("--out", help="PNG to write.")] = "out/decode-latency.png",
) -> None:
    """Render the dashboard's decode-latency panels to a PNG from Prometheus data."""
    from pathlib import Path

    from opsctl import report as report_module

    path = report_module.render(prometheus, Path(out), report_module.parse_duration(since), variant)
    console.print(f"wrote {path}", highlight=False)


# --- simulator command (issue 2) ---------------------------------------------------------------


@app.command(
    "sim",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def sim(ctx: typer.Context) -> None:
    """Run the sglang 0.5.23 API simulator; takes sglang launch flags (e.g. --model-path,
    --served-model-name, --port, --enable-metrics). Behaviour: OPSCTL_SIM_* variables and
    POST /_sim/config (see the opsctl.sim docstring)."""
    from opsctl.sim.server import run

    raise typer.Exit(run(list(ctx.args)))



