"""`opsctl bench`: a concurrency sweep per variant -> BenchReport (JSON, markdown, PNG plots).

Load model: a closed loop. At concurrency c, c workers each send one streaming request at a
time from a queue of N locally generated prompts (no dataset download, no tokenizer); c warm-up
requests run first and are excluded from the statistics (their failures still count). Output
length is fixed with `ignore_eos` (an sglang/vLLM extension) and `max_tokens`.

Per level: TTFT, ITL and TPOT p50/p90/p99 (linear interpolation, see opsctl.traffic.stats), output
tokens/s and requests/s over the measured phase's wall time, and failures by kind. ITL gaps are
pooled over all requests of the level; TPOT is per request, (e2e - ttft) / (output_tokens - 1),
with output tokens from the server's usage chunk when it sends one, else counted chunks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import httpx
from pydantic import BaseModel

from opsctl.core.errors import EXIT_USAGE, LaunchError, OpsctlError, SmokeError, UsageError
from opsctl.traffic.client import (
    Api,
    ModelResolution,
    RequestResult,
    ServerUnreachable,
    choose_served_name,
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

if TYPE_CHECKING:
    from rich.progress import TaskID

SCHEMA_VERSION = 1
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
PERCENTILES = (50, 90, 99)

# A fixed vocabulary of common English words: most tokenizers map each (with its leading space)
# to one token, so `input_words` approximates the prompt length in tokens. The server-counted
# prompt tokens are reported alongside, so the approximation is visible, never hidden.
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest "
    "death experience effect use class control care field development role effort rate heart "
    "drug show leader light voice wife police mind price report decision son view relationship "
    "town road arm difference value building action model season society tax director position"
)
_WORDS = tuple(_WORD_TEXT.split())


class Pcts(BaseModel):
    """Milliseconds; None when nothing was measured."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None


class LevelResult(BaseModel):
    concurrency: int
    requests: int
    completed: int
    failed: int
    warmup_requests: int
    warmup_failed: int
    errors: dict[str, int] = {}  # error kind -> count (measured and warm-up)
    error_examples: list[str] = []
    duration_s: float
    output_tokens: int
    prompt_tokens_mean: float | None = None
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: Pcts
    itl_ms: Pcts
    tpot_ms: Pcts
    e2e_ms: Pcts
    token_count_source: str  # "usage", "chunks", or both joined by "+"


class VariantResult(BaseModel):
    variant: str
    base_url: str
    launched_by_bench: bool = False
    model: ModelResolution | None = None
    levels: list[LevelResult] = []
    failed_requests: int = 0
    error: str | None = None  # the variant could not be benchmarked at all
    error_exit_code: int | None = None  # that error's exit code (2 usage, 4 unreachable/launch)


class BenchConfig(BaseModel):
    concurrency: list[int]
    requests_per_level: int | None  # None: max(16, 4 x concurrency)
    input_words: int
    output_tokens: int
    api: Api
    ignore_eos: bool
    temperature: float
    request_timeout_s: float
    prompt_seed: int


class ClientInfo(BaseModel):
    hostname: str
    platform: str
    python: str
    cpu_count: int | None


class BenchReport(BaseModel):
    """The JSON written by `opsctl bench` (schema_version bumps on any incompatible change)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["bench"] = "bench"
    started_at: str
    duration_s: float
    profile: str | None = None
    api_key: str | None = None  # masked
    config: BenchConfig
    client: ClientInfo
    variants: list[VariantResult]
    failed_requests: int
    passed: bool


@dataclass(frozen=True)
class Target:
    """A server to sweep: given by URL, or launched from a profile variant by `bench`."""

    label: str
    base_url: str | None = None


@dataclass(frozen=True)
class BenchOptions:
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    requests_per_level: int | None = None
    input_words: int = 256
    output_tokens: int = 256
    api: Api = "completions"
    ignore_eos: bool = True
    temperature: float = 0.0
    request_timeout_s: float = 600.0
    prompt_seed: int = 0
    api_key: str | None = None
    model: str | None = None
    profile_alias: str | None = None

    def requests_at(self, concurrency: int) -> int:
        if self.requests_per_level is not None:
            return self.requests_per_level
        return max(16, 4 * concurrency)

    def config(self) -> BenchConfig:
        return BenchConfig(
            concurrency=list(self.concurrency), requests_per_level=self.requests_per_level,
            input_words=self.input_words, output_tokens=self.output_tokens, api=self.api,
            ignore_eos=self.ignore_eos, temperature=self.temperature,
            request_timeout_s=self.request_timeout_s, prompt_seed=self.prompt_seed,
        )


# Progress callback: (variant label, concurrency, requests done, requests total).
Progress = Callable[[str, int, int, int], None]


def make_prompt(index: int, words: int, seed: int = 0) -> str:
    """A deterministic prompt, unique per index so no request shares a cached prefix."""
    rng = random.Random(seed * 1_000_003 + index)
    body = " ".join(rng.choice(_WORDS) for _ in range(max(0, words - 2)))
    return f"Request {index}: {body}"


def parse_concurrency(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--concurrency {text!r}: not a comma-separated list of integers",
                         hint="e.g. --concurrency 1,2,4,8") from None
    if not levels or any(level < 1 for level in levels):
        raise UsageError(f"--concurrency {text!r}: levels must be positive integers",
                         hint="e.g. --concurrency 1,2,4,8")
    return levels


def parse_targets(base_urls: Sequence[str], variants: Sequence[str]) -> list[Target]:
    """`--base-url [NAME=]URL`, repeated. Unnamed URLs take the `--variants` names, in order."""
    targets: list[Target] = []
    for index, value in enumerate(base_urls):
        name, sep, url = value.partition("=")
        if sep and "://" not in name:
            label = name
        else:
            url = value
            label = variants[index] if len(variants) == len(base_urls) else _host_port(value)
        targets.append(Target(label=label, base_url=url))
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise UsageError(f"two targets share a name: {labels}",
                         hint="name them: --base-url baseline=http://... --base-url b=http://...")
    return targets


def _host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


# --- one sweep --------------------------------------------------------------------------------


async def _resolve_model(
    client: httpx.AsyncClient, options: BenchOptions, timeout_s: float
) -> ModelResolution:
    try:
        listed = await list_models(client, timeout_s)  # ServerUnreachable propagates
    except ValueError as exc:
        # Ready means /v1/models lists the model (DESIGN.md); a server that does not is not.
        raise LaunchError(f"{client.base_url}: {exc}",
                          hint="check the server, and $OPSCTL_API_KEY if it wants a key") from None
    try:
        name, source, notes = choose_served_name(listed, options.model, options.profile_alias)
    except ValueError as exc:
        raise UsageError(str(exc), hint="pass --model NAME (one of the listed names)") from None
    resolution = ModelResolution(served_name=name, served_name_source=source, listed=listed,
                                 profile_alias=options.profile_alias, notes=notes)
    info, how = await read_model_info(client, timeout_s)
    if info is None:
        resolution.tokenizer_source = how + "; bench needs no tokenizer"
    else:
        resolution.tokenizer_path, resolution.tokenizer_source = tokenizer_from_model_info(info)
    return resolution


async def sweep(
    label: str, base_url: str, options: BenchOptions, progress: Progress | None = None
) -> VariantResult:
    """Every concurrency level against one server, in one event loop and one client."""
    result = VariantResult(variant=label, base_url=base_url)
    async with make_client(base_url, options.api_key, max_connections=max(options.concurrency),
                           timeout_s=options.request_timeout_s) as client:
        result.model = await _resolve_model(client, options, min(60.0, options.request_timeout_s))
        next_index = 0
        for concurrency in options.concurrency:
            level, next_index = await _run_level(
                client, label, concurrency, result.model.served_name, options, next_index, progress
            )
            result.levels.append(level)
    result.failed_requests = sum(level.failed + level.warmup_failed for level in result.levels)
    return result


async def _run_level(
    client: httpx.AsyncClient, label: str, concurrency: int, model: str, options: BenchOptions,
    first_index: int, progress: Progress | None,
) -> tuple[LevelResult, int]:
    total = options.requests_at(concurrency)
    warmup = await _closed_loop(client, concurrency, model, options,
                                range(first_index, first_index + concurrency), None)
    start_index = first_index + concurrency
    done = 0

    def one_done() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(label, concurrency, done, total)

    if progress:
        progress(label, concurrency, 0, total)
    started = time.perf_counter()
    measured = await _closed_loop(client, concurrency, model, options,
                                  range(start_index, start_index + total), one_done)
    duration = time.perf_counter() - started
    return summarize(concurrency, measured, warmup, duration, options.api_key), start_index + total


async def _closed_loop(
    client: httpx.AsyncClient, concurrency: int, model: str, options: BenchOptions,
    indexes: range, on_done: Callable[[], None] | None,
) -> list[RequestResult]:
    """`concurrency` workers, each with one request in flight, until the prompts run out."""
    bodies = [
        request_body(options.api, model, make_prompt(i, options.input_words, options.prompt_seed),
                     max_tokens=options.output_tokens, stream=True,
                     temperature=options.temperature, ignore_eos=options.ignore_eos)
        for i in indexes
    ]
    pending = iter(bodies)
    results: list[RequestResult] = []

    async def worker() -> None:
        for body in pending:  # a shared iterator: each body is taken by exactly one worker
            results.append(await stream_generate(client, options.api, body,
                                                 timeout_s=options.request_timeout_s))
            if on_done:
                on_done()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(bodies)))))
    return results


def _pcts(values_s: Sequence[float]) -> Pcts:
    if not values_s:
        return Pcts()
    ms = [v * 1000.0 for v in values_s]
    return Pcts(
        p50=round(percentile(ms, 50), 4), p90=round(percentile(ms, 90), 4),
        p99=round(percentile(ms, 99), 4), mean=round(sum(ms) / len(ms), 4),
    )


def summarize(
    concurrency: int, measured: list[RequestResult], warmup: list[RequestResult],
    duration_s: float, api_key: str | None = None,
) -> LevelResult:
    ok = [r for r in measured if r.ok]
    failures = [r for r in measured + warmup if not r.ok]
    kinds = Counter(str(r.error_kind or "unknown") for r in failures)
    examples: list[str] = []
    for r in failures:
        message = redact(f"{r.error_kind}: {r.error}", api_key)
        if message not in examples and len(examples) < 3:
            examples.append(message)
    output_tokens = sum(r.output_tokens for r in ok)
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens]
    return LevelResult(
        concurrency=concurrency,
        requests=len(measured),
        completed=len(ok),
        failed=len(measured) - len(ok),
        warmup_requests=len(warmup),
        warmup_failed=sum(1 for r in warmup if not r.ok),
        errors=dict(kinds),
        error_examples=examples,
        duration_s=round(duration_s, 4),
        output_tokens=output_tokens,
        prompt_tokens_mean=round(sum(prompt_counts) / len(prompt_counts), 2)
        if prompt_counts else None,
        output_tokens_per_s=round(output_tokens / duration_s, 3) if duration_s > 0 else 0.0,
        requests_per_s=round(len(ok) / duration_s, 4) if duration_s > 0 else 0.0,
        ttft_ms=_pcts([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_ms=_pcts([gap for r in ok for gap in r.itl_s]),
        tpot_ms=_pcts([t for r in ok if (t := r.tpot_s) is not None]),
        e2e_ms=_pcts([r.e2e_s for r in ok if r.e2e_s is not None]),
        token_count_source="+".join(sorted({r.token_source for r in ok})) or "none",
    )


# --- several variants ------------------------------------------------------------------------


def run_bench(
    targets: Sequence[Target],
    options: BenchOptions,
    *,
    profile_name: str | None = None,
    launch_variant: Callable[[str], str] | None = None,
    stop_variant: Callable[[str], object] | None = None,
    progress: Progress | None = None,
) -> BenchReport:
    """Sweep every target in order; a target without a URL is launched, swept, then stopped.

    A target that cannot be reached or launched is recorded with its error and the run goes on
    to the next one, so one bad variant does not throw away the others' results.
    """
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    results: list[VariantResult] = []
    for target in targets:
        results.append(_bench_target(target, options, launch_variant, stop_variant, progress))
    failed = sum(r.failed_requests for r in results)
    return BenchReport(
        started_at=started_at,
        duration_s=round(time.perf_counter() - start, 3),
        profile=profile_name,
        api_key=mask_secret(options.api_key),
        config=options.config(),
        client=ClientInfo(hostname=platform.node(), platform=platform.platform(),
                          python=platform.python_version(), cpu_count=os.cpu_count()),
        variants=results,
        failed_requests=failed,
        passed=failed == 0 and all(r.error is None for r in results),
    )


def _bench_target(
    target: Target, options: BenchOptions, launch_variant: Callable[[str], str] | None,
    stop_variant: Callable[[str], object] | None, progress: Progress | None,
) -> VariantResult:
    launched = target.base_url is None
    url = target.base_url or ""
    try:
        if launched:
            if launch_variant is None:
                raise UsageError(f"target {target.label!r} has no URL and nothing can launch it")
            url = launch_variant(target.label)
        result = asyncio.run(sweep(target.label, url, options, progress))
    except (ServerUnreachable, LaunchError, UsageError) as exc:
        result = VariantResult(variant=target.label, base_url=url,
                               error=redact(f"{type(exc).__name__}: {exc.message}",
                                            options.api_key),
                               error_exit_code=exc.exit_code)
    finally:
        if launched and stop_variant is not None:
            stop_variant(target.label)
    result.launched_by_bench = launched
    return result


def verdict_error(report: BenchReport, out_dir: Path) -> OpsctlError | None:
    """Exit 4 when a variant could not be reached or launched (2 when the model name is
    ambiguous); 5 on any failed request."""
    broken = [v for v in report.variants if v.error]
    if broken:
        first = broken[0]
        error_class = UsageError if first.error_exit_code == EXIT_USAGE else LaunchError
        return error_class(
            f"bench: {len(broken)} target(s) could not be benchmarked; "
            f"{first.variant}: {first.error}",
            hint=f"partial report in {out_dir}",
        )
    if report.failed_requests:
        return SmokeError(
            f"bench: {report.failed_requests} request(s) failed",
            hint=f"see `errors` per level in {out_dir / 'bench.json'}",
        )
    return None


# --- report files ----------------------------------------------------------------------------


def default_out_dir(now: dt.datetime | None = None) -> Path:
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return Path("out") / f"bench-{stamp}"


def write_outputs(report: BenchReport, out_dir: Path) -> list[Path]:
    """bench.json, bench.md and two PNGs, each written afresh (never appended)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [
        _write(out_dir / "bench.json", report.model_dump_json(indent=2) + "\n"),
        _write(out_dir / "bench.md", markdown_table(report)),
    ]
    written += write_plots(report, out_dir)
    return written


def _write(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


# (label, how to read it from a level, format)
_ROWS: tuple[tuple[str, Callable[[LevelResult], float | None], str], ...] = (
    ("TTFT p50 (ms)", lambda lv: lv.ttft_ms.p50, "{:.1f}"),
    ("ITL p50 (ms)", lambda lv: lv.itl_ms.p50, "{:.2f}"),
    ("TPOT p50 (ms)", lambda lv: lv.tpot_ms.p50, "{:.2f}"),
    ("TPOT p99 (ms)", lambda lv: lv.tpot_ms.p99, "{:.2f}"),
    ("output tok/s", lambda lv: lv.output_tokens_per_s, "{:.1f}"),
    ("requests/s", lambda lv: lv.requests_per_s, "{:.3f}"),
    ("failed", lambda lv: float(lv.failed + lv.warmup_failed), "{:.0f}"),
)


def delta_percent(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0:
        return ""
    return f" ({(value - base) / base * 100:+.1f}%)"


def markdown_table(report: BenchReport) -> str:
    """One row per (concurrency, metric); each variant after the first shows its delta."""
    runs = [v for v in report.variants if v.error is None]
    if not runs:
        return "No variant produced results.\n"
    base = runs[0]
    header = ["concurrency", "metric", base.variant] + [
        f"{v.variant} (Δ vs {base.variant})" for v in runs[1:]
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    levels = {lv.concurrency: lv for lv in base.levels}
    for concurrency in report.config.concurrency:
        base_level = levels.get(concurrency)
        for label, read, fmt in _ROWS:
            base_value = read(base_level) if base_level else None
            cells = [str(concurrency), label, _fmt(base_value, fmt)]
            for other in runs[1:]:
                level = next((lv for lv in other.levels if lv.concurrency == concurrency), None)
                value = read(level) if level else None
                delta = "" if label == "failed" else delta_percent(value, base_value)
                cells.append(_fmt(value, fmt) + delta)
            lines.append("| " + " | ".join(cells) + " |")
    config = report.config
    notes = [
        "",
        f"Closed loop, {config.input_words}-word prompts (about one token per word), "
        f"{config.output_tokens} output tokens, temperature {config.temperature:g}, "
        f"`{config.api}` API; warm-up excluded; percentiles by linear interpolation. "
        "Negative Δ is better for latencies, positive for throughput.",
    ]
    for run in report.variants:
        if run.error:
            notes.append(f"- {run.variant}: not benchmarked: {run.error}")
        elif run.model:
            notes.append(f"- {run.variant}: {run.base_url}, model {run.model.served_name!r} "
                         f"({run.model.served_name_source})")
    return "\n".join(lines + notes) + "\n"


def _fmt(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def write_plots(report: BenchReport, out_dir: Path) -> list[Path]:
    """TPOT p50 and output throughput against concurrency, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    plots = (
        ("tpot.png", "TPOT p50 (ms)", lambda lv: lv.tpot_ms.p50),
        ("throughput.png", "output tokens/s", lambda lv: lv.output_tokens_per_s),
    )
    written: list[Path] = []
    for filename, ylabel, read in plots:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for run in report.variants:
            points = [(lv.concurrency, read(lv)) for lv in run.levels if read(lv) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=run.variant)
        ax.set_xscale("log", base=2)
        levels = report.config.concurrency
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.minorticks_off()
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} vs concurrency")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        fig.tight_layout()
        path = out_dir / filename
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def render_summary(report: BenchReport, console: object) -> None:
    from rich.console import Console
    from rich.table import Table

    assert isinstance(console, Console)
    table = Table(title="opsctl bench")
    for column in ("variant", "conc", "ok/req", "failed", "TTFT p50", "ITL p50", "TPOT p50",
                   "TPOT p99", "out tok/s", "req/s"):
        table.add_column(column, justify="right" if column != "variant" else "left")
    for run in report.variants:
        if run.error:
            table.add_row(run.variant, "-", "-", "-", "", "", "", "", "", run.error)
            continue
        for lv in run.levels:
            table.add_row(
                run.variant, str(lv.concurrency), f"{lv.completed}/{lv.requests}",
                str(lv.failed + lv.warmup_failed), _fmt(lv.ttft_ms.p50, "{:.1f}"),
                _fmt(lv.itl_ms.p50, "{:.2f}"), _fmt(lv.tpot_ms.p50, "{:.2f}"),
                _fmt(lv.tpot_ms.p99, "{:.2f}"), f"{lv.output_tokens_per_s:.1f}",
                f"{lv.requests_per_s:.3f}",
            )
    console.print(table)


@contextmanager
def live_progress(console: object) -> Iterator[Progress]:
    """A rich progress bar per (variant, concurrency) level, updated on every finished request."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    assert isinstance(console, Console)
    tasks: dict[tuple[str, int], TaskID] = {}
    with RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as bar:

        def update(label: str, concurrency: int, done: int, total: int) -> None:
            key = (label, concurrency)
            if key not in tasks:
                tasks[key] = bar.add_task(f"{label} c={concurrency}", total=total)
            bar.update(tasks[key], completed=done)

        yield update


# --- the command -----------------------------------------------------------------------------


class _ProfileLauncher:
    """`up` a variant for bench and `down` it afterwards, unless it was already up before."""

    def __init__(self, profile_name: str) -> None:
        from opsctl.deploy.profiles import load_profile

        self.profile = load_profile(profile_name)
        self.started: set[str] = set()

    def up(self, variant: str) -> str:
        from opsctl.deploy import launch
        from opsctl.engine.dockerpy import Engine
        from opsctl.image.build import expected_image

        deployment = self.profile.resolve(variant)
        running = launch.up(deployment, expected_image(self.profile), Engine.connect())
        if not running.already_up:
            self.started.add(variant)
        return running.base_url

    def down(self, variant: str) -> None:
        from opsctl.deploy import launch
        from opsctl.engine.dockerpy import Engine

        if variant in self.started:
            launch.down(Engine.connect(), self.profile.name)
            self.started.discard(variant)


def bench_command(
    *,
    profile: str | None,
    variants: str | None,
    base_urls: Sequence[str],
    concurrency: str | None,
    requests_per_level: int | None,
    input_words: int,
    output_tokens: int,
    model: str | None,
    api: str,
    request_timeout_s: float,
    out_dir: Path | None,
    pushgateway: str | None,
    console: object,
) -> None:
    """Resolve targets, sweep each with live progress, write the report; raise on failure."""
    from opsctl.deploy.profiles import load_profile
    from opsctl.traffic.client import api_key_from_env, parse_api

    variant_names = [v.strip() for v in (variants or "").split(",") if v.strip()]
    loaded = load_profile(profile) if (profile or not base_urls) else None
    if loaded is not None:
        for name in variant_names:
            loaded.resolve(name)  # UsageError listing the valid variants
    launcher: _ProfileLauncher | None = None
    if base_urls:
        targets = parse_targets(base_urls, variant_names)
    else:
        assert loaded is not None
        launcher = _ProfileLauncher(loaded.name)
        targets = [Target(label=name) for name in (variant_names or [loaded.default_variant])]
    options = BenchOptions(
        concurrency=parse_concurrency(concurrency) if concurrency else DEFAULT_CONCURRENCY,
        requests_per_level=requests_per_level, input_words=input_words,
        output_tokens=output_tokens, api=parse_api(api), request_timeout_s=request_timeout_s,
        api_key=api_key_from_env(), model=model,
        profile_alias=loaded.model.served_name if loaded else None,
    )
    out = out_dir or default_out_dir()
    from rich.console import Console

    assert isinstance(console, Console)
    with live_progress(console) as progress:
        report = run_bench(
            targets, options, profile_name=loaded.name if loaded else None,
            launch_variant=launcher.up if launcher else None,
            stop_variant=launcher.down if launcher else None, progress=progress,
        )
    written = write_outputs(report, out)
    render_summary(report, console)
    console.print("wrote: " + ", ".join(str(p) for p in written), highlight=False,
                  soft_wrap=True)
    gateway = pushgateway or os.environ.get("OPSCTL_PUSHGATEWAY")
    if gateway:
        from opsctl.traffic.smoke import push

        push(console, "bench", report.model_dump(mode="json"), gateway)
    error = verdict_error(report, out)
    if error is not None:
        raise error
