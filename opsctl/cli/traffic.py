"""Commands of the traffic room: smoke and bench.

Typer declarations; the collaborators the traffic app gets from other rooms (the profile's
running server and its launcher, the metrics push, the client factory) come from the
composition root (cli/root.py).
"""

from __future__ import annotations

from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console, err_console, image_ref, within
from opsctl.cli.knobs import (
    ApiOpt,
    DatasetNameOpt,
    DatasetPathOpt,
    ExtraBodyOpt,
    GspGroupsOpt,
    GspPrefixOpt,
    GspPromptsOpt,
    InputWordsOpt,
    IslOslOpt,
    MultiTurnOpt,
    OutputTokensOpt,
    RangeRatioOpt,
    SeedOpt,
    TokenizerOpt,
    TraceScaleOpt,
    knob,
    workload,
)
from opsctl.cli.root import Root, gateway_from
from opsctl.traffic.settings import BENCH_DEFAULTS as _B
from opsctl.traffic.settings import SMOKE_DEFAULTS as _S
from opsctl.traffic.settings import BenchSettings, SmokeSettings

PushOpt = Annotated[
    str | None, typer.Option("--pushgateway", help="Push results to this Pushgateway URL "
                             "(default: $OPSCTL_PUSHGATEWAY; unset: no push).")
]


def _bench(name: str, *flags: str) -> object:
    return knob(BenchSettings, name, *flags)


def _smoke(name: str, *flags: str) -> object:
    return knob(SmokeSettings, name, *flags)


@app.command()
def smoke(
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url", help="Check this server instead of the profile's running container."
        ),
    ] = None,
    json_path: Annotated[
        str | None,
        typer.Option(
            "--json",
            help="Write the JSON report here (overwritten; default out/smoke-<UTC time>.json).",
        ),
    ] = None,
    compare_with: Annotated[
        str | None,
        typer.Option(
            "--compare-with",
            help="A smoke JSON report of another variant; fail if any greedy output differs, and "
            "say where the first one does.",
        ),
    ] = None,
    model: Annotated[str | None, _smoke("model", "--model")] = _S.model,
    api: Annotated[str, _smoke("api", "--api")] = _S.api,
    request_timeout: Annotated[
        float, _smoke("request_timeout_s", "--request-timeout")
    ] = _S.request_timeout_s,
    timeout: Annotated[float, _smoke("overall_timeout_s", "--timeout")] = _S.overall_timeout_s,
    eval_timeout: Annotated[float, _smoke("eval_timeout_s", "--eval-timeout")] = _S.eval_timeout_s,
    pushgateway: PushOpt = None,
    eval_name: Annotated[
        str | None,
        typer.Option(
            "--eval",
            help="After the checks, run this accuracy eval ('gsm8k': few-shot, greedy, "
            "on the profile's pinned dataset); below its threshold exits 5.",
        ),
    ] = None,
    eval_questions: Annotated[
        int | None,
        typer.Option(
            "--eval-questions",
            min=1,
            max=1_000_000,
            help="Ask the first N questions (default: the profile's).",
        ),
    ] = None,
    eval_dataset: Annotated[
        str | None,
        typer.Option(
            "--eval-dataset",
            help="GSM8K-shaped JSONL to use instead of the profile's (needs --eval-sha256).",
        ),
    ] = None,
    eval_sha256: Annotated[
        str | None,
        typer.Option(
            "--eval-sha256", help="sha256 pin of --eval-dataset (what `sha256sum` prints)."
        ),
    ] = None,
    eval_threshold: Annotated[
        float | None,
        typer.Option(
            "--eval-threshold",
            callback=within(0, 1),
            help="Least accuracy that passes, as a "
            "share (default: the profile's eval.gsm8k.threshold).",
        ),
    ] = None,
    eval_score_thinking: Annotated[
        bool | None,
        typer.Option(
            "--eval-score-thinking/--eval-score-answer",
            help="Score the thinking a reasoning parser "
            "split off, then the answer (as without a parser), or the answer alone (default: the "
            "profile's eval.gsm8k.score_thinking, else the answer); the report's `scored` says "
            "which.",
        ),
    ] = None,
    long_context: Annotated[
        bool,
        typer.Option(
            "--long-context",
            help="After the checks, send pass-key probes at the profile's "
            "eval.long_context sizes and a prefix-cached pair; a miss exits 5.",
        ),
    ] = False,
) -> None:
    """Post-deploy check: readiness, served model name, generations, TTFT/TPOT, metrics, SLO.

    With --eval gsm8k and --long-context, also accuracy and long-context retrieval (files
    pinned by sha256: the profile's, else GSM8K's test split, downloaded once from its public
    source at a pinned commit, or $OPSCTL_DATASETS_URL, into the state directory). The API key
    comes from $OPSCTL_API_KEY and is masked in every output.
    Exit 0 pass, 2 bad usage (or a dataset that is not the pinned one), 4 server not serving
    (unreachable, or no model list), 5 a check, the SLO, the accuracy threshold or a probe
    failed, 7 GSM8K's test split could not be downloaded.
    """
    from dataclasses import replace
    from pathlib import Path

    from opsctl.core.files import check_output_path
    from opsctl.core.httpcap import checked_base_url
    from opsctl.core.redact import api_key_from_env
    from opsctl.core.reports import REPORTS_DIR
    from opsctl.traffic import app as traffic
    from opsctl.traffic import view
    from opsctl.traffic.client import parse_api
    from opsctl.traffic.evals.dataset import load_gsm8k
    from opsctl.traffic.smoke_evals import eval_request

    if base_url is not None:
        checked_base_url(base_url, "--base-url")
    gateway = gateway_from(pushgateway)
    if json_path:
        check_output_path(Path(json_path), "--json")
    else:
        check_output_path(REPORTS_DIR, "the report directory", directory=True)
    evals = eval_request(eval_name, questions=eval_questions,
                         dataset=Path(eval_dataset) if eval_dataset else None,
                         sha256=eval_sha256, threshold=eval_threshold, long_context=long_context,
                         score_thinking=eval_score_thinking)
    settings = SmokeSettings(api=parse_api(api), model=model,
                             request_timeout_s=request_timeout, overall_timeout_s=timeout,
                             eval_timeout_s=eval_timeout)
    root = Root()
    options = replace(
        traffic.smoke_target(profile, variant, base_url, root.locate_server),
        api_key=api_key_from_env(), settings=settings,
        report_path=Path(json_path) if json_path else None,
        compare_with=Path(compare_with) if compare_with else None,
        gateway=gateway, progress=view.eval_progress(err_console),
    )
    result = traffic.smoke(options, evals, push=root.push, client_factory=root.client_factory,
                           load_dataset=load_gsm8k)
    view.show_smoke(result, console)
    if result.error is not None:
        raise result.error


@app.command()
def bench(
    profile: ProfileOpt = None,
    variants: Annotated[str | None, typer.Option("--variants", help="Comma-separated variants: "
                        "each is brought up, swept and taken down (or names the --base-url "
                        "targets in order).")] = None,
    concurrency: Annotated[str | None, _bench("concurrency", "--concurrency")] = None,
    base_url: Annotated[list[str] | None, typer.Option("--base-url", help="[NAME=]URL of a "
                        "running server; repeat for several.")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Report directory (default "
                   "out/bench-<UTC time>/).")] = None,
    requests: Annotated[int | None, _bench("requests_per_level", "--requests")
                        ] = _B.requests_per_level,
    input_words: InputWordsOpt = _B.input_words,
    output_tokens: OutputTokensOpt = _B.output_tokens,
    model: Annotated[str | None, _bench("model", "--model")] = _B.model,
    api: ApiOpt = _B.api,
    request_timeout: Annotated[float, _bench("request_timeout_s", "--request-timeout")
                               ] = _B.request_timeout_s,
    deadline: Annotated[float | None, _bench("deadline_s", "--deadline")] = _B.deadline_s,
    pushgateway: PushOpt = None,
    request_rate: Annotated[float | None, _bench("request_rate", "--request-rate")
                            ] = _B.request_rate,
    duration: Annotated[float | None, _bench("duration_s", "--duration")] = _B.duration_s,
    ignore_eos: Annotated[bool, _bench("ignore_eos", "--ignore-eos/--no-ignore-eos")
                          ] = _B.ignore_eos,
    dataset_name: DatasetNameOpt = _B.dataset,
    dataset_path: DatasetPathOpt = None,
    multi_turn: MultiTurnOpt = _B.multi_turn,
    trace_scale: TraceScaleOpt = _B.trace_scale,
    tokenizer: TokenizerOpt = None,
    seed: SeedOpt = _B.seed,
    gsp_groups: GspGroupsOpt = _B.gsp_groups,
    gsp_prompts_per_group: GspPromptsOpt = _B.gsp_prompts_per_group,
    gsp_prefix_len: GspPrefixOpt = _B.gsp_prefix_len,
    random_range_ratio: RangeRatioOpt = _B.range_ratio,
    isl_osl: IslOslOpt = None,
    extra_request_body: ExtraBodyOpt = None,
    driver: Annotated[str, typer.Option(
        "--driver", help="What sends the load: opsctl (its own client) or sglang-bench "
        "(`python3 -m sglang.bench_serving` inside each target's opsctl container, tokenizer "
        "and dataset paths as the container sees them).")] = "opsctl",
    client_workers: Annotated[int | None, _bench("client_workers", "--client-workers")
                              ] = _B.client_workers,
    saturation_gain: Annotated[float | None, _bench("saturation_gain", "--saturation-gain")
                               ] = _B.saturation_gain,
    max_error_rate: Annotated[float | None, _bench("max_error_rate", "--max-error-rate")
                              ] = _B.max_error_rate,
    goodput: Annotated[list[str] | None, typer.Option(
        "--goodput", help="A good request's limit, ttft:MS or tpot:MS (repeatable; "
        "sglang.bench_serving's keys). Default: the profile's SLO; neither: no goodput.")] = None,
    image: Annotated[str | None, typer.Option(
        "--image", help="Run every --variants variant on this image instead of the one "
        "`opsctl build` made (as `up --image`).", callback=image_ref)] = None,
    output_details: Annotated[bool, typer.Option(
        "--output-details", help="bench_serving.jsonl rows with the per-request arrays "
        "(input_lens, output_lens, ttfts, itls, generated_texts, errors), as "
        "sglang.bench_serving's --output-details.")] = False,
    rescore: Annotated[str | None, typer.Option(
        "--rescore", help="Re-score the bench run in this directory against --goodput (else "
        "the SLO of --profile or of the run's profile) from its requests files (nothing is "
        "sent); writes DIR/rescored/ (or --out, never DIR itself).")] = None,
) -> None:
    """Concurrency sweep per variant: TTFT/ITL/TPOT/E2E percentiles, goodput, throughput.

    Writes bench.json, bench.md (table with deltas vs the first variant), bench_serving.jsonl
    (one line per level with sglang.bench_serving's result keys) and .csv, tpot.png, ttft.png,
    throughput.png and pareto.png.
    Exit 0 ok, 2 bad usage, 4 a target unreachable or not launched, 5 any request failed.
    """
    from pathlib import Path

    from opsctl.core.files import check_output_path
    from opsctl.core.redact import api_key_from_env
    from opsctl.core.reports import REPORTS_DIR
    from opsctl.traffic import app as traffic
    from opsctl.traffic import view
    from opsctl.traffic.bench.driver_sglang import SglangBench
    from opsctl.traffic.bench.drivers import SGLANG_BENCH, parse_driver
    from opsctl.traffic.bench.plan import BenchOptions
    from opsctl.traffic.bench.sweep import parse_concurrency, parse_goodput, parse_variants

    if rescore is not None:
        rescored = traffic.rescore(Path(rescore), parse_goodput(goodput or []),
                                   Path(out) if out else None, view.write_plots, profile)
        view.show_bench(rescored, console)
        return
    chosen = parse_driver(driver)
    gateway = gateway_from(pushgateway)
    check_output_path(Path(out) if out else REPORTS_DIR, "--out", directory=True)
    settings = BenchSettings(
        concurrency=parse_concurrency(concurrency) if concurrency else _B.concurrency,
        requests_per_level=requests, model=model, request_timeout_s=request_timeout,
        deadline_s=deadline, ignore_eos=ignore_eos, request_rate=request_rate,
        duration_s=duration, client_workers=client_workers,
        saturation_gain=saturation_gain, max_error_rate=max_error_rate,
        **workload(dict(input_words=input_words, output_tokens=output_tokens, api=api,
                        dataset_name=dataset_name, dataset_path=dataset_path,
                        tokenizer=tokenizer, seed=seed, gsp_groups=gsp_groups,
                        gsp_prompts_per_group=gsp_prompts_per_group,
                        gsp_prefix_len=gsp_prefix_len, multi_turn=multi_turn,
                        trace_scale=trace_scale, random_range_ratio=random_range_ratio,
                        isl_osl=isl_osl,
                        extra_request_body=extra_request_body)),
    )
    root = Root(image)
    options = BenchOptions(
        settings, api_key=api_key_from_env(), profile=profile,
        variants=parse_variants(variants), base_urls=tuple(base_url or ()),
        out_dir=Path(out) if out else None, gateway=gateway, slo=parse_goodput(goodput or []),
        output_details=output_details,
        driver=SglangBench(root.serving_container) if chosen == SGLANG_BENCH else None,
    )
    result = traffic.bench(options, launcher=root.variant_launcher, push=root.push,
                           plot=view.write_plots, client_factory=root.client_factory,
                           progress=lambda: view.live_progress(console))
    view.show_bench(result, console)
    if result.error is not None:
        raise result.error
