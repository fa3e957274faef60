"""Commands of the traffic room: smoke and bench.

Typer declarations; the collaborators the traffic app gets from other rooms (the profile's
running server and its launcher, the metrics push, the client factory) come from the
composition root (cli/root.py).
"""

from __future__ import annotations

from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console, err_console, image_ref, within
from opsctl.cli.root import Root, gateway_from
from opsctl.traffic.bench.sweep import DEADLINE_CAP_S
from opsctl.traffic.settings import BENCH_DEFAULTS, SMOKE_DEFAULTS, BenchSettings

_B_FIELDS = BenchSettings.model_fields  # the early stops' help is written once, there

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
        help="A smoke JSON report of another variant; fail if any greedy output differs, and "
        "say where the first one does.",
    )] = None,
    model: ModelOpt = None,
    api: ApiOpt = SMOKE_DEFAULTS.api,
    request_timeout: Annotated[float, typer.Option(
        help="Seconds per request.", callback=within(0.01, 86400))
    ] = SMOKE_DEFAULTS.request_timeout_s,
    timeout: Annotated[float, typer.Option(
        help="Seconds for the checks (readiness to compare); each eval has --eval-timeout of "
        "its own.", callback=within(0.01, 86400))
    ] = SMOKE_DEFAULTS.overall_timeout_s,
    eval_timeout: Annotated[float, typer.Option(
        "--eval-timeout", help="Seconds for each eval asked for (GSM8K, the long-context "
        "probes, lm-eval), after the checks.", callback=within(0.01, 86400))
    ] = SMOKE_DEFAULTS.eval_timeout_s,
    pushgateway: PushOpt = None,
    eval_name: Annotated[str | None, typer.Option(
        "--eval", help="After the checks, run this accuracy eval ('gsm8k': few-shot, greedy, "
        "on the profile's pinned local dataset; 'lm-eval:gsm8k': the same through "
        "lm-evaluation-harness, the [lmeval] extra); below its threshold exits 5.")] = None,
    eval_questions: Annotated[int | None, typer.Option(
        "--eval-questions", min=1, max=1_000_000, help="Ask the first N questions (default: the profile's).",
    )] = None,
    eval_dataset: Annotated[str | None, typer.Option(
        "--eval-dataset", help="GSM8K-shaped JSONL to use instead of the profile's "
        "(needs --eval-sha256).")] = None,
    eval_sha256: Annotated[str | None, typer.Option(
        "--eval-sha256", help="sha256 pin of --eval-dataset (what `sha256sum` prints).")] = None,
    eval_threshold: Annotated[float | None, typer.Option(
        "--eval-threshold", callback=within(0, 1), help="Least accuracy that passes, as a "
        "share (default: the profile's eval.gsm8k.threshold).")] = None,
    eval_score_thinking: Annotated[bool | None, typer.Option(
        "--eval-score-thinking/--eval-score-answer", help="Score the thinking a reasoning parser "
        "split off, then the answer (as without a parser), or the answer alone (default: the "
        "profile's eval.gsm8k.score_thinking, else the answer); the report's `scored` says "
        "which.")] = None,
    long_context: Annotated[bool, typer.Option(
        "--long-context", help="After the checks, send pass-key probes at the profile's "
        "eval.long_context sizes and a prefix-cached pair; a miss exits 5.")] = False,
) -> None:
    """Post-deploy check: readiness, served model name, generations, TTFT/TPOT, metrics, SLO.

    With --eval gsm8k and --long-context, also accuracy and long-context retrieval (offline:
    local, sha256-pinned files only). The API key comes from $OPSCTL_API_KEY and is masked in
    every output.
    Exit 0 pass, 2 bad usage (or a dataset that is not the pinned one), 4 server not serving
    (unreachable, or no model list), 5 a check, the SLO, the accuracy threshold or a probe
    failed.
    """
    from pathlib import Path

    from opsctl.core.files import check_output_path
    from opsctl.core.httpcap import checked_base_url
    from opsctl.core.redact import api_key_from_env
    from opsctl.core.reports import REPORTS_DIR
    from opsctl.traffic import app as traffic
    from opsctl.traffic import view
    from opsctl.traffic.client import parse_api
    from opsctl.traffic.evals.dataset import load_gsm8k
    from opsctl.traffic.settings import SmokeSettings
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
    request = traffic.SmokeRequest(
        profile=profile, variant=variant, base_url=base_url, api_key=api_key_from_env(),
        json_path=Path(json_path) if json_path else None,
        compare_with=Path(compare_with) if compare_with else None,
        gateway=gateway, settings=settings, evals=evals,
        progress=view.eval_progress(err_console),
    )
    root = Root()
    result = traffic.smoke(request, locate=root.locate_server, push=root.push,
                           client_factory=root.client_factory, load_dataset=load_gsm8k)
    view.show_smoke(result, console)
    if result.error is not None:
        raise result.error


@app.command()
def bench(
    profile: ProfileOpt = None,
    variants: Annotated[str | None, typer.Option("--variants", help="Comma-separated variants: "
                        "each is brought up, swept and taken down (or names the --base-url "
                        "targets in order).")] = None,
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="Comma-separated "
                           "levels (default "
                           f"{','.join(map(str, BENCH_DEFAULTS.concurrency))}).")] = None,
    base_url: Annotated[list[str] | None, typer.Option("--base-url", help="[NAME=]URL of a "
                        "running server; repeat for several.")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Report directory (default "
                   "out/bench-<UTC time>/).")] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=1, max=1_000_000, help="Measured requests "
                        "per level (default max(16, 4 x concurrency)).")] = None,
    input_words: Annotated[int, typer.Option(min=1, max=1_000_000, help="Prompt length in words "
                           "(about one token each).")] = BENCH_DEFAULTS.input_words,
    output_tokens: Annotated[int, typer.Option(min=2, max=1_000_000,
                                               help="Output tokens per request.")
                             ] = BENCH_DEFAULTS.output_tokens,
    model: ModelOpt = None,
    api: ApiOpt = BENCH_DEFAULTS.api,
    request_timeout: Annotated[float, typer.Option(
        help="Seconds per request.", callback=within(0.01, 86400))
    ] = BENCH_DEFAULTS.request_timeout_s,
    deadline: Annotated[float | None, typer.Option("--deadline", callback=within(1, 7 * 86400),
                        help="Seconds each "
                        "target's sweep may take (default: the most its levels could take at "
                        f"the request timeout, at most {DEADLINE_CAP_S:.0f}).")] = None,
    pushgateway: PushOpt = None,
    request_rate: Annotated[float | None, typer.Option(
        "--request-rate", callback=within(1e-6, 1e9), help="Poisson arrivals per second "
        "(seeded), with each --concurrency level as the cap; default: a closed loop.")] = None,
    duration: Annotated[float | None, typer.Option(
        "--duration", callback=within(0.01, 7 * 86400), help="Seconds of measured load per "
        "level (instead of --requests, which then caps it).")] = None,
    ignore_eos: Annotated[bool, typer.Option(
        "--ignore-eos/--no-ignore-eos", help="Send sglang/vLLM's ignore_eos so every answer is "
        "--output-tokens long (--no-ignore-eos for servers that refuse it).")
    ] = BENCH_DEFAULTS.ignore_eos,
    dataset_name: Annotated[str | None, typer.Option(
        "--dataset-name", help="words | random (token-exact with --tokenizer or the profile's "
        "model mount) | sharegpt (--dataset-path) | generated-shared-prefix | mooncake-trace "
        "(--dataset-path: replayed at its timestamps, prompts sharing its hash_ids' 512-token "
        "blocks). Default: random, "
        "token-exact whenever a tokenizer is found, else words (the report's note says why).")
    ] = None,
    dataset_path: Annotated[str | None, typer.Option(
        "--dataset-path", help="ShareGPT-format JSON file, or a Mooncake trace JSONL for "
        "--dataset-name mooncake-trace (local).")] = None,
    multi_turn: Annotated[int, typer.Option(
        "--multi-turn", min=1, max=1000, help="Chat sessions of N turns (--api chat): each "
        "turn sends the session's history, its earlier prompts and the server's answers, "
        "before its own prompt (seeded like the prompts). 1: single requests.")] = 1,
    trace_scale: Annotated[float, typer.Option(
        "--trace-scale", callback=within(1e-6, 1e6), help="mooncake-trace: send each request "
        "at its timestamp x this (0.5: twice as fast).")] = 1.0,
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="Host path of the served model's tokenizer.json or model "
        "directory (where /model_info's tokenizer path lives on this host).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of prompts and arrivals.")] = 0,
    gsp_groups: Annotated[int, typer.Option("--gsp-groups", min=1, max=100_000,
                          help="generated-shared-prefix: prefix groups.")] = 8,
    gsp_prompts_per_group: Annotated[int, typer.Option(
        "--gsp-prompts-per-group", min=1, max=100_000, help="generated-shared-prefix: prompts "
        "per group.")] = 8,
    gsp_prefix_len: Annotated[int, typer.Option(
        "--gsp-prefix-len", min=1, max=1_000_000, help="generated-shared-prefix: tokens of "
        "each shared prefix (the question is --input-words long).")] = 512,
    driver: Annotated[str, typer.Option(
        "--driver", help="What sends the load: opsctl (its own client) or sglang-bench "
        "(`python3 -m sglang.bench_serving` inside each target's opsctl container, tokenizer "
        "and dataset paths as the container sees them).")] = "opsctl",
    client_workers: Annotated[int | None, typer.Option(
        "--client-workers", min=1, max=1024, help="Client processes sending each level, each "
        "with its own event loop (never more than the level's concurrency). Default: one per "
        "64 concurrent streams, at most the usable cores less one.")] = None,
    saturation_gain: Annotated[float | None, typer.Option(
        "--saturation-gain", min=0.0, max=1.0,
        help=_B_FIELDS["saturation_gain"].description)] = BENCH_DEFAULTS.saturation_gain,
    max_error_rate: Annotated[float | None, typer.Option(
        "--max-error-rate", min=0.0, max=1.0,
        help=_B_FIELDS["max_error_rate"].description)] = BENCH_DEFAULTS.max_error_rate,
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
    from opsctl.traffic.bench.sweep import parse_concurrency, parse_goodput, parse_variants
    from opsctl.traffic.bench.workloads import WorkloadSpec, parse_dataset_name
    from opsctl.traffic.client import parse_api
    from opsctl.traffic.settings import DEFAULT_CONCURRENCY, BenchSettings

    if rescore is not None:
        rescored = traffic.rescore(Path(rescore), parse_goodput(goodput or []),
                                   Path(out) if out else None, view.write_plots, profile)
        view.show_bench(rescored, console)
        return
    chosen = parse_driver(driver)
    gateway = gateway_from(pushgateway)
    check_output_path(Path(out) if out else REPORTS_DIR, "--out", directory=True)
    workload = WorkloadSpec(
        name=parse_dataset_name(dataset_name or "random"),
        # only the default may fall back to words: a named dataset or --tokenizer must work
        defaulted=dataset_name is None and tokenizer is None,
        input_len=input_words, output_len=output_tokens,
        seed=seed, tokenizer=Path(tokenizer) if tokenizer else None,
        dataset_path=Path(dataset_path) if dataset_path else None, groups=gsp_groups,
        prompts_per_group=gsp_prompts_per_group, prefix_len=gsp_prefix_len,
        trace_scale=trace_scale, turns=multi_turn,
    )
    settings = BenchSettings(
        concurrency=parse_concurrency(concurrency) if concurrency else DEFAULT_CONCURRENCY,
        requests_per_level=requests, input_words=input_words, output_tokens=output_tokens,
        api=parse_api(api), model=model, request_timeout_s=request_timeout, deadline_s=deadline,
        ignore_eos=ignore_eos, request_rate=request_rate, duration_s=duration,
        client_workers=client_workers, saturation_gain=saturation_gain,
        max_error_rate=max_error_rate,
    )
    request = traffic.BenchRequest(
        profile=profile, variants=parse_variants(variants), base_urls=tuple(base_url or ()),
        api_key=api_key_from_env(), out_dir=Path(out) if out else None, gateway=gateway,
        settings=settings, workload=workload, slo=parse_goodput(goodput or []),
        output_details=output_details,
    )
    root = Root(image)
    result = traffic.bench(request, launcher=root.variant_launcher, push=root.push,
                           plot=view.write_plots, client_factory=root.client_factory,
                           progress=lambda: view.live_progress(console),
                           driver=SglangBench(root.serving_container) if chosen == SGLANG_BENCH
                           else None)
    view.show_bench(result, console)
    if result.error is not None:
        raise result.error
