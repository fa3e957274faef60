"""`opsctl smoke`: staged post-deploy checks of a running server -> SmokeReport.

Stages, each pass/fail/skip with its timing: readiness (/health_generate), the served model
name (/v1/models) and tokenizer path (/model_info), auth enforcement, greedy generations,
streaming latency (TTFT, ITL, TPOT), sglang's /metrics series, the profile's SLO, an optional
comparison of the greedy outputs with a report recorded from another variant, and, when asked
for, GSM8K accuracy and the long-context probes (smoke_evals.py).

The model name is read from the server, never assumed; sglang-only stages are skipped, not
failed, on a server that only speaks the OpenAI API. The API key is masked in every output.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from opsctl.argspec.spec import VERSION_RE
from opsctl.config.evalconfig import EvalConfig
from opsctl.config.sloconfig import Slo
from opsctl.core.errors import ServerUnreachable
from opsctl.core.httpcap import answer_json
from opsctl.core.interrupts import run_async
from opsctl.core.redact import API_KEY_ENV, mask_secret, redact, redact_model
from opsctl.traffic.client import (
    ClientFactory,
    RequestResult,
    TrafficClient,
    endpoint,
    generate,
    make_client,
    request_body,
    stream_generate,
)
from opsctl.traffic.evals.divergence import Divergence
from opsctl.traffic.evals.gsm8k import EvalResult, Gsm8kPlan
from opsctl.traffic.evals.probes import ProbeResult
from opsctl.traffic.served import (
    ModelResolution,
    ModelsUnlisted,
    NameUnresolved,
    read_model_info,
    resolve_served_name,
    tokenizer_from_model_info,
)
from opsctl.traffic.settings import SMOKE_DEFAULTS, SmokeSettings
from opsctl.traffic.sglang_metrics import expected_series, missing_series
from opsctl.traffic.smoke_evals import (
    EvalPlan,
    EvalProgress,
    LongContextPlan,
    gsm8k_check,
    long_context_check,
)
from opsctl.traffic.smoke_latency import check_slo, stream_record, stream_verdict
from opsctl.traffic.smoke_report import (
    CheckResult,
    CheckStatus,
    GenerationRecord,
    ServerKind,
    SloRecord,
    SmokeReport,
    StreamRecord,
    checkpoint_warning,
    compare_eval_outputs,
    compare_generations,
    load_reference,
)

# Fixed prompts for the greedy generations: short, unambiguous continuations, so a corrupted
# attention kernel shows up as different text and a healthy one gives the same text every run.
GREEDY_PROMPTS: tuple[tuple[str, str], ...] = (
    ("count", "Count from one to ten in English words, separated by commas:"),
    ("capital", "Question: What is the capital of France?\nAnswer:"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
)
STREAM_PROMPT = "Write a short paragraph about the history of the printing press."


@dataclass(frozen=True)
class SmokeOptions:
    """One smoke run, resolved (the one plan `opsctl smoke`, the gate and decide pass down):
    the server, what judges it (the profile's alias, SLO, `eval:` section, the checkpoint `up`
    recorded), the settings (every knob: traffic.settings.SmokeSettings), the evals planned,
    the reference, and where the report goes."""

    base_url: str
    profile: str | None = None
    variant: str | None = None
    profile_alias: str | None = None
    api_key: str | None = None
    settings: SmokeSettings = SMOKE_DEFAULTS
    max_tokens: int = 32
    stream_max_tokens: int = 64
    stream_requests: int = 3
    compare_with: Path | None = None
    evals: EvalPlan = EvalPlan()
    eval_config: EvalConfig | None = None  # the profile's `eval:` section the evals read
    checkpoint: dict[str, Any] | None = None  # what the server runs, as `up` recorded it
    slo: Slo | None = None  # when given, judged as the alerts and bench's goodput judge it
    progress: EvalProgress | None = None  # the evals' progress lines (GSM8K, probes)
    report_path: Path | None = None  # None: out/smoke-<UTC time>.json
    gateway: str | None = None  # push the report here; None: no push


class _Run:
    """Mutable state of one smoke run (local to `run_smoke`, never shared)."""

    def __init__(self, options: SmokeOptions) -> None:
        self.options = options
        self.deadline = time.monotonic() + options.settings.overall_timeout_s
        self.checks: list[CheckResult] = []
        self.server_kind: ServerKind = "unknown"
        self.reachable = True
        self.model: ModelResolution | None = None
        self.generations: list[GenerationRecord] = []
        self.stream: StreamRecord | None = None
        self.divergence: Divergence | None = None
        self.gsm8k: EvalResult | None = None
        self.probes: list[ProbeResult] | None = None
        self.slo = SloRecord()

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def budget(self) -> float:
        """Per-request timeout, never past the overall deadline."""
        return min(self.options.settings.request_timeout_s, self.remaining())

    def add(self, name: str, status: CheckStatus, seconds: float, detail: str,
            sglang_only: bool = False) -> None:
        detail = redact(detail, self.options.api_key)
        self.checks.append(CheckResult(name=name, status=status, duration_s=round(seconds, 4),
                                       detail=detail, sglang_only=sglang_only))

    async def stage(
        self, name: str, body: Callable[[], Awaitable[tuple[CheckStatus, str]]],
        sglang_only: bool = False, own_budget: bool = False,
    ) -> None:
        """Run one check; `own_budget`: an eval, bounded by its own eval_timeout_s rather than
        what the checks left of overall_timeout_s."""
        if not self.reachable:
            self.add(name, "skip", 0.0, "server not serving", sglang_only)
            return
        if not own_budget and self.budget() <= 0:
            self.add(name, "fail", 0.0, "overall timeout reached before this check", sglang_only)
            return
        start = time.perf_counter()
        try:
            status, detail = await body()
        except ServerUnreachable as exc:
            self.reachable = False
            status, detail = "fail", exc.message
        self.add(name, status, time.perf_counter() - start, detail, sglang_only)


def run_smoke(options: SmokeOptions, client_factory: ClientFactory = make_client) -> SmokeReport:
    """Run every stage against `options.base_url`; never raises for a failed check."""
    reference = load_reference(options.compare_with) if options.compare_with else None
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    run = _Run(options)
    stopped_by: BaseException | None = None
    try:
        run_async(_run_stages(run, reference, client_factory))
    except (KeyboardInterrupt, Exception) as exc:  # kept for the verdict, after the report
        stopped_by = exc
    failed = any(check.status == "fail" for check in run.checks)
    warning = checkpoint_warning(options.checkpoint, reference.checkpoint) if reference else None
    report = SmokeReport(
        started_at=started_at,
        duration_s=round(time.perf_counter() - start, 4),
        base_url=options.base_url,
        profile=options.profile,
        variant=options.variant,
        api=options.settings.api,
        api_key=mask_secret(options.api_key),
        server_kind=run.server_kind,
        reachable=run.reachable,
        model=run.model,
        checks=run.checks,
        generations=run.generations,
        stream=run.stream,
        slo=run.slo,
        compared_with=str(options.compare_with) if options.compare_with else None,
        divergence=run.divergence,
        gsm8k=run.gsm8k,
        gsm8k_divergence=compare_eval_outputs(run.gsm8k, reference.gsm8k)
        if run.gsm8k and reference and reference.gsm8k else None,
        long_context=run.probes,
        checkpoint=options.checkpoint,
        warnings=[warning] if warning else [],
        passed=not failed and stopped_by is None,
    )
    return redact_model(report, [options.api_key]).record_stop(stopped_by, [options.api_key])


async def _run_stages(
    run: _Run, reference: SmokeReport | None, client_factory: ClientFactory
) -> None:
    options = run.options
    async with client_factory(options.base_url, options.api_key,
                              timeout_s=options.settings.request_timeout_s) as client:
        await run.stage("readiness", lambda: _readiness(run, client))
        await run.stage("model_listed", lambda: _model_listed(run, client))
        await run.stage("model_info", lambda: _model_info(run, client), sglang_only=True)
        await run.stage("auth", lambda: _auth(run, client))
        await run.stage("generations", lambda: _generations(run, client))
        await run.stage("streaming", lambda: _streaming(run, client))
        await run.stage("metrics", lambda: _metrics(run, client), sglang_only=True)
        await run.stage("slo", lambda: _slo(run))
        await run.stage("compare", lambda: _compare(run, reference))
        if (gsm8k := options.evals.gsm8k) is not None:
            await run.stage("gsm8k", lambda: _gsm8k(run, client, gsm8k), own_budget=True)
        if (long_context := options.evals.long_context) is not None:
            await run.stage("long_context", lambda: _long_context(run, client, long_context),
                            own_budget=True)


async def _readiness(run: _Run, client: httpx.AsyncClient) -> tuple[CheckStatus, str]:
    timeout = run.budget()
    try:
        async with asyncio.timeout(timeout):
            response = await client.get("/health_generate")
    except httpx.ConnectError as exc:
        raise ServerUnreachable(f"no server answers at {run.options.base_url}: {exc}") from None
    except (TimeoutError, httpx.TimeoutException):
        return "fail", f"GET /health_generate did not answer within {timeout:g}s"
    except httpx.HTTPError as exc:
        return "fail", f"GET /health_generate: {type(exc).__name__}: {exc}"
    if response.status_code == 200:
        run.server_kind = "sglang"
        return "pass", "GET /health_generate: 200 (the server generated a token)"
    if response.status_code == 404:
        run.server_kind = "openai"
        return "skip", "no /health_generate (not sglang); readiness rests on /v1/models"
    if response.status_code == 503:
        return "fail", "GET /health_generate: 503 (still loading, or unhealthy)"
    return "fail", f"GET /health_generate: HTTP {response.status_code}"


async def _model_listed(run: _Run, client: httpx.AsyncClient) -> tuple[CheckStatus, str]:
    options = run.options
    try:
        run.model = await resolve_served_name(client, run.budget(), options.settings.model,
                                              options.profile_alias)
    except ModelsUnlisted as exc:
        # Ready means /v1/models lists the model: a server that gives no list (no whole
        # answer, an error status, a bad body, an empty list) is not serving - exit 4, as in
        # bench and verify (docs/smoke-and-bench.md, "Exit codes").
        raise ServerUnreachable(f"not serving: {exc}") from None
    except NameUnresolved as exc:
        return "fail", f"{exc}; pass --model NAME"
    name, source, notes = run.model.served_name, run.model.served_name_source, run.model.notes
    return "pass", f"model {name!r} ({source})" + "".join(f"; {n}" for n in notes)


async def _model_info(run: _Run, client: httpx.AsyncClient) -> tuple[CheckStatus, str]:
    info, how = await read_model_info(client, run.budget())
    if info is None:
        if run.model:
            run.model.tokenizer_source = how
        if "not sglang" in how:
            if run.server_kind == "unknown":
                run.server_kind = "openai"
            return "skip", how
        # A server known not to be sglang may refuse an unknown path in other ways.
        return ("skip" if run.server_kind == "openai" else "fail"), how
    run.server_kind = "sglang"
    path, source = tokenizer_from_model_info(info)
    served = info.get("served_model_name")
    if run.model:
        run.model.tokenizer_path = path
        run.model.tokenizer_source = source
        if served and served != run.model.served_name:
            run.model.notes.append(f"/model_info says served_model_name={served!r}")
    if path is None:
        return "fail", source
    return "pass", f"tokenizer {path!r} ({source}); model_path {info.get('model_path')!r}"


async def _auth(run: _Run, client: httpx.AsyncClient) -> tuple[CheckStatus, str]:
    """With a key configured, a request without it must be refused."""
    if not run.options.api_key:
        return "skip", f"no API key (${API_KEY_ENV} unset): nothing to enforce"
    model = run.model.served_name if run.model else "unknown"
    body = request_body(run.options.settings.api, model, "auth probe", max_tokens=1, stream=False)
    path = endpoint(run.options.settings.api)
    timeout = run.budget()
    try:
        async with asyncio.timeout(timeout):
            response = await client.post(path, json=body, headers={"Authorization": ""})
    except (TimeoutError, httpx.HTTPError) as exc:
        return "fail", f"unauthenticated POST {path}: {type(exc).__name__}"
    if response.status_code in (401, 403):
        return "pass", f"unauthenticated POST {path}: {response.status_code} (key enforced)"
    return "fail", f"unauthenticated POST {path}: {response.status_code}; the key is not enforced"


async def _generations(run: _Run, client: TrafficClient) -> tuple[CheckStatus, str]:
    if run.model is None:
        return "skip", "no model name: cannot send requests"
    options = run.options
    problems: list[str] = []
    for prompt_id, prompt in GREEDY_PROMPTS:
        body = request_body(options.settings.api, run.model.served_name, prompt,
                            max_tokens=options.max_tokens, stream=False, temperature=0.0)
        result = await generate(client, options.settings.api, body, timeout_s=run.budget())
        problem = result.error if not result.ok else _usage_problem(result, options.max_tokens)
        run.generations.append(GenerationRecord(
            prompt_id=prompt_id, prompt=prompt, max_tokens=options.max_tokens,
            text=result.text if result.ok else None, finish_reason=result.finish_reason,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.output_tokens if result.token_source == "usage" else None,
            error=redact(problem, options.api_key) if problem else None,
        ))
        if problem:
            problems.append(f"{prompt_id}: {problem}")
    if problems:
        return "fail", "; ".join(problems)
    return "pass", f"{len(GREEDY_PROMPTS)} greedy generations (temperature 0) with sane usage"


def _usage_problem(result: RequestResult, max_tokens: int) -> str | None:
    if result.token_source != "usage":
        return "no usage in the response"
    if not 0 < result.output_tokens <= max_tokens:
        return f"usage.completion_tokens={result.output_tokens} outside 1..{max_tokens}"
    if not result.prompt_tokens:
        return "usage.prompt_tokens is missing or 0"
    if result.finish_reason == "length" and result.output_tokens != max_tokens:
        return f"finish_reason 'length' after {result.output_tokens} of {max_tokens} tokens"
    return None


async def _streaming(run: _Run, client: TrafficClient) -> tuple[CheckStatus, str]:
    if run.model is None:
        return "skip", "no model name: cannot send requests"
    options = run.options
    results: list[RequestResult] = []
    for _ in range(options.stream_requests):
        body = request_body(options.settings.api, run.model.served_name, STREAM_PROMPT,
                            max_tokens=options.stream_max_tokens, stream=True, temperature=0.0)
        results.append(await stream_generate(client, options.settings.api, body,
                                             timeout_s=run.budget()))
    run.stream = stream_record(results, options.stream_max_tokens, options.api_key)
    return stream_verdict(run.stream)


async def _metrics(run: _Run, client: httpx.AsyncClient) -> tuple[CheckStatus, str]:
    if run.server_kind == "openai":
        return "skip", "not sglang: no sglang series to expect"
    timeout = run.budget()
    try:
        async with asyncio.timeout(timeout):
            response = await client.get("/metrics")
    except (TimeoutError, httpx.HTTPError) as exc:
        return "fail", f"GET /metrics: {type(exc).__name__}"
    if response.status_code == 404:
        return "fail", "GET /metrics: 404 (launch sglang with --enable-metrics)"
    if response.status_code != 200:
        return "fail", f"GET /metrics: HTTP {response.status_code}"
    version = await _server_version(client, run.budget())
    missing = missing_series(response.text, version)
    release = f"sglang {version}" if version else "a release /server_info did not name"
    if missing:
        return "fail", f"missing sglang series ({release}): " + ", ".join(missing)
    return "pass", f"all {len(expected_series(version))} sglang series {release} exports present"


async def _server_version(client: httpx.AsyncClient, timeout_s: float) -> str | None:
    """The release /server_info reports as `version`, or None (no answer, not JSON, no version
    shaped as a release's: a newline or markup never reaches the one-line detail)."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/server_info")
        info = answer_json(response) if response.status_code == 200 else None
    except (TimeoutError, httpx.HTTPError, ValueError):
        return None
    version = info.get("version") if isinstance(info, dict) else None
    return version if isinstance(version, str) and VERSION_RE.match(version) else None


async def _slo(run: _Run) -> tuple[CheckStatus, str]:
    return check_slo(run.slo, run.stream, run.options.slo)


async def _compare(run: _Run, reference: SmokeReport | None) -> tuple[CheckStatus, str]:
    if reference is None:
        return "skip", "no --compare-with report"
    status, detail, run.divergence = compare_generations(run.generations, reference)
    return status, detail


async def _gsm8k(run: _Run, client: TrafficClient, plan: Gsm8kPlan
                 ) -> tuple[CheckStatus, str]:
    if run.model is None:
        return "skip", "no model name: cannot send requests"
    status, detail, run.gsm8k = await gsm8k_check(
        client, plan, model=run.model.served_name, api=run.options.settings.api,
        request_timeout_s=run.options.settings.request_timeout_s,
        remaining_s=run.options.settings.eval_timeout_s, progress=run.options.progress)
    return status, detail


async def _long_context(run: _Run, client: TrafficClient, plan: LongContextPlan
                        ) -> tuple[CheckStatus, str]:
    if run.model is None:
        return "skip", "no model name: cannot send requests"
    status, detail, run.probes = await long_context_check(
        client, plan, model=run.model.served_name, api=run.options.settings.api,
        request_timeout_s=run.options.settings.request_timeout_s,
        remaining_s=run.options.settings.eval_timeout_s, progress=run.options.progress)
    return status, detail

