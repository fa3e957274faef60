"""Commands of the traffic room: smoke and bench."""

from __future__ import annotations

from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console

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

    from opsctl.traffic.smoke import smoke_command

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

    from opsctl.traffic.bench import bench_command

    bench_command(
        profile=profile, variants=variants, base_urls=base_url or [], concurrency=concurrency,
        requests_per_level=requests, input_words=input_words, output_tokens=output_tokens,
        model=model, api=api, request_timeout_s=request_timeout,
        out_dir=Path(out) if out else None, pushgateway=pushgateway, console=console,
    )

