"""`opsctl smoke`: staged post-deploy checks of a running server -> SmokeReport.

Stages, each pass/fail/skip with its timing: readiness (/health_generate), the served model
name (/v1/models) and tokenizer path (/model_info), auth enforcement, greedy generations,
streaming latency (TTFT, ITL, TPOT), sglang's /metrics series, the profile's SLO, and an
optional comparison of the greedy outputs with a report recorded from another variant.

The model name is read from the server, never assumed; sglang-only stages are skipped, not
failed, on a server that only speaks the OpenAI API. The API key is masked in every output.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, ValidationError

from opsctl.core.errors import SmokeError, UsageError
from opsctl.traffic.client import (
    API_KEY_ENV,
    Api,
    ModelResolution,
    RequestResult,
    ServerUnreachable,
    choose_served_name,
    generate,
    list_models,
    make_client,
    mask_secret,
    read_model_info,
    redact,
    request_body,
    stream_generate,
    tokenizer_from_model_info,
)
from opsctl.traffic.stats import percentile

SCHEMA_VERSION = 1

CheckStatus = Literal["pass", "fail", "skip"]
ServerKind = Literal["sglang", "openai", "unknown"]

# Check names are stable: reports, the metrics exporter and tests refer to them.
CHECK_NAMES = (
    "readiness", "model_listed", "model_info", "auth", "generations", "streaming",
    "metrics", "slo", "compare",
)

# Fixed prompts for the greedy generations: short, unambiguous continuations, so a corrupted
# attention kernel shows up as different text and a healthy one gives the same text every run.
GREEDY_PROMPTS: tuple[tuple[str, str], ...] = (
    ("count", "Count from one to ten in English words, separated by commas:"),
    ("capital", "Question: What is the capital of France?\nAnswer:"),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
)
STREAM_PROMPT = "Write a short paragraph about the history of the printing press."

# sglang 0.5.23 series smoke expects on /metrics after it has sent requests (Appendix A of
# sglang-deployment-facts.md). Matched with either prefix: the server emits `sglang:`, the
# router rewrites it to `sglang_`.
EXPECTED_SGLANG_SERIES = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "num_running_reqs",
    "num_requests_total",
    "generation_tokens_total",
)


class CheckResult(BaseModel):
    name: str
    status: CheckStatus
    duration_s: float
    detail: str
    sglang_only: bool = False


class GenerationRecord(BaseModel):
    """One greedy generation; `--compare-with` compares `text` per `prompt_id`."""

    prompt_id: str
    prompt: str
    max_tokens: int
    text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


class StreamRecord(BaseModel):
    """Streaming requests: per-request TTFT/TPOT, ITL pooled over all gaps."""

    requests: int
    ok: int
    max_tokens: int
    ttft_s: list[float]
    tpot_s: list[float]
    output_tokens: list[int]
    token_count_source: str  # "usage" (server's usage chunk), "chunks" (counted), or mixed
    ttft_p50_s: float | None = None
    tpot_p50_s: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    errors: list[str] = []


class SloRecord(BaseModel):
    tpot_p50_ms_limit: float | None = None
    tpot_p50_ms: float | None = None
    ttft_p50_ms_limit: float | None = None
    ttft_p50_ms: float | None = None


class SmokeReport(BaseModel):
    """The JSON written by `opsctl smoke` (schema_version bumps on any incompatible change)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["smoke"] = "smoke"
    started_at: str
    duration_s: float
    base_url: str
    profile: str | None = None
    variant: str | None = None
    api: Api = "completions"
    api_key: str | None = None  # masked: "****" + last 4, or None when no key was used
    server_kind: ServerKind = "unknown"
    reachable: bool = True
    model: ModelResolution | None = None
    checks: list[CheckResult]
    generations: list[GenerationRecord] = []
    stream: StreamRecord | None = None
    slo: SloRecord = SloRecord()
    compared_with: str | None = None
    passed: bool

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)


@dataclass(frozen=True)
class SmokeOptions:
    base_url: str
    profile: str | None = None
    variant: str | None = None
    profile_alias: str | None = None
    tpot_p50_ms: float | None = None
    ttft_p50_ms: float | None = None
    api_key: str | None = None
    model: str | None = None
    api: Api = "completions"
    request_timeout_s: float = 120.0
    overall_timeout_s: float = 600.0
    max_tokens: int = 32
    stream_max_tokens: int = 64
    stream_requests: int = 3
    compare_with: Path | None = None


class _Run:
    """Mutable state of one smoke run (local to `run_smoke`, never shared)."""

    def __init__(self, options: SmokeOptions) -> None:
        self.options = options
        self.deadline = time.monotonic() + options.overall_timeout_s
        self.checks: list[CheckResult] = []
        self.server_kind: ServerKind = "unknown"
        self.reachable = True
        self.model: ModelResolution | None = None
        self.generations: list[GenerationRecord] = []
        self.stream: StreamRecord | None = None
        self.slo = SloRecord(
            tpot_p50_ms_limit=options.tpot_p50_ms, ttft_p50_ms_limit=options.ttft_p50_ms
        )

    def budget(self) -> float:
        """Per-request timeout, never past the overall deadline."""
        return max(0.0, min(self.options.request_timeout_s, self.deadline - time.monotonic()))

    def add(self, name: str, status: CheckStatus, seconds: float, detail: str,
            sglang_only: bool = False) -> None:
        detail = redact(detail, self.options.api_key)
        self.checks.append(CheckResult(name=name, status=status, duration_s=round(seconds, 4),
                                       detail=detail, sglang_only=sglang_only))

    async def stage(
        self, name: str, body: Callable[[], Awaitable[tuple[CheckStatus, str]]],
        sglang_only: bool = False,
    ) -> None:
        if not self.reachable:
            self.add(name, "skip", 0.0, "server unreachable", sglang_only)
            return
        if self.budget() <= 0:
            self.add(name, "fail", 0.0, "overall timeout reached before this check", sglang_only)
            return
        start = time.perf_counter()
        try:
            status, detail = await body()
        except ServerUnreachable as exc:
            self.reachable = False
            status, detail = "fail", exc.message
        self.add(name, status, time.perf_counter() - start, detail, sglang_only)


def run_smoke(options: SmokeOptions) -> SmokeReport:
    """Run every stage against `options.base_url`; never raises for a failed check."""
    reference = load_reference(options.compare_with) if options.compare_with else None
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    run = _Run(options)
    asyncio.run(_run_stages(run, reference))
    failed = any(check.status == "fail" for check in run.checks)
    return SmokeReport(
        started_at=started_at,
        duration_s=round(time.perf_counter() - start, 4),
        base_url=options.base_url,
        profile=options.profile,
        variant=options.variant,
        api=options.api,
        api_key=mask_secret(options.api_key),
        server_kind=run.server_kind,
        reachable=run.reachable,
        model=run.model,
        checks=run.checks,
        generations=run.generations,
        stream=run.stream,
        slo=run.slo,
        compared_with=str(options.compare_with) if options.compare_with else None,
        passed=not failed,
    )


async def _run_stages(run: _Run, reference: SmokeReport | None) -> None:
    options = run.options
    async with make_client(options.base_url, options.api_key,
                           timeout_s=options.request_timeout_s) as client:
        await run.stage("readiness", lambda: _readiness(run, client))
        await run.stage("model_listed", lambda: _model_listed(run, client))
        await run.stage("model_info", lambda: _model_info(run, client), sglang_only=True)
        await run.stage("auth", lambda: _auth(run, client))
        await run.stage("generations", lambda: _generations(run, client))
        await run.stage("streaming", lambda: _streaming(run, client))
        await run.stage("metrics", lambda: _metrics(run, client), sglang_only=True)
        await run.stage("slo", lambda: _slo(run))
        await run.stage("compare", lambda: _compare(run, reference))


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
        listed = await list_models(client, run.budget())
    except ValueError as exc:
        return "fail", str(exc)
    try:
        name, source, notes = choose_served_name(listed, options.model, options.profile_alias)
    except ValueError as exc:
        return "fail", f"{exc}; pass --model NAME"
    run.model = ModelResolution(
        served_name=name, served_name_source=source, listed=listed,
        profile_alias=options.profile_alias, notes=notes,
    )
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
    """With a key configured, a request without it must be refused (R22)."""
    if not run.options.api_key:
        return "skip", f"no API key (${API_KEY_ENV} unset): nothing to enforce"
    model = run.model.served_name if run.model else "unknown"
    body = request_body(run.options.api, model, "auth probe", max_tokens=1, stream=False)
    path = "/v1/chat/completions" if run.options.api == "chat" else "/v1/completions"
    timeout = run.budget()
    try:
        async with asyncio.timeout(timeout):
            response = await client.post(path, json=body, headers={"Authorization": ""})
    except (TimeoutError, httpx.HTTPError) as exc:
        return "fail", f"unauthenticated POST {path}: {type(exc).__name__}"
    if response.status_code in (401, 403):
        return "pass", f"unauthenticated POST {path}: {response.status_code} (key enforced)"
    return "fail", f"unauthenticated POST {path}: {response.status_code}; the key is not enforced"


async def _generations(run: _Run, client: httpx.AsyncClient) -> tuple[CheckStatus, str]:
    if run.model is None:
        return "skip", "no model name: cannot send requests"
    options = run.options
    problems: list[str] = []
    for prompt_id, prompt in GREEDY_PROMPTS:
        body = request_body(options.api, run.model.served_name, prompt,
                            max_tokens=options.max_tokens, stream=False, temperature=0.0)
        result = await generate(client, options.api, body, timeout_s=run.budget())
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


async def _streaming(run: _Run, client: httpx.AsyncClient) -> tuple[CheckStatus, str]:
    if run.model is None:
        return "skip", "no model name: cannot send requests"
    options = run.options
    results: list[RequestResult] = []
    for _ in range(options.stream_requests):
        body = request_body(options.api, run.model.served_name, STREAM_PROMPT,
                            max_tokens=options.stream_max_tokens, stream=True, temperature=0.0)
        results.append(await stream_generate(client, options.api, body, timeout_s=run.budget()))
    ok = [r for r in results if r.ok]
    gaps = [gap for r in ok for gap in r.itl_s]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [t for r in ok if (t := r.tpot_s) is not None]
    sources = sorted({r.token_source for r in ok})
    run.stream = StreamRecord(
        requests=len(results), ok=len(ok), max_tokens=options.stream_max_tokens,
        ttft_s=ttfts, tpot_s=tpots, output_tokens=[r.output_tokens for r in ok],
        token_count_source="+".join(sources) or "none",
        ttft_p50_s=percentile(ttfts, 50) if ttfts else None,
        tpot_p50_s=percentile(tpots, 50) if tpots else None,
        itl_p50_s=percentile(gaps, 50) if gaps else None,
        itl_p90_s=percentile(gaps, 90) if gaps else None,
        errors=[redact(f"{r.error_kind}: {r.error}", options.api_key) for r in results
                if not r.ok],
    )
    if len(ok) < len(results):
        return "fail", f"{len(results) - len(ok)} of {len(results)} streams failed: " + \
            "; ".join(run.stream.errors)
    stream = run.stream
    return "pass", (
        f"{len(ok)} streams: TTFT p50 {_ms(stream.ttft_p50_s)}, ITL p50 {_ms(stream.itl_p50_s)}, "
        f"TPOT p50 {_ms(stream.tpot_p50_s)} (tokens from {stream.token_count_source})"
    )


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


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
    present = sample_names(response.text)
    missing = [name for name in EXPECTED_SGLANG_SERIES if not _has_series(present, name)]
    if missing:
        return "fail", "missing sglang series: " + ", ".join(missing)
    return "pass", f"all {len(EXPECTED_SGLANG_SERIES)} expected sglang series present"


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)")


def sample_names(exposition: str) -> set[str]:
    """Metric names of every sample line in a Prometheus text exposition."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line and not line.startswith("#") and (match := _SAMPLE.match(line)):
            names.add(match.group(1))
    return names


def _has_series(present: set[str], base: str) -> bool:
    for prefix in ("sglang:", "sglang_"):
        name = prefix + base
        if any(n == name or n.startswith(name + "_") for n in present):
            return True
    return False


async def _slo(run: _Run) -> tuple[CheckStatus, str]:
    slo = run.slo
    if slo.tpot_p50_ms_limit is None and slo.ttft_p50_ms_limit is None:
        return "skip", "no SLO thresholds (profile has none, or no profile given)"
    stream = run.stream
    if stream is None or stream.ok == 0:
        return "fail", "no streaming measurements to compare with the SLO"
    verdicts: list[str] = []
    failed = False
    for label, limit, value_s in (
        ("TPOT p50", slo.tpot_p50_ms_limit, stream.tpot_p50_s),
        ("TTFT p50", slo.ttft_p50_ms_limit, stream.ttft_p50_s),
    ):
        if limit is None:
            continue
        if value_s is None:
            failed = True
            verdicts.append(f"{label}: not measured (limit {limit:g} ms)")
            continue
        value_ms = value_s * 1000
        if label == "TPOT p50":
            slo.tpot_p50_ms = round(value_ms, 3)
        else:
            slo.ttft_p50_ms = round(value_ms, 3)
        over = value_ms > limit
        failed |= over
        verdicts.append(f"{label} {value_ms:.1f} ms {'>' if over else '<='} {limit:g} ms")
    return ("fail" if failed else "pass"), "; ".join(verdicts)


async def _compare(run: _Run, reference: SmokeReport | None) -> tuple[CheckStatus, str]:
    if reference is None:
        return "skip", "no --compare-with report"
    mine = {g.prompt_id: g for g in run.generations}
    differences: list[str] = []
    for theirs in reference.generations:
        ours = mine.get(theirs.prompt_id)
        if ours is None:
            differences.append(f"{theirs.prompt_id}: not generated in this run")
        elif theirs.text is None:
            differences.append(f"{theirs.prompt_id}: the reference has no output")
        elif ours.prompt != theirs.prompt or ours.max_tokens != theirs.max_tokens:
            differences.append(f"{theirs.prompt_id}: different prompt or max_tokens")
        elif ours.text != theirs.text:
            differences.append(f"{theirs.prompt_id}: {_first_difference(ours.text, theirs.text)}")
    extra = set(mine) - {g.prompt_id for g in reference.generations}
    differences += [f"{pid}: not in the reference" for pid in sorted(extra)]
    who = f"variant {reference.variant!r}" if reference.variant else reference.base_url
    if differences:
        return "fail", f"greedy outputs differ from {who}: " + "; ".join(differences)
    return "pass", f"{len(mine)} greedy outputs identical to {who}"


def _first_difference(ours: str | None, theirs: str) -> str:
    if ours is None:
        return "no output in this run"
    index = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                 min(len(ours), len(theirs)))
    here, there = ours[index:index + 20], theirs[index:index + 20]
    return f"differs at character {index}: {here!r} vs {there!r}"


def load_reference(path: Path) -> SmokeReport:
    try:
        return SmokeReport.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--compare-with {path}: no such file",
                         hint="pass a JSON report written by `opsctl smoke --json`") from None
    except (ValidationError, ValueError) as exc:
        raise UsageError(f"--compare-with {path}: not a smoke report ({type(exc).__name__})",
                         hint="pass a JSON report written by `opsctl smoke --json`") from None


# --- output ----------------------------------------------------------------------------------


def write_report(report: SmokeReport, path: Path) -> None:
    """Write the JSON afresh (never appended): a temp file renamed over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(report.model_dump_json(indent=2) + "\n")
    tmp.replace(path)


def default_report_path(now: dt.datetime | None = None) -> Path:
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return Path("out") / f"smoke-{stamp}.json"


def render(report: SmokeReport, console: object) -> None:
    """Print the model/tokenizer provenance and the table of checks."""
    from rich.console import Console
    from rich.table import Table

    assert isinstance(console, Console)
    where = [f"profile {report.profile}"] if report.profile else []
    where += [f"variant {report.variant}"] if report.variant else []
    target = report.base_url + (f" ({', '.join(where)})" if where else "")
    console.print(f"smoke: {target}; server kind {report.server_kind}; "
                  f"API key {report.api_key or 'none'}", highlight=False)
    if report.model:
        model = report.model
        console.print(f"model: {model.served_name!r} ({model.served_name_source}); "
                      f"tokenizer: {model.tokenizer_path!r} ({model.tokenizer_source})",
                      highlight=False)
    table = Table(show_lines=False)
    for column in ("check", "status", "time", "detail"):
        table.add_column(column)
    colour = {"pass": "green", "fail": "bold red", "skip": "yellow"}
    for check in report.checks:
        table.add_row(check.name, f"[{colour[check.status]}]{check.status}[/]",
                      f"{check.duration_s:.3f}s", check.detail)
    console.print(table)
    verdict = "[green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
    console.print(f"smoke {verdict} in {report.duration_s:.1f}s")


def verdict_error(report: SmokeReport, json_path: Path) -> Exception | None:
    """The error the CLI raises for this report: exit 4 unreachable, 5 failed, None passed."""
    if not report.reachable:
        return ServerUnreachable(
            f"smoke: no server answers at {report.base_url}",
            hint=f"start it (`opsctl up`) or check --base-url; report in {json_path}",
        )
    if report.passed:
        return None
    failed = [c.name for c in report.checks if c.status == "fail"]
    return SmokeError(f"smoke failed: {', '.join(failed)}",
                      hint=f"details in the table above and in {json_path}")



# --- the command: target resolution, run, outputs --------------------------------------------


@dataclass(frozen=True)
class SmokeTarget:
    base_url: str
    profile: str | None
    variant: str | None
    profile_alias: str | None
    tpot_p50_ms: float | None
    ttft_p50_ms: float | None


def resolve_target(profile: str | None, variant: str | None, base_url: str | None) -> SmokeTarget:
    """`--base-url` wins; else the profile's running container, found by label.

    A profile given with `--base-url` still supplies the model alias and the SLO thresholds.
    """
    from opsctl.deploy.profiles import load_profile

    deployment = load_profile(profile).resolve(variant) if (profile or not base_url) else None
    if base_url:
        return SmokeTarget(
            base_url=base_url,
            profile=deployment.profile.name if deployment else None,
            variant=variant,  # a label for the report; the profile (if any) validated it
            profile_alias=deployment.profile.model.served_name if deployment else None,
            tpot_p50_ms=deployment.profile.slo.tpot_p50_ms if deployment else None,
            ttft_p50_ms=deployment.profile.slo.ttft_p50_ms if deployment else None,
        )
    assert deployment is not None
    url, running_variant = _running_server(deployment.profile.name, variant)
    return SmokeTarget(
        base_url=url, profile=deployment.profile.name, variant=running_variant,
        profile_alias=deployment.profile.model.served_name,
        tpot_p50_ms=deployment.profile.slo.tpot_p50_ms,
        ttft_p50_ms=deployment.profile.slo.ttft_p50_ms,
    )


def _running_server(profile_name: str, variant: str | None) -> tuple[str, str | None]:
    from opsctl.deploy import launch
    from opsctl.engine.dockerpy import Engine

    engine = Engine.connect()
    url = launch.base_url_for(engine, profile_name)  # LaunchError (exit 4) when none runs
    servers = [s for s in launch.find_servers(engine, profile_name) if s.status == "running"]
    running = servers[0].labels.get("opsctl.variant") if servers else None
    if variant and running and running != variant:
        raise UsageError(
            f"profile {profile_name!r} runs variant {running!r}, not {variant!r}",
            hint=f"smoke the running one (drop --variant), or run `opsctl up --profile "
            f"{profile_name} --variant {variant} --replace` first",
        )
    return url, running


def smoke_command(
    *,
    profile: str | None,
    variant: str | None,
    base_url: str | None,
    model: str | None,
    api: str,
    json_path: Path | None,
    compare_with: Path | None,
    request_timeout_s: float,
    overall_timeout_s: float,
    pushgateway: str | None,
    console: object,
) -> None:
    """Resolve, run, print the table, write the JSON, push if asked; raise on failure."""
    from opsctl.traffic.client import api_key_from_env, parse_api

    target = resolve_target(profile, variant, base_url)
    options = SmokeOptions(
        base_url=target.base_url, profile=target.profile, variant=target.variant,
        profile_alias=target.profile_alias, tpot_p50_ms=target.tpot_p50_ms,
        ttft_p50_ms=target.ttft_p50_ms, api_key=api_key_from_env(), model=model,
        api=parse_api(api),
        request_timeout_s=request_timeout_s, overall_timeout_s=overall_timeout_s,
        compare_with=compare_with,
    )
    report = run_smoke(options)
    path = json_path or default_report_path()
    write_report(report, path)
    render(report, console)
    _print(console, f"report: {path}")
    gateway = pushgateway or os.environ.get("OPSCTL_PUSHGATEWAY")
    if gateway:
        push(console, "smoke", report.model_dump(mode="json"), gateway)
    error = verdict_error(report, path)
    if error is not None:
        raise error


def push(console: object, kind: str, report: dict, gateway: str) -> None:
    """Push the report's metrics; a push failure is reported but does not change the verdict."""
    from opsctl.core.errors import OpsctlError
    from opsctl.observe.metrics import push_report

    try:
        push_report(kind, report, gateway)
    except OpsctlError as exc:
        _print(console, f"[yellow]warning:[/] push to {gateway} failed: {exc.message}")
    else:
        _print(console, f"pushed {kind} metrics to {gateway}")


def _print(console: object, text: str) -> None:
    from rich.console import Console

    assert isinstance(console, Console)
    console.print(text, highlight=False, soft_wrap=True)
