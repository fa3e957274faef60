"""The traffic room's commands, `smoke` and `bench`, as functions over their collaborators.

Each takes what the user asked for and the things it must not reach for itself: the HTTP
client factory, how to find or launch the profile's server (the deploy room's business), the
metrics push (the observe room's), for smoke's evals the dataset loader, and for bench the plot
writer and live progress (the view's). Each returns the report, where it went, and the error
the CLI raises for its verdict.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from opsctl.config.profiles import Deployment, Profile, load_profile
from opsctl.config.releases import flag_values
from opsctl.config.sloconfig import Slo
from opsctl.core.errors import OpsctlError, UsageError
from opsctl.core.files import check_output_path, read_bounded
from opsctl.core.redact import redact_userinfo
from opsctl.core.reports import default_bench_dir, default_smoke_path
from opsctl.traffic.bench.plan import BenchOptions, Progress
from opsctl.traffic.bench.records import REQUESTS_DIR, rescore_report
from opsctl.traffic.bench.records import load_report as load_bench_report
from opsctl.traffic.bench.report import BenchReport
from opsctl.traffic.bench.report import verdict_error as bench_verdict
from opsctl.traffic.bench.serving import write_report_files
from opsctl.traffic.bench.sweep import Launcher, Target, parse_targets, run_bench
from opsctl.traffic.bench.workloads import Workload, WorkloadSpec, build
from opsctl.traffic.client import ClientFactory
from opsctl.traffic.served import local_tokenizer
from opsctl.traffic.settings import BenchSettings
from opsctl.traffic.smoke import SmokeOptions, run_smoke
from opsctl.traffic.smoke_evals import DatasetLoader, EvalProgress, EvalRequest, plan_evals
from opsctl.traffic.smoke_report import SmokeReport, write_report
from opsctl.traffic.smoke_report import verdict_error as smoke_verdict


# Raises LaunchError (exit 4) when no server of the profile runs.
@dataclass(frozen=True)
class LocatedServer:
    """A profile's running server as the deploy room finds it: where, which variant, and the
    checkpoint `up` recorded on it (a smoke report's `checkpoint` shape; None when unrecorded)."""

    base_url: str
    variant: str | None
    checkpoint: dict[str, Any] | None = None


ServerLocator = Callable[[str], LocatedServer]
# A launcher for the profile's variants; called only when bench has no --base-url.
LauncherFactory = Callable[[Profile], Launcher]
# (report kind, the report's JSON dict, gateway URL); raises OpsctlError when the push fails.
PushReport = Callable[[str, dict[str, Any], str], None]
# Writes bench's plots into the report directory and returns their paths.
PlotWriter = Callable[[BenchReport, Path], list[Path]]
# Opens the live progress display for the sweep and yields its callback.
ProgressView = Callable[[], AbstractContextManager[Progress]]


# Sends smoke's checks (opsctl.traffic.smoke.run_smoke) and bench's sweep (run_bench).
SmokeSender = Callable[[SmokeOptions, ClientFactory], SmokeReport]
BenchSender = Callable[..., BenchReport]


@dataclass(frozen=True)
class Traffic:
    """What the traffic room's smoke and bench take from outside it, as the composition root
    builds them for the gate and decide: the API key ($OPSCTL_API_KEY), the client factory, the
    metrics push, the eval datasets' loader, the plot writer, the progress views, and what
    sends the load (the real senders; fakes in tests)."""

    api_key: str | None
    client_factory: ClientFactory
    push: PushReport
    load_dataset: DatasetLoader
    plot: PlotWriter
    progress: ProgressView | None = None
    eval_progress: EvalProgress | None = None
    send_smoke: SmokeSender = run_smoke
    send_bench: BenchSender = run_bench


@dataclass(frozen=True)
class Pushed:
    """A metrics push: `error` is the failure's message (a warning, not a verdict), or None."""

    kind: str
    gateway: str
    error: str | None


@dataclass(frozen=True)
class SmokeResult:
    report: SmokeReport
    path: Path
    pushed: Pushed | None
    error: OpsctlError | None  # what the CLI raises: exit 4 unreachable, 5 failed


@dataclass(frozen=True)
class BenchResult:
    report: BenchReport
    out_dir: Path
    written: list[Path]
    pushed: Pushed | None
    error: OpsctlError | None  # what the CLI raises: 2/4 a target not benchmarked, 5 failures


def smoke(
    options: SmokeOptions, evals: EvalRequest, *, push: PushReport,
    client_factory: ClientFactory, load_dataset: DatasetLoader, send: SmokeSender = run_smoke,
) -> SmokeResult:
    """Plan the evals asked for, run the checks, write the JSON, push if asked.

    The eval datasets are read and checked against their pins before any request is sent;
    `send` runs the checks (opsctl.traffic.smoke.run_smoke; tests replace it).
    """
    planned = replace(options, evals=plan_evals(evals, options.eval_config, load_dataset))
    report = send(planned, client_factory)
    report.settings = options.settings
    path = options.report_path or default_smoke_path()
    write_report(report, path)
    pushed = _push(push, "smoke", report, options.gateway)
    return SmokeResult(report=report, path=path, pushed=pushed, error=smoke_verdict(report, path))


def launched_smoke(deployment: Deployment, base_url: str) -> SmokeOptions:
    """The server the gate or decide launched, judged by the profile it was launched from (its
    alias, SLO and evals); nothing is loaded."""
    profile = deployment.profile
    return SmokeOptions(base_url=base_url, profile=profile.name, variant=deployment.variant,
                        profile_alias=deployment.model.served_name, eval_config=profile.eval,
                        slo=profile.slo)


def smoke_target(
    profile: str | None, variant: str | None, base_url: str | None, locate: ServerLocator
) -> SmokeOptions:
    """`opsctl smoke`'s server: `--base-url` wins; else the profile's running server, found by
    `locate`. A profile given with `--base-url` still supplies the model alias, the SLO
    thresholds and the `eval:` settings.
    """
    if base_url and not profile:
        return SmokeOptions(base_url=base_url, variant=variant)
    loaded = load_profile(profile)
    loaded.resolve(variant)  # UsageError when the profile has no such variant
    checkpoint = None
    if base_url:
        url, running = base_url, variant  # a label for the report; the profile validated it
    else:
        found = locate(loaded.name)
        url, running, checkpoint = found.base_url, found.variant, found.checkpoint
        if variant and running and running != variant:
            raise UsageError(
                f"profile {loaded.name!r} runs variant {running!r}, not {variant!r}",
                hint=f"smoke the running one (drop --variant), or run `opsctl up --profile "
                f"{loaded.name} --variant {variant} --replace` first",
            )
    return SmokeOptions(
        base_url=url, profile=loaded.name, variant=running,
        profile_alias=loaded.model.served_name,
        eval_config=loaded.eval, slo=loaded.slo, checkpoint=checkpoint,
    )


def profile_evals(deployment: Deployment, *, skip: bool = False) -> EvalRequest:
    """The evals the launched profile configures, as the gate and decide run them: GSM8K with
    an eval.gsm8k section, the long-context probes when eval.long_context is set; none when
    skipped."""
    config = deployment.profile.eval
    if skip:
        return EvalRequest()
    return EvalRequest(gsm8k=config.gsm8k is not None,
                       long_context="long_context" in config.model_fields_set)


def check_launched(deployment: Deployment, evals: EvalRequest, traffic: Traffic) -> None:
    """Refuse, before anything is stopped, what smoke could not run: an eval dataset that is
    not its pin (UsageError)."""
    plan_evals(evals, deployment.profile.eval, traffic.load_dataset)


def smoke_launched(deployment: Deployment, base_url: str, traffic: Traffic, *, report: Path,
                   compare_with: Path | None, evals: EvalRequest,
                   gateway: str | None) -> SmokeReport:
    """The gate's and decide's smoke of the server they launched, `opsctl smoke`'s settings,
    the report written to `report`."""
    options = replace(launched_smoke(deployment, base_url), api_key=traffic.api_key,
                      report_path=report, compare_with=compare_with, gateway=gateway,
                      progress=traffic.eval_progress)
    return smoke(options, evals, push=traffic.push, client_factory=traffic.client_factory,
                 load_dataset=traffic.load_dataset, send=traffic.send_smoke).report


def sweep_launched(deployment: Deployment, base_url: str, settings: BenchSettings, out: Path,
                   traffic: Traffic) -> BenchReport:
    """decide's sweep of the server it launched: bench with `settings`, its files (bench.json,
    bench.md, plots) written into `out`, no push."""
    options = BenchOptions(settings, api_key=traffic.api_key, base_urls=(base_url,),
                           deployment=deployment, out_dir=out)
    return bench(options, launcher=_launched_already, push=traffic.push, plot=traffic.plot,
                 client_factory=traffic.client_factory, progress=traffic.progress,
                 send=traffic.send_bench).report


def check_sweep(deployment: Deployment, settings: BenchSettings) -> None:
    """Refuse, before anything is stopped, a workload decide's sweeps could not send: a dataset
    file not in its format, a tokenizer that does not load, prompt and answer lengths beyond
    the model's context (UsageError, exit 2). The workload is built as the sweep builds it."""
    _check_context(deployment, settings)
    _bench_workload(BenchOptions(settings, base_urls=("http://launched",),
                                 deployment=deployment), deployment.profile)


def _check_context(deployment: Deployment, settings: BenchSettings) -> None:
    """Fixed lengths (words, random, shared prefix) against the server's --context-length, else
    the model's own max_position_embeddings (its config.json on this host, when readable)."""
    if settings.dataset in ("sharegpt", "mooncake-trace"):
        return  # the data's own lengths
    context, source = _context_length(deployment)
    prefix = settings.gsp_prefix_len if settings.dataset == "generated-shared-prefix" else 0
    shapes = settings.length_pairs or ((settings.input_words, settings.output_tokens),)
    wanted = prefix + max(prompt + answer for prompt, answer in shapes)
    if context is not None and wanted > context:
        raise UsageError(f"the prompt and answer lengths ({wanted} tokens) exceed the model's "
                         f"context of {context} tokens ({source})",
                         hint="shorten --input-words/--output-tokens (--isl-osl), or raise "
                              "server.context_length in the profile")


def _context_length(deployment: Deployment) -> tuple[int | None, str]:
    if deployment.server.context_length is not None:
        return deployment.server.context_length, "server.context_length"
    host = deployment.model.host_path
    if host is None:
        return None, ""
    config = Path(host) / "config.json"
    try:
        value = json.loads(read_bounded(config, "model.host_path", 1 << 20)).get(
            "max_position_embeddings")
    except (OSError, ValueError, AttributeError, OpsctlError):
        return None, ""
    return (value, f"{config}: max_position_embeddings") if isinstance(value, int) else (None, "")


def _launched_already(profile: Profile) -> Launcher:
    raise ValueError(f"{profile.name}: a launched deployment's sweep launches nothing")


def bench(
    options: BenchOptions, *, launcher: LauncherFactory, push: PushReport, plot: PlotWriter,
    client_factory: ClientFactory, progress: ProgressView | None = None,
    send: BenchSender = run_bench,
) -> BenchResult:
    """Resolve the targets and the workload, sweep each target (launching profile variants),
    write the files, push. `options.driver` sends the load instead of opsctl's client
    (`--driver`, opsctl.traffic.bench.drivers)."""
    loaded, targets, active = _bench_plan(options, launcher)
    options, served_tokenizer = _bench_workload(options, loaded)
    out = options.out_dir or default_bench_dir()
    with progress() if progress else nullcontext(None) as on_progress:
        report = send(targets, options, profile_name=loaded.name if loaded else None,
                      launcher=active, progress=on_progress, client_factory=client_factory)
    if served_tokenizer is not None:
        _check_tokenizer(report, served_tokenizer)
    written = write_report_files(report, out, options.output_details) + plot(report, out)
    pushed = _push(push, "bench", report, options.gateway)
    return BenchResult(report=report, out_dir=out, written=written, pushed=pushed,
                       error=bench_verdict(report, out))


def _bench_workload(options: BenchOptions,
                    loaded: Profile | None) -> tuple[BenchOptions, str | None]:
    """The plan as the sweep runs it (the workload built, the settings as applied, the
    profile's alias and SLO) and the served tokenizer its prompts were counted with: a trace
    is replayed whole per level unless --requests says otherwise, and a trace or multi-turn
    sessions are kept by one client process. A bad dataset or tokenizer, or options a trace
    refuses: exit 2 before any launch."""
    settings, driver = options.settings, options.driver
    # No dataset asked for (decide's sweep too): bench's own default, token-exact `random` when
    # a tokenizer is found, else words with the reason in the note.
    spec = WorkloadSpec.of(settings)
    served_tokenizer, unmapped = None, None
    if driver is None and loaded is not None and spec.name == "random" and spec.tokenizer is None:
        spec, served_tokenizer, unmapped = _served_spec(options, loaded, spec)
    workload = driver.workload(spec, settings) if driver else build(spec)
    if workload.name != "random":
        served_tokenizer = None  # the default fell back to words (the note says why)
    _note_workload(workload, spec, unmapped, served_tokenizer)
    one_process = _check_replay(workload, spec, settings)
    # A trace is replayed whole per level unless --requests says otherwise.
    per_level = settings.requests_per_level or (len(workload.items or ())
                                                if workload.arrivals_s is not None else None)
    settings = settings.model_copy(update={
        "requests_per_level": per_level,
        "client_workers": 1 if one_process else settings.client_workers})
    return replace(options, settings=settings, workload=workload, arrival_seed=spec.seed,
                   profile_alias=loaded.model.served_name if loaded else None,
                   slo=options.slo or (loaded.slo if loaded else None)), served_tokenizer


def _served_spec(options: BenchOptions, loaded: Profile,
                 spec: WorkloadSpec) -> tuple[WorkloadSpec, str | None, str | None]:
    """`random` with this host's side of the tokenizer the server loads: the spec, the served
    tokenizer, and (when none is found and `random` was the default) why not."""
    served_tokenizer = _served_tokenizer(options.deployment or loaded.resolve(
        options.variants[0] if options.variants else None))
    try:
        tokenizer = local_tokenizer(served_tokenizer, loaded.model.container_path,
                                    loaded.model.host_path)
    except UsageError as exc:
        if not spec.defaulted:  # asked for by name: the missing tokenizer is the error
            raise
        return spec, None, exc.message  # the default: words, and why
    return replace(spec, tokenizer=tokenizer), served_tokenizer, None


def _note_workload(workload: Workload, spec: WorkloadSpec, unmapped: str | None,
                   served_tokenizer: str | None) -> None:
    if unmapped is not None and workload.name == "words":
        workload.note = (f"no tokenizer found ({unmapped}): word prompts, about one token per "
                         "word; token-exact `random` needs --tokenizer or the profile's "
                         "model.host_path")
    if spec.turns > 1:
        workload.note = ((workload.note + "; ") if workload.note else "") + (
            f"multi-turn chat: sessions of {spec.turns} turns, as many side by side as the "
            "level's concurrency, each turn sent after its session's history (one client "
            "process)")
    if served_tokenizer is not None:
        workload.note = ((workload.note + "; ") if workload.note else "") + (
            f"tokenizer {spec.tokenizer}: this host's side of the server's "
            f"{served_tokenizer} (the profile's model mount)")


def _check_replay(workload: Workload, spec: WorkloadSpec, settings: BenchSettings) -> bool:
    """Whether one client process keeps this workload (a trace, multi-turn sessions); the
    options such a workload refuses are exit 2."""
    if workload.arrivals_s is not None and settings.request_rate is not None:
        raise UsageError("--request-rate with --dataset-name mooncake-trace: the trace's "
                         "timestamps are the arrivals", hint="drop --request-rate; "
                         "--trace-scale speeds the trace up or slows it down")
    if spec.turns > 1 and settings.api != "chat":
        raise UsageError(f"--multi-turn {spec.turns}: a session's history is chat messages",
                         hint="add --api chat")
    one_process = workload.arrivals_s is not None or spec.turns > 1
    if one_process and (settings.client_workers or 1) > 1:
        raise UsageError("--client-workers: a trace's arrivals and multi-turn sessions are kept "
                         "by one client process", hint="drop --client-workers")
    return one_process


RESCORED_DIR = "rescored"


def rescore(directory: Path, slo: Slo | None, out_dir: Path | None, plot: PlotWriter,
            profile: str | None = None) -> BenchResult:
    """`bench --rescore DIR`: the run in DIR judged by another SLO from its requests files,
    written to `out_dir` (default DIR/rescored/; never DIR itself, whose bench.json is the
    evidence); nothing is sent to any server. Without `slo`, the SLO of `profile`, else of the
    profile the run recorded."""
    out = out_dir or directory / RESCORED_DIR
    if out.resolve() == directory.resolve() or (out / REQUESTS_DIR).is_dir():
        raise UsageError(f"--out {out}: that is a bench run's own directory (its bench.json and "
                         "requests files are the evidence); re-scoring never writes over a run",
                         hint="leave --out out (DIR/rescored/) or name another directory")
    check_output_path(out, "--out", directory=True)
    report = load_bench_report(directory)
    slo = slo or _profile_slo(profile, report.profile)
    if slo is None:
        raise UsageError("--rescore needs the SLO to judge by: no --goodput, and the profile "
                         f"{profile or report.profile or '(none recorded)'} states none",
                         hint="e.g. --rescore out/bench-... --goodput tpot:80 --goodput ttft:2000")
    report = rescore_report(directory, slo)
    for variant in report.variants:
        for level in variant.levels:
            if level.requests_file is not None:
                level.requests_file = os.path.relpath(directory / level.requests_file, out)
    written = write_report_files(report, out) + plot(report, out)
    return BenchResult(report=report, out_dir=out, written=written, pushed=None, error=None)


def _profile_slo(asked: str | None, recorded: str | None) -> Slo | None:
    """The SLO of the profile asked for (--profile: it must load), else of the one the run
    recorded when it loads here by that name (a run of a profile given as a path, or from
    another host, may not); None when neither states one."""
    try:
        loaded = load_profile(asked) if asked else load_profile(recorded) if recorded else None
    except OpsctlError:
        if asked:
            raise
        loaded = None
    slo = loaded.slo if loaded is not None else None
    return slo if slo is not None and (slo.ttft or slo.tpot) else None


def _served_tokenizer(deployment: Deployment) -> str:
    """The tokenizer path the variant's server loads, as /model_info will report it: the
    `--tokenizer-path` of its argv, else the model path (sglang's default: 0.5.23
    arg_groups/serving_hook.py:636)."""
    return flag_values(deployment.server.extra_args).get(
        "--tokenizer-path", deployment.model.container_path)


def _check_tokenizer(report: BenchReport, served_tokenizer: str) -> None:
    """Say so where a server's /model_info names another tokenizer than the prompts used."""
    for run in report.variants:
        model = run.model
        if model and model.tokenizer_path and (posixpath.normpath(model.tokenizer_path)
                                               != posixpath.normpath(served_tokenizer)):
            model.notes.append(f"/model_info reports tokenizer {model.tokenizer_path!r}; the "
                               f"prompts were tokenized with the profile's {served_tokenizer!r}")


def _bench_plan(
    request: BenchOptions, launcher: LauncherFactory
) -> tuple[Profile | None, list[Target], Launcher | None]:
    """The profile (when one applies), the targets in order, and what launches them."""
    if request.deployment is not None:  # launched already: its profile, never the file's now
        variants = (request.deployment.variant,) * len(request.base_urls)
        return request.deployment.profile, parse_targets(request.base_urls, variants), None
    if request.base_urls and not request.profile:
        return None, parse_targets(request.base_urls, request.variants), None
    loaded = load_profile(request.profile)
    for name in request.variants:
        loaded.resolve(name)  # UsageError listing the valid variants
    if request.base_urls:
        return loaded, parse_targets(request.base_urls, request.variants), None
    names = request.variants or (loaded.default_variant,)
    return loaded, [Target(label=name) for name in names], launcher(loaded)


def _push(
    push: PushReport, kind: str, report: SmokeReport | BenchReport, gateway: str | None
) -> Pushed | None:
    """Push the report's metrics; a failed push is recorded, never raised. A partial report is
    not pushed (its numbers describe a run that did not finish); credentials in the gateway URL
    never reach the result."""
    if not gateway or report.partial:
        return None
    shown = redact_userinfo(gateway)
    try:
        push(kind, report.model_dump(mode="json"), gateway)
    except OpsctlError as exc:
        return Pushed(kind=kind, gateway=shown, error=redact_userinfo(exc.message))
    return Pushed(kind=kind, gateway=shown, error=None)
