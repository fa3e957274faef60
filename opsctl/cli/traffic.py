"""Commands of the traffic room: smoke and bench.

Typer declarations, and the collaborators the traffic app gets from other rooms: the profile's
running server and its launcher (deploy, engine, image) and the metrics push (observe).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console, err_console, image_ref, within

if TYPE_CHECKING:
    from opsctl.config.profiles import Profile
    from opsctl.traffic.app import LocatedServer
    from opsctl.traffic.driver_sglang import ServingContainer

PUSHGATEWAY_ENV = "OPSCTL_PUSHGATEWAY"


def gateway_from(pushgateway: str | None) -> str | None:
    """--pushgateway or $OPSCTL_PUSHGATEWAY, checked as a URL before any work (exit 2; a bad
    one was an http.client.InvalidURL traceback after the run)."""
    from opsctl.core.httpcap import checked_base_url

    gateway = pushgateway or os.environ.get(PUSHGATEWAY_ENV)
    if gateway:
        checked_base_url(gateway, "--pushgateway" if pushgateway else f"${PUSHGATEWAY_ENV}")
    return gateway or None


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
    api: ApiOpt = "completions",
    request_timeout: Annotated[float, typer.Option(
        help="Seconds per request.", callback=within(0.01, 86400))] = 120.0,
    timeout: Annotated[float, typer.Option(
        help="Seconds for the whole smoke run.", callback=within(0.01, 86400))] = 600.0,
    pushgateway: PushOpt = None,
    eval_name: Annotated[str | None, typer.Option(
        "--eval", help="After the checks, run this accuracy eval ('gsm8k': few-shot, greedy, "
        "on the profile's pinned local dataset); below its threshold exits 5.")] = None,
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
    long_context: Annotated[bool, typer.Option(
        "--long-context", help="After the checks, send pass-key probes at the profile's "
        "eval.long_context sizes and a prefix-cached pair; a miss exits 5.")] = False,
) -> None:
    """Post-deploy check: readiness, served model name, generations, TTFT/TPOT, metrics, SLO.

    With --eval gsm8k and --long-context, also accuracy and long-context retrieval (offline:
    local, sha256-pinned files only). The API key comes from $OPSCTL_API_KEY and is masked in
    every output.
    Exit 0 pass, 2 bad usage (or a dataset that is not the pinned one), 4 server unreachable,
    5 a check, the SLO, the accuracy threshold or a probe failed.
    """
    from pathlib import Path

    from opsctl.core.files import check_output_path
    from opsctl.core.httpcap import checked_base_url
    from opsctl.core.redact import api_key_from_env
    from opsctl.core.reports import REPORTS_DIR
    from opsctl.observe.metrics import push_report
    from opsctl.traffic import app as traffic
    from opsctl.traffic import view
    from opsctl.traffic.client import make_client, parse_api
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
                         sha256=eval_sha256, threshold=eval_threshold, long_context=long_context)
    request = traffic.SmokeRequest(
        profile=profile, variant=variant, base_url=base_url, model=model, api=parse_api(api),
        api_key=api_key_from_env(), json_path=Path(json_path) if json_path else None,
        compare_with=Path(compare_with) if compare_with else None,
        request_timeout_s=request_timeout, overall_timeout_s=timeout,
        gateway=gateway, evals=evals, progress=view.eval_progress(err_console),
    )
    result = traffic.smoke(request, locate=locate_server, push=push_report,
                           client_factory=make_client, load_dataset=load_gsm8k)
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
                           "levels (default 1,2,4,8,16,32,64).")] = None,
    base_url: Annotated[list[str] | None, typer.Option("--base-url", help="[NAME=]URL of a "
                        "running server; repeat for several.")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Report directory (default "
                   "out/bench-<UTC time>/).")] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=1, max=1_000_000, help="Measured requests "
                        "per level (default max(16, 4 x concurrency)).")] = None,
    input_words: Annotated[int, typer.Option(min=1, max=1_000_000, help="Prompt length in words "
                           "(about one token each).")] = 256,
    output_tokens: Annotated[int, typer.Option(min=2, max=1_000_000,
                                               help="Output tokens per request.")] = 256,
    model: ModelOpt = None,
    api: ApiOpt = "completions",
    request_timeout: Annotated[float, typer.Option(
        help="Seconds per request.", callback=within(0.01, 86400))] = 600.0,
    deadline: Annotated[float | None, typer.Option("--deadline", callback=within(1, 7 * 86400),
                        help="Seconds each "
                        "target's sweep may take (default: the most its levels could take at "
                        "the request timeout, at most 3600).")] = None,
    pushgateway: PushOpt = None,
    request_rate: Annotated[float | None, typer.Option(
        "--request-rate", callback=within(1e-6, 1e9), help="Poisson arrivals per second "
        "(seeded), with each --concurrency level as the cap; default: a closed loop.")] = None,
    duration: Annotated[float | None, typer.Option(
        "--duration", callback=within(0.01, 7 * 86400), help="Seconds of measured load per "
        "level (instead of --requests, which then caps it).")] = None,
    ignore_eos: Annotated[bool, typer.Option(
        "--ignore-eos/--no-ignore-eos", help="Send sglang/vLLM's ignore_eos so every answer is "
        "--output-tokens long (--no-ignore-eos for servers that refuse it).")] = True,
    dataset_name: Annotated[str, typer.Option(
        "--dataset-name", help="words | random (token-exact with --tokenizer) | sharegpt "
        "(--dataset-path) | generated-shared-prefix.")] = "words",
    dataset_path: Annotated[str | None, typer.Option(
        "--dataset-path", help="ShareGPT-format JSON file (local).")] = None,
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
        "--rescore", help="Re-score the bench run in this directory against --goodput from its "
        "requests files (nothing is sent); writes DIR/rescored/ (or --out).")] = None,
) -> None:
    """Concurrency sweep per variant: TTFT/ITL/TPOT/E2E percentiles, goodput, throughput.

    Writes bench.json, bench.md (table with deltas vs the first variant), bench_serving.jsonl
    (one line per level with sglang.bench_serving's result keys), tpot.png and throughput.png.
    Exit 0 ok, 2 bad usage, 4 a target unreachable or not launched, 5 any request failed.
    """
    from pathlib import Path

    from opsctl.core.files import check_output_path
    from opsctl.core.redact import api_key_from_env
    from opsctl.core.reports import REPORTS_DIR
    from opsctl.observe.metrics import push_report
    from opsctl.traffic import app as traffic
    from opsctl.traffic import view
    from opsctl.traffic.bench import (
        DEFAULT_CONCURRENCY,
        parse_concurrency,
        parse_goodput,
        parse_variants,
    )
    from opsctl.traffic.client import make_client, parse_api
    from opsctl.traffic.driver_sglang import SglangBench
    from opsctl.traffic.drivers import SGLANG_BENCH, parse_driver
    from opsctl.traffic.workloads import WorkloadSpec, parse_dataset_name

    if rescore is not None:
        if out:
            check_output_path(Path(out), "--out", directory=True)
        rescored = traffic.rescore(Path(rescore), parse_goodput(goodput or []),
                                   Path(out) if out else None, view.write_plots)
        view.show_bench(rescored, console)
        return
    chosen = parse_driver(driver)
    gateway = gateway_from(pushgateway)
    check_output_path(Path(out) if out else REPORTS_DIR, "--out", directory=True)
    workload = WorkloadSpec(
        name=parse_dataset_name(dataset_name), input_len=input_words, output_len=output_tokens,
        seed=seed, tokenizer=Path(tokenizer) if tokenizer else None,
        dataset_path=Path(dataset_path) if dataset_path else None, groups=gsp_groups,
        prompts_per_group=gsp_prompts_per_group, prefix_len=gsp_prefix_len,
    )
    request = traffic.BenchRequest(
        profile=profile, variants=parse_variants(variants), base_urls=tuple(base_url or ()),
        concurrency=parse_concurrency(concurrency) if concurrency else DEFAULT_CONCURRENCY,
        requests_per_level=requests, input_words=input_words, output_tokens=output_tokens,
        model=model, api=parse_api(api), api_key=api_key_from_env(),
        request_timeout_s=request_timeout, out_dir=Path(out) if out else None,
        gateway=gateway, deadline_s=deadline,
        ignore_eos=ignore_eos, request_rate=request_rate, duration_s=duration, workload=workload,
        client_workers=client_workers, slo=parse_goodput(goodput or []),
        output_details=output_details,
    )
    result = traffic.bench(request, launcher=lambda loaded: ProfileLauncher(loaded, image),
                           push=push_report,
                           plot=view.write_plots, client_factory=make_client,
                           progress=lambda: view.live_progress(console),
                           driver=SglangBench(serving_container) if chosen == SGLANG_BENCH else None)
    view.show_bench(result, console)
    if result.error is not None:
        raise result.error


# --- collaborators from the deploy room: where the profile's server runs, and launching it ---


def locate_server(profile_name: str) -> LocatedServer:
    """The profile's running server, found by label: its base URL, the variant it runs and the
    checkpoint `up` recorded on it (so smoke can warn when compared reports differ in it)."""
    from opsctl.core import labels
    from opsctl.deploy import app as deploy_app
    from opsctl.engine.dockerpy import connect
    from opsctl.traffic.app import LocatedServer

    engine = connect()
    url = deploy_app.base_url_for(engine, profile_name)  # LaunchError (exit 4) when none runs
    servers = [s for s in deploy_app.find_servers(engine, profile_name) if s.status == "running"]
    if not servers:
        return LocatedServer(url, None)
    return LocatedServer(url, servers[0].labels.get(labels.VARIANT),
                         deploy_app.checkpoint_of(servers[0]))


def serving_container(base_url: str) -> ServingContainer:
    """The opsctl container serving `base_url` (deploy room, by label and published port), with
    commands run in it through the engine: `bench --driver sglang-bench`'s collaborator."""
    from opsctl.deploy.urlserver import server_for_url
    from opsctl.engine.dockerpy import connect
    from opsctl.traffic.driver_sglang import ServingContainer

    engine = connect()
    info, inner_url = server_for_url(engine, base_url)
    return ServingContainer(
        name=info.name, inner_url=inner_url,
        run=lambda command, env, timeout_s, max_bytes: engine.exec(
            info.id, command, env=env, timeout_seconds=timeout_s, max_output_bytes=max_bytes))


class ProfileLauncher:
    """`up` a variant for bench and `down` it afterwards, unless it was already up before."""

    def __init__(self, profile: Profile, image: str | None = None) -> None:
        self.profile = profile
        self.image = image  # None: the image `opsctl build` made for each variant
        self.started: set[str] = set()

    def up(self, variant: str) -> str:
        from opsctl.deploy import app as deploy_app
        from opsctl.engine.dockerpy import connect
        from opsctl.image.plan import expected_image

        image = self.image
        running = deploy_app.up(self.profile.resolve(variant), engine=connect(),
                                image_for=(lambda _: image) if image else expected_image)
        if not running.already_up:
            self.started.add(variant)
        return running.base_url

    def down(self, variant: str) -> None:
        from opsctl.deploy import app as deploy_app
        from opsctl.engine.dockerpy import connect

        if variant in self.started:
            deploy_app.down(connect(), self.profile.name)
            self.started.discard(variant)
