"""`opsctl bench`'s load: a concurrency sweep per variant -> BenchReport.

Load model (opsctl.traffic.bench.arrival): a closed loop by default; at concurrency c, c workers
each send one streaming request at a time; or Poisson arrivals at `request_rate` with c as the cap;
either for N requests or for `duration_s` seconds per level. c warm-up requests (closed loop)
run first and are excluded from the statistics (their failures still count). Prompts and output
lengths come from the workload (opsctl.traffic.bench.workloads: word prompts by default, token-exact
random, ShareGPT or shared-prefix groups). Output length is fixed with `ignore_eos` (an
sglang/vLLM extension; `ignore_eos=False` for servers that refuse it) and `max_tokens`.

Per level: TTFT, ITL, TPOT and E2E mean/p50/p90/p95/p99/std/max (see opsctl.traffic.bench.stats),
goodput under the profile's SLO, output tokens/s and requests/s over the measured phase's wall
time, and failures by kind. ITL gaps are
pooled over all requests of the level; TPOT is per request, (e2e - ttft) / (output_tokens - 1),
with output tokens from the server's usage chunk when it sends one, else counted chunks.

The level itself (warm-up, measured phase, client CPU) is opsctl.traffic.bench.levels; at high
concurrency its phases are split across client worker processes (opsctl.traffic.bench.workers,
`client_workers`; by default one per STREAMS_PER_WORKER streams, at most the usable cores less
one).

Bounded in time: each target's sweep has a wall-clock deadline (`--deadline`; by default the
most its levels could take with every request at its timeout, capped at `DEADLINE_CAP_S`), and
a level whose warm-up fails entirely is aborted, with the levels after it: a server that answers
none of c warm-up requests will not answer more. Ctrl-C or a crash keeps what was measured; the
report says `partial` and why.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from opsctl.config.sloconfig import Slo
from opsctl.core.errors import LaunchError, OpsctlError, UsageError, stop_reason
from opsctl.core.httpcap import answer_json, checked_base_url
from opsctl.core.interrupts import run_async
from opsctl.core.options import comma_items
from opsctl.core.redact import API_KEY_ENV, mask_secret, redact, redact_model, redact_userinfo
from opsctl.traffic.bench.levels import (
    CUT_SHORT,
    InProcess,
    RequestSpec,
    client_workers,
    run_level,
    usable_cores,
)
from opsctl.traffic.bench.plan import BenchOptions, Progress
from opsctl.traffic.bench.records import LevelRecords, level_path
from opsctl.traffic.bench.report import (
    BenchReport,
    ClientInfo,
    VariantResult,
)
from opsctl.traffic.bench.server_sampler import sample_level
from opsctl.traffic.bench.workers import WorkerPool, WorkerSetup
from opsctl.traffic.client import ClientFactory, make_client, request_body
from opsctl.traffic.served import (
    ModelResolution,
    ModelsUnlisted,
    NameUnresolved,
    read_model_info,
    resolve_served_name,
    tokenizer_from_model_info,
)

# A level opens this many connections and sends this many warm-up requests at once: far above
# what one 8-GPU server admits, so a larger one is a typo (an extra digit), refused up front.
MAX_CONCURRENCY = 10_000


@dataclass(frozen=True)
class Target:
    """A server to sweep: given by URL, or launched from a profile variant by `bench`."""

    label: str
    base_url: str | None = None


class Launcher(Protocol):
    """Brings a profile variant up for a sweep and takes it down afterwards."""

    def up(self, variant: str) -> str:
        """Start the variant (or find it running) and return its base URL once it serves."""
        ...

    def down(self, variant: str) -> None:
        """Stop the variant if `up` started it; called even when `up` failed."""
        ...


def parse_concurrency(text: str) -> tuple[int, ...]:
    hint = "e.g. --concurrency 1,2,4,8"
    try:
        levels = tuple(int(part) for part in comma_items(text, "--concurrency", hint))
    except ValueError:
        raise UsageError(f"--concurrency {text!r}: not a comma-separated list of integers",
                         hint=hint) from None
    if not levels or any(level < 1 for level in levels):
        raise UsageError(f"--concurrency {text!r}: levels must be positive integers", hint=hint)
    if max(levels) > MAX_CONCURRENCY:
        raise UsageError(f"--concurrency {text!r}: a level above {MAX_CONCURRENCY} (each level "
                         "opens that many connections and warm-up requests)", hint=hint)
    return levels


def parse_goodput(items: Sequence[str]) -> Slo | None:
    """`--goodput ttft:MS --goodput tpot:MS` (sglang.bench_serving's `--goodput` keys) as the
    thresholds a good request meets; None when none is given (the profile's SLO then applies)."""
    thresholds: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition(":")
        try:
            limit = float(value)
        except ValueError:
            limit = math.nan
        if key not in ("ttft", "tpot") or not math.isfinite(limit) or limit <= 0 \
                or key in thresholds:
            raise UsageError(f"--goodput {item!r}: expected ttft:MS or tpot:MS, each once, "
                             "with a positive number of milliseconds",
                             hint="e.g. --goodput ttft:2000 --goodput tpot:80")
        thresholds[key] = limit
    if not thresholds:
        return None
    return Slo.model_validate({key: {"quantile": 0.5, "threshold_ms": limit}
                               for key, limit in thresholds.items()})


# What bench's client sets itself (every key of its bodies, both APIs) and
# max_completion_tokens, which sglang's chat API reads before max_tokens (protocol.py's
# to_sampling_params: `self.max_completion_tokens or self.max_tokens`): an extra body may not
# replace them, or the figures and bench.json's settings (temperature 0, ignore_eos, the output
# length) would describe requests other than those sent.
OWN_BODY_KEYS = frozenset({"max_completion_tokens"}).union(*(
    request_body(api, "", "", max_tokens=1, stream=True, ignore_eos=True)
    for api in ("chat", "completions")))


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is Python's, not JSON's")  # sent, every request is a 400


def parse_request_body(text: str | None) -> dict[str, Any] | None:
    """`--extra-request-body JSON`: a JSON object, none of whose keys bench sets itself;
    UsageError (exit 2) for anything else, before any request."""
    if text is None:
        return None
    hint = "e.g. --extra-request-body '{\"chat_template_kwargs\": {\"enable_thinking\": false}}'"
    try:
        body = json.loads(text, parse_constant=_not_json)
    except ValueError as exc:
        raise UsageError(f"--extra-request-body: not JSON ({exc})", hint=hint) from None
    if not isinstance(body, dict):
        raise UsageError(f"--extra-request-body: a JSON object is needed, not "
                         f"{type(body).__name__}", hint=hint)
    taken = sorted(OWN_BODY_KEYS & set(body))
    if taken:
        raise UsageError(f"--extra-request-body sets {', '.join(taken)}, which bench sets "
                         "itself", hint="use --output-tokens, --ignore-eos/--no-ignore-eos, "
                         "--api and --model instead (bench samples at temperature 0)")
    return body


def parse_variants(text: str | None) -> tuple[str, ...]:
    """`--variants a,b`: the names in order, blanks dropped. Absent: () (every variant); given
    but naming none (`--variants ,`) is a UsageError, not a silent "run every variant"."""
    names = () if text is None or not text.strip(", ") else comma_items(
        text, "--variants", "e.g. --variants baseline,gathercast")
    if text is not None and not names:
        raise UsageError(f"--variants {text!r}: names no variant",
                         hint="e.g. --variants baseline,gathercast, or leave it out for every "
                              "variant of the profile")
    return names


def parse_targets(base_urls: Sequence[str], variants: Sequence[str]) -> list[Target]:
    """`--base-url [NAME=]URL`, repeated. Unnamed URLs take the `--variants` names, in order."""
    if variants and len(variants) != len(base_urls):
        raise UsageError(f"--variants names {len(variants)}, --base-url gives {len(base_urls)}",
                         hint="one name per URL, or name each: --base-url baseline=http://...")
    targets: list[Target] = []
    for index, value in enumerate(base_urls):
        name, sep, url = value.partition("=")
        if sep and "://" not in name:
            label = name
        else:
            url = value
            label = variants[index] if variants else _host_port(value)
        targets.append(Target(label=label, base_url=checked_base_url(url, "--base-url")))
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise UsageError(f"two targets share a name: {labels}",
                         hint="name them: --base-url baseline=http://... --base-url b=http://...")
    return targets


def _host_port(url: str) -> str:
    return redact_userinfo(url).split("://", 1)[-1].rstrip("/")


# --- one sweep --------------------------------------------------------------------------------

async def resolve_model(
    client: httpx.AsyncClient, options: BenchOptions, timeout_s: float
) -> ModelResolution:
    try:  # ServerUnreachable propagates
        resolution = await resolve_served_name(client, timeout_s, options.settings.model,
                                               options.profile_alias)
    except ModelsUnlisted as exc:
        # Ready means /v1/models lists the model (DESIGN.md); a server that does not is not.
        raise LaunchError(f"{client.base_url}: {exc}",
                          hint=f"check the server, and ${API_KEY_ENV} if it wants a key") from None
    except NameUnresolved as exc:
        raise UsageError(str(exc), hint="pass --model NAME (one of the listed names)") from None
    info, how = await read_model_info(client, timeout_s)
    if info is None:
        resolution.tokenizer_source = how + "; bench needs no tokenizer"
    else:
        resolution.tokenizer_path, resolution.tokenizer_source = tokenizer_from_model_info(info)
    return resolution


def deadline_reached(result: VariantResult, base_url: str, deadline: float) -> None:
    """What a sweep's deadline means, whoever sent the load: LaunchError when the model was not
    even resolved, else the last level and the sweep say they were cut by it."""
    if result.model is None:
        raise LaunchError(f"{redact_userinfo(base_url)}: the model could not be resolved "
                          f"within the {deadline:g}s deadline") from None
    if result.levels:
        result.levels[-1].aborted = f"the {deadline:g}s deadline was reached"
    result.stopped = (f"the sweep's deadline of {deadline:g}s was reached after "
                      f"{len(result.levels)} level(s)")


async def sweep(
    label: str, base_url: str, options: BenchOptions, progress: Progress | None = None,
    client_factory: ClientFactory = make_client, result: VariantResult | None = None,
) -> VariantResult:
    """Every concurrency level against one server: from this event loop and client, or split
    across client worker processes where a level needs several (started once, after the model
    name is known, and always stopped before this returns).

    Levels are appended to `result` as they finish, so a caller that is interrupted still holds
    what was measured.
    """
    result = result or VariantResult(variant=label, base_url=redact_userinfo(base_url))
    deadline = options.deadline()
    cores = usable_cores()
    asked = options.settings
    workers = {c: client_workers(c, asked.client_workers, cores) for c in asked.concurrency}
    async with client_factory(base_url, options.api_key, max_connections=max(asked.concurrency),
                              timeout_s=asked.request_timeout_s) as client:
        pool: WorkerPool | None = None
        try:
            async with asyncio.timeout(deadline):
                result.model = await resolve_model(client, options,
                                                     min(60.0, asked.request_timeout_s))
                spec = RequestSpec(asked.api, result.model.served_name, options.temperature,
                                   asked.ignore_eos, asked.request_timeout_s, options.work(),
                                   extra_body=asked.extra_request_body)
                local = InProcess(client, spec)
                if max(workers.values()) > 1:
                    pool = WorkerPool(WorkerSetup(base_url, options.api_key,
                                                  asked.request_timeout_s,
                                                  max(asked.concurrency), spec, client_factory),
                                      max(workers.values()))
                sample = (functools.partial(sample_level, base_url, options.api_key)
                          if options.server_figures else None)
                next_index = 0
                for concurrency in asked.concurrency:
                    runner = (pool.runner(workers[concurrency])
                              if pool is not None and workers[concurrency] > 1 else local)
                    next_index = await run_level(runner, label, concurrency, options, next_index,
                                                 progress, result.levels, sample)
                    if result.levels[-1].aborted:
                        result.stopped = (f"stopped at concurrency {concurrency}: "
                                          f"{result.levels[-1].aborted}")
                        break
                    if result.levels[-1].sweep_end:
                        break
        except TimeoutError:
            deadline_reached(result, base_url, deadline)
        finally:
            if pool is not None:
                pool.close()
        if result.levels:
            result.server_info = await read_server_info(client, min(10.0, asked.request_timeout_s))
    result.failed_requests = sum(level.failed + level.warmup_failed for level in result.levels)
    return result


# --- several variants ------------------------------------------------------------------------

def run_bench(
    targets: Sequence[Target],
    options: BenchOptions,
    *,
    profile_name: str | None = None,
    launcher: Launcher | None = None,
    progress: Progress | None = None,
    client_factory: ClientFactory = make_client,
) -> BenchReport:
    """Sweep every target in order; a target without a URL is launched, swept, then stopped.

    A target that cannot be reached or launched is recorded with its error and the run goes on
    to the next one, so one bad variant does not throw away the others' results. Ctrl-C or a
    crash ends the run with the results so far, marked partial; `verdict_error` re-raises it.
    The report comes back with the API key and URL userinfo redacted from every string.
    """
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    results: list[VariantResult] = []
    stopped_by: BaseException | None = None
    for target in targets:
        result = VariantResult(variant=target.label, base_url=target.base_url or "")
        results.append(result)
        try:
            _bench_target(target, result, options, launcher, progress, client_factory)
        except (KeyboardInterrupt, Exception) as exc:  # kept for the verdict, after the files
            stopped_by = exc
            if result.levels and result.levels[-1].aborted == CUT_SHORT:
                result.levels[-1].aborted = stop_reason(exc)
            break
    failed = sum(r.failed_requests for r in results)
    kept = request_files(results)
    report = BenchReport(
        started_at=started_at,
        duration_s=round(time.perf_counter() - start, 3),
        profile=profile_name,
        api_key=mask_secret(options.api_key),
        config=options.config(),
        client=ClientInfo(hostname=platform.node(), platform=platform.platform(),
                          python=platform.python_version(), cpu_count=os.cpu_count()),
        variants=results,
        failed_requests=failed,
        passed=stopped_by is None and failed == 0
        and all(r.error is None and r.stopped is None for r in results),
    )
    report = redact_model(report, [options.api_key]).record_stop(stopped_by, [options.api_key])
    report._requests = kept
    return report


def request_files(results: Sequence[VariantResult]) -> list[tuple[str, LevelRecords]]:
    """Each recorded level's requests file, named in its LevelResult; the records to write."""
    kept: list[tuple[str, LevelRecords]] = []
    taken: set[str] = set()
    for index, result in enumerate(results):
        for number, level in enumerate(result.levels):
            if isinstance(level._records, LevelRecords):
                level.requests_file = level_path(index, result.variant, level.concurrency,
                                                 number, taken)
                kept.append((level.requests_file, level._records))
    return kept


async def read_server_info(client: httpx.AsyncClient, timeout_s: float) -> dict[str, Any] | None:
    """GET /server_info as sglang.bench_serving reads it after its run (None: no JSON object)."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/server_info")
        info = answer_json(response) if response.status_code == 200 else None
    except (TimeoutError, httpx.HTTPError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _bench_target(
    target: Target, result: VariantResult, options: BenchOptions, launcher: Launcher | None,
    progress: Progress | None, client_factory: ClientFactory,
) -> None:
    launched = target.base_url is None
    result.launched_by_bench = launched
    try:
        if launched:
            if launcher is None:
                raise UsageError(f"target {target.label!r} has no URL and nothing can launch it",
                                 hint="pass --base-url NAME=URL, or --variants to launch them")
            result.base_url = launcher.up(target.label)
        run = options.driver.sweep if options.driver else sweep
        run_async(run(target.label, result.base_url, options, progress, client_factory, result))
    except OpsctlError as exc:
        result.error = redact(f"{type(exc).__name__}: {exc.message}", options.api_key)
        result.error_exit_code = exc.exit_code
    finally:
        if launched and launcher is not None:
            launcher.down(target.label)
