"""`bench --driver sglang-bench`: each level is one run of `python3 -m sglang.bench_serving`
inside the container that serves the target, read back into the same report as opsctl's own.

Inside the container the tokenizer is the server's own (the path /model_info names) and the
server is on loopback; HF_HUB_OFFLINE=1 keeps bench_serving off the hub. Per level it gets
`--max-concurrency c --num-prompts N`, `--request-rate` (Poisson) or `inf` (closed loop), the
seed, `--warmup-requests c`, and writes one JSONL row to a fresh file under /tmp, read back with
`cat` under a byte cap and then removed (opsctl.traffic.bench.serving_read turns it into a
LevelResult). Workloads: `random` is bench_serving's `random-ids` (uniform token ids; its
`random` samples ShareGPT and downloads it when no local file is given), `sharegpt` reads
`--dataset-path` inside the container, `generated-shared-prefix` maps onto its --gsp-* options
(it sends groups x prompts-per-group requests per level). What bench_serving cannot express is
refused before any work: --duration, word prompts, a host --tokenizer.

The engine is not imported here: the CLI passes `find`, which names the target's container
and runs commands in it (opsctl.deploy.urlserver finds it by its labels and published port).
A level runs under coreutils `timeout` with the sweep's remaining time, so a hung run ends
inside the container too; the exec itself is bounded in time and output bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from opsctl.core.answers import Malformed
from opsctl.core.errors import OpsctlError, UsageError
from opsctl.core.redact import redact, redact_userinfo
from opsctl.traffic.bench.drivers import BACKENDS, SGLANG_BENCH
from opsctl.traffic.bench.levels import CUT_SHORT, sweep_end
from opsctl.traffic.bench.plan import BenchOptions, Progress
from opsctl.traffic.bench.report import LevelResult, Pcts, VariantResult
from opsctl.traffic.bench.serving_read import SOURCE, level_from_row, parse_row
from opsctl.traffic.bench.sweep import deadline_reached, resolve_model
from opsctl.traffic.bench.workloads import Workload, WorkloadSpec
from opsctl.traffic.client import ClientFactory, make_client
from opsctl.traffic.settings import BenchSettings

_DATASETS = {"random": "random-ids", "sharegpt": "sharegpt",
             "generated-shared-prefix": "generated-shared-prefix"}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
OUTPUT_TAIL_BYTES = 64 << 10  # of bench_serving's own output, for a failed level's message
MAX_ROW_BYTES = 1 << 20  # its result row is a few KiB (server_info included)
KILL_AFTER_S = 10  # `timeout --kill-after`
FILE_CALL_S = 60.0  # `cat` and `rm` of the result file
TAIL_CHARS = 300

T = TypeVar("T")


class ExecOutput(Protocol):
    """What a command run in the container left (opsctl.engine.api.ExecResult has this shape)."""

    @property
    def exit_code(self) -> int | None: ...
    @property
    def output(self) -> bytes: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def timed_out(self) -> bool: ...


# (argv, extra environment, timeout seconds, most output bytes kept) -> what it left.
ContainerExec = Callable[[list[str], dict[str, str], float, int], ExecOutput]


@dataclass(frozen=True)
class ServingContainer:
    name: str
    inner_url: str  # the server's base URL from inside the container
    run: ContainerExec


# The target's base URL -> its container; raises OpsctlError when there is none.
ContainerFinder = Callable[[str], ServingContainer]


def workload_for(spec: WorkloadSpec, settings: BenchSettings) -> Workload:
    """The workload record of the report (bench_serving builds the prompts); UsageError for
    what bench_serving cannot express."""
    other = "or --driver opsctl"
    requests_per_level = settings.requests_per_level
    if settings.duration_s is not None:
        raise UsageError(f"--duration: {SOURCE} has no fixed-duration mode",
                         hint=f"give --requests per level, {other}")
    if spec.name not in _DATASETS:
        raise UsageError(
            f"--dataset-name {spec.name}: {SOURCE} has no such workload",
            hint=f"--dataset-name random, sharegpt or generated-shared-prefix, {other}",
        )
    if spec.turns > 1:
        raise UsageError(f"--multi-turn {spec.turns}: {SOURCE} sends single requests",
                         hint=f"leave out --multi-turn, {other}")
    if spec.pairs:
        raise UsageError(f"--isl-osl: {SOURCE} draws one length pair per run",
                         hint=f"leave out --isl-osl, {other}")
    if spec.tokenizer is not None:
        raise UsageError(f"--tokenizer: with --driver {SGLANG_BENCH} the tokenizer is the "
                         "server's own, inside its container", hint="leave out --tokenizer")
    if spec.name == "sharegpt" and spec.dataset_path is None:
        raise UsageError("--dataset-name sharegpt needs --dataset-path",
                         hint="a ShareGPT JSON file's path inside the serving container")
    per_level = spec.groups * spec.prompts_per_group
    if spec.name == "generated-shared-prefix" and requests_per_level not in (None, per_level):
        raise UsageError(f"--requests {requests_per_level}: {SOURCE}'s generated-shared-prefix "
                         f"sends --gsp-groups x --gsp-prompts-per-group ({per_level}) per level",
                         hint="leave out --requests, or change the group sizes")
    what = {"random": f"random token ids ({spec.input_len} in, {spec.output_len} out)",
            "sharegpt": f"ShareGPT conversations from {spec.dataset_path} in the container",
            "generated-shared-prefix": f"{spec.groups} x {spec.prompts_per_group} prompts "
            f"sharing {spec.prefix_len}-token prefixes, {spec.input_len}-token questions"}
    note = (
        f"{SOURCE} (backend {BACKENDS[settings.api]}, dataset {_DATASETS[spec.name]}) inside each "
        f"serving container: {what[spec.name]}, lengths counted by the server's tokenizer"
    )
    return Workload(spec.name, None, spec, note)


def requests_at(options: BenchOptions, concurrency: int) -> int:
    spec = options.work().spec
    if spec.name == "generated-shared-prefix":
        return spec.groups * spec.prompts_per_group
    return options.requests_at(concurrency)


def bench_argv(options: BenchOptions, concurrency: int, *, served: str, tokenizer: str,
               base_url: str, output_file: str) -> list[str]:
    """bench_serving's command line for one level (both pinned releases take these flags)."""
    spec = options.work().spec
    rate = options.arrival.rate
    argv = ["python3", "-m", "sglang.bench_serving", "--backend", BACKENDS[options.settings.api],
            "--base-url", base_url, "--model", tokenizer, "--served-model-name", served,
            "--tokenizer", tokenizer, "--dataset-name", _DATASETS[spec.name],
            "--num-prompts", str(requests_at(options, concurrency)),
            "--max-concurrency", str(concurrency),
            "--request-rate", repr(rate) if rate else "inf", "--seed", str(spec.seed),
            "--warmup-requests", str(concurrency), "--output-file", output_file, "--disable-tqdm"]
    if not options.settings.ignore_eos:
        argv.append("--disable-ignore-eos")
    if options.settings.extra_request_body is not None:
        argv += ["--extra-request-body", json.dumps(options.settings.extra_request_body)]
    if spec.name == "random":
        argv += ["--random-input-len", str(spec.input_len),
                 "--random-output-len", str(spec.output_len),
                 "--random-range-ratio", f"{spec.range_ratio:g}"]
    elif spec.name == "sharegpt":
        argv += ["--dataset-path", str(spec.dataset_path)]
    else:
        argv += ["--gsp-num-groups", str(spec.groups),
                 "--gsp-prompts-per-group", str(spec.prompts_per_group),
                 "--gsp-system-prompt-len", str(spec.prefix_len),
                 "--gsp-question-len", str(spec.input_len),
                 "--gsp-output-len", str(spec.output_len), "--gsp-range-ratio", "1"]
    return argv


class SglangBench:
    """The `sglang-bench` driver (opsctl.traffic.bench.plan.SweepDriver)."""

    name = SGLANG_BENCH

    def __init__(self, find: ContainerFinder) -> None:
        self._find = find

    def workload(self, spec: WorkloadSpec, settings: BenchSettings) -> Workload:
        return workload_for(spec, settings)

    async def sweep(
        self, label: str, base_url: str, options: BenchOptions, progress: Progress | None = None,
        client_factory: ClientFactory = make_client, result: VariantResult | None = None,
    ) -> VariantResult:
        """The model from the server (as opsctl's sweep resolves it), then one bench_serving
        run per level in the target's container, within the sweep's deadline."""
        result = result or VariantResult(variant=label, base_url=redact_userinfo(base_url))
        container = self._find(base_url)
        deadline = options.deadline()
        ends = time.monotonic() + deadline
        try:
            async with asyncio.timeout(deadline):
                async with client_factory(base_url, options.api_key, max_connections=1,
                                          timeout_s=options.settings.request_timeout_s) as client:
                    result.model = await resolve_model(
                        client, options, min(60.0, options.settings.request_timeout_s)
                    )
                tokenizer = result.model.tokenizer_path
                if tokenizer is None:
                    raise UsageError(f"{SOURCE} needs the server's tokenizer path: "
                                     f"{result.model.tokenizer_source}",
                                     hint="bench servers that are not sglang with --driver opsctl")
                await _check_dataset(container, options)
                for concurrency in options.settings.concurrency:
                    try:
                        level = await _level(
                            container,
                            label,
                            concurrency,
                            result.model.served_name,
                            tokenizer,
                            options,
                            progress,
                            ends,
                        )
                    except asyncio.CancelledError:
                        result.levels.append(_failed(concurrency, requests_at(options, concurrency),
                                                     0.0, CUT_SHORT))  # the caller says by what
                        raise
                    if not level.aborted:  # the early stops judge whole levels
                        level.sweep_end = sweep_end(result.levels[-1] if result.levels else None,
                                                    level, options.settings)
                    result.levels.append(level)
                    if level.aborted:
                        result.stopped = f"stopped at concurrency {concurrency}: {level.aborted}"
                        break
                    if level.sweep_end:
                        break
        except TimeoutError:
            deadline_reached(result, base_url, deadline)
        result.failed_requests = sum(level.failed for level in result.levels)
        return result


async def _check_dataset(container: ServingContainer, options: BenchOptions) -> None:
    """A ShareGPT file must be readable inside the container: bench_serving downloads one
    from the hub when it is not, which HF_HUB_OFFLINE refuses after a long wait."""
    spec = options.work().spec
    if spec.name != "sharegpt":
        return
    found = await _in_thread(lambda: container.run(["test", "-r", str(spec.dataset_path)], {},
                                                   FILE_CALL_S, 4096))
    if found.exit_code != 0:
        raise UsageError(f"--dataset-path {spec.dataset_path}: not readable inside container "
                         f"{container.name}", hint="mount the file into the serving container")


async def _level(container: ServingContainer, label: str, concurrency: int, served: str,
                 tokenizer: str, options: BenchOptions, progress: Progress | None,
                 ends: float) -> LevelResult:
    requests = requests_at(options, concurrency)
    output_file = f"/tmp/opsctl-bench-serving-{uuid.uuid4().hex}.jsonl"
    argv = bench_argv(options, concurrency, served=served, tokenizer=tokenizer,
                      base_url=container.inner_url, output_file=output_file)
    budget = max(1, int(ends - time.monotonic()))
    env = {**OFFLINE_ENV, **({"OPENAI_API_KEY": options.api_key} if options.api_key else {})}
    if progress:
        progress(label, concurrency, 0, requests)
    started = time.perf_counter()
    ran = await _in_thread(lambda: container.run(
        ["timeout", f"--kill-after={KILL_AFTER_S}", str(budget), *argv], env,
        budget + KILL_AFTER_S + 5, OUTPUT_TAIL_BYTES))
    wall = time.perf_counter() - started
    if ran.exit_code != 0:
        level = _failed(concurrency, requests, wall, _why(ran, budget, options.api_key))
    else:
        level = await _read_level(container, output_file, concurrency, requests, wall,
                                  options.api_key)
    with contextlib.suppress(OpsctlError):  # a leftover file in /tmp is no failure
        await _in_thread(lambda: container.run(["rm", "-f", output_file], {}, FILE_CALL_S, 4096))
    if progress:
        progress(label, concurrency, level.completed, requests)
    return level


async def _read_level(container: ServingContainer, output_file: str, concurrency: int,
                      requests: int, wall: float, api_key: str | None) -> LevelResult:
    """The level from the row bench_serving wrote, or a failed level saying why not."""
    read = await _in_thread(lambda: container.run(["cat", output_file], {}, FILE_CALL_S,
                                                  MAX_ROW_BYTES))
    if read.exit_code != 0 or read.truncated:
        why = (f"larger than {MAX_ROW_BYTES >> 10} KiB" if read.truncated
               else _tail(read.output, api_key))
        return _failed(concurrency, requests, wall, f"{SOURCE}'s result file: {why}")
    try:
        return level_from_row(parse_row(read.output), concurrency, requests, _notes(concurrency))
    except Malformed as exc:
        return _failed(concurrency, requests, wall, f"{SOURCE}'s result row is unusable: {exc}")


def _notes(concurrency: int) -> list[str]:
    return [f"warm-up: {SOURCE} sent {concurrency} request(s) of its first prompt (at most 32 "
            "tokens) first; it counts no warm-up failure unless all fail (then the level fails)",
            f"input tokens: {SOURCE}'s count with the server's tokenizer; output tokens: the "
            "server's usage when a text chunk carries it, else the length asked",
            "goodput and client CPU: not measured by this driver"]


def _failed(concurrency: int, requests: int, wall: float, why: str) -> LevelResult:
    """A level bench_serving did not measure: nothing but the reason, never made-up figures."""
    return LevelResult(concurrency=concurrency, requests=requests, completed=0, failed=0,
                       warmup_requests=0, warmup_failed=0, duration_s=round(wall, 4),
                       output_tokens=0, output_tokens_per_s=0.0, requests_per_s=0.0,
                       ttft_ms=Pcts(), itl_ms=Pcts(), tpot_ms=Pcts(), e2e_ms=Pcts(),
                       token_count_source="none", aborted=why)


def _why(ran: ExecOutput, budget: int, api_key: str | None) -> str:
    if ran.timed_out or ran.exit_code == 124:  # coreutils `timeout` ended it
        return f"{SOURCE} ran past the sweep's deadline ({budget} s left for the level)"
    return f"{SOURCE} exited {ran.exit_code}: {_tail(ran.output, api_key)}"


def _tail(output: bytes, api_key: str | None) -> str:
    """The last lines of a command's output as one redacted line."""
    lines = [line.strip() for line in output.decode(errors="replace").splitlines() if line.strip()]
    text = " | ".join(lines[-3:]) or "(no output)"
    return redact(text if len(text) <= TAIL_CHARS else "..." + text[-TAIL_CHARS:], api_key)


async def _in_thread(call: Callable[[], T]) -> T:
    """`call` (a blocking engine call) in a daemon thread: awaiting it can be cancelled by the
    deadline or Ctrl-C, and the thread never holds up opsctl's exit (the exec has its own
    timeout)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def work() -> None:
        try:
            value, error = call(), None
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="opsctl-bench-serving", daemon=True).start()
    return await future
