"""Commands of the trace room: `trace analyze` and `trace capture`.

Typer declarations, and the collaborators capture gets from other rooms: the profile's running
container (deploy, engine), the load (traffic) and the HTTP client.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, command_group, console
from opsctl.core.files import check_output_path

if TYPE_CHECKING:
    from opsctl.trace.app import CapturePlan

trace_app = command_group("Profile a server's decode steps and name the bottleneck.")
app.add_typer(trace_app, name="trace")

OutOpt = Annotated[str | None, typer.Option("--out", help="Report directory (default "
                   "out/trace-<UTC time>/): analysis.json, analysis.md, kernels.png.")]
LayersOpt = Annotated[int | None, typer.Option("--layers", min=1, help="Decoder layers of the "
                      "model, for per-layer figures in the verdicts (GLM-5: 78).")]
MaxMbOpt = Annotated[int, typer.Option("--max-mb", min=1, help="Refuse a trace file larger "
                     "than this once decompressed (MiB).")]


@trace_app.command("analyze")
def analyze(
    path: Annotated[str, typer.Argument(help="A Chrome trace (.json or .json.gz, as "
                    "/start_profile writes) or a directory of them (one per TP rank).")],
    compare: Annotated[str | None, typer.Option("--compare", help="Another trace (or "
                       "directory): show what moved from PATH to it.")] = None,
    out: OutOpt = None,
    layers: LayersOpt = None,
    max_mb: MaxMbOpt = 1024,
    profile: Annotated[str | None, typer.Option("--profile", help="Profile name for the "
                       "report's header.")] = None,
    variant: Annotated[str | None, typer.Option("--variant", help="Variant name for the "
                       "report's header.")] = None,
) -> None:
    """Per decode step: top GPU kernels and CPU ops, copies and casts, and a verdict naming
    known signatures (full-pool KV cast, MoE GEMMs, NCCL all-reduce, GPU idle gaps, host syncs).

    Exit 0 analyzed (whatever the verdict), 2 a path that is not a readable trace.
    """
    from opsctl.trace import app as trace
    from opsctl.trace import view

    out_dir = check_output_path(Path(out), "--out", directory=True) if out else None
    request = trace.AnalyzeRequest(
        path=Path(path), compare=Path(compare) if compare else None, out_dir=out_dir,
        layers=layers, max_bytes=max_mb << 20,
        header={"profile": profile or "", "variant": variant or ""})
    view.show_analysis(trace.analyze_traces(request, plot=view.write_chart), console)


@trace_app.command("capture")
def capture(
    profile: ProfileOpt = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Profile this server "
                        "instead of the profile's running container (needs --trace-dir).")] = None,
    trace_dir: Annotated[str | None, typer.Option("--trace-dir", help="With --base-url: a "
                         "directory on this host where the server can write (it is sent as "
                         "output_dir unless --server-dir says how the server sees it).")] = None,
    server_dir: Annotated[str | None, typer.Option("--server-dir", help="output_dir as the "
                          "server sees it (default: a fresh directory under the container's "
                          "SGLANG_TORCH_PROFILER_DIR, else /tmp; or --trace-dir).")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Streaming requests "
                           "kept in flight while profiling.")] = 8,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Forward steps to profile "
                     "(num_steps).")] = 5,
    out: OutOpt = None,
    wait: Annotated[float, typer.Option("--wait", min=1, help="Seconds to wait for the trace "
                    "files before calling /stop_profile.")] = 300.0,
    layers: LayersOpt = None,
    max_mb: MaxMbOpt = 1024,
    variant: VariantOpt = None,
) -> None:
    """Profile decode under a steady load (sglang's /start_profile with num_steps), collect the
    trace files (from the container, or --trace-dir) and analyze them.

    Exit 0 captured and analyzed, 2 bad usage, 4 the server is not running, refused the profile,
    or wrote no trace in time, 130 interrupted (the profile stopped, analysis.json marked
    partial).
    """
    from opsctl.core.clock import SYSTEM_CLOCK
    from opsctl.core.errors import UsageError
    from opsctl.core.httpcap import capped_client, checked_base_url
    from opsctl.core.redact import api_key_from_env, auth_headers
    from opsctl.trace import app as trace
    from opsctl.trace import view
    from opsctl.trace.load import LoadShape, steady_load

    if base_url and not trace_dir:
        raise UsageError("--base-url needs --trace-dir (where the server's trace files can be "
                         "read on this host)", hint="or capture a profile's container: --profile")
    out_dir = check_output_path(Path(out), "--out", directory=True) if out else None
    how = {"concurrency": concurrency, "steps": steps, "out_dir": out_dir, "wait_s": wait,
           "layers": layers, "max_bytes": max_mb << 20}
    if base_url:
        plan = _url_plan(checked_base_url(base_url, "--base-url"), Path(trace_dir or ""),
                         server_dir, profile, variant, how)
    else:
        plan = _container_plan(profile, server_dir, how)
    key = api_key_from_env()
    shape = LoadShape(api_key=key)
    result = trace.capture(
        plan,
        http=lambda: capped_client(headers=auth_headers(key), base_url=plan.base_url,
                                   timeout_s=120.0),
        load=lambda url, c: steady_load(url, c, shape), clock=SYSTEM_CLOCK,
        plot=view.write_chart)
    view.show_capture(result, console)


def _url_plan(url: str, trace_dir: Path, server_dir: str | None, profile: str | None,
              variant: str | None, how: dict[str, Any]) -> CapturePlan:
    from opsctl.trace.app import CapturePlan
    from opsctl.trace.capture import LocalDir

    local = check_output_path(trace_dir, "--trace-dir", directory=True).absolute()
    return CapturePlan(base_url=url, source=LocalDir(local), server_dir=server_dir or str(local),
                       profile=profile, variant=variant, **how)


def _container_plan(profile: str | None, server_dir: str | None,
                    how: dict[str, Any]) -> CapturePlan:
    """The profile's running server: its URL, the variant it runs, its container's trace dir."""
    from opsctl.config.profiles import load_profile
    from opsctl.core import labels
    from opsctl.core.errors import LaunchError
    from opsctl.deploy import app as deploy_app
    from opsctl.engine.dockerpy import connect
    from opsctl.trace.app import CapturePlan, server_trace_dir
    from opsctl.trace.capture import ContainerDir

    loaded = load_profile(profile)
    engine = connect()
    running = [s for s in deploy_app.find_servers(engine, loaded.name) if s.status == "running"]
    if not running:
        raise LaunchError(f"no running opsctl server for profile {loaded.name!r}",
                          hint=f"start it with `opsctl up --profile {loaded.name}`, or pass "
                          "--base-url with --trace-dir")
    server = running[0]
    variant = server.labels.get(labels.VARIANT)
    env = loaded.resolve(variant).env
    remote = server_dir or server_trace_dir(env)
    return CapturePlan(base_url=server.labels[labels.BASE_URL],
                       source=ContainerDir(engine, server.id, remote), server_dir=remote,
                       profile=loaded.name, variant=variant, **how)
