"""The simulator's process lifecycle: load (port closed), listen, warm up, serve, drain, exit.

Log lines imitate sglang's format (``[%Y-%m-%d %H:%M:%S] message``, ``configure_logger``) and
its key messages, verified in the 0.5.23 source: "The server is fired up and ready to roll!"
(http_server.py ``_wait_and_warmup``), "Scheduler hit an exception: ..." (scheduler.py),
"Received sigquit from a child process. It usually means the child failed." (engine.py) and
"SIGTERM received. ... Draining requests and shutting down..." (tokenizer_manager.py). The start-up
phase lines (weights, memory pool, CUDA graph capture, uvicorn, ready) are the ones `up` reports
from a real server's log: opsctl.deploy.readiness.STARTUP_PHASES, which cites where sglang
prints each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from opsctl.sim.api import SimApi
from opsctl.sim.config import SIM_MAX_MEM_FRACTION, ArgvError, Behaviour, SimArgs
from opsctl.sim.engine import SIM_MAX_TOTAL_NUM_TOKENS, Engine
from opsctl.sim.info import ServerView, read_model_config
from opsctl.sim.metrics import SglangMetrics
from opsctl.sim.patchmarker import marker_line
from opsctl.sim.releases import DEFAULT_RELEASE, RELEASE_ENV, releases
from opsctl.sim.state import BehaviourBox, Lifecycle
from opsctl.sim.wire import HttpServer

DRAIN_SECONDS = 2.0
EXIT_USAGE = 2
EXIT_FAILED = 1

log = logging.getLogger("opsctl.sim")


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def _redacted_argv(args: SimArgs) -> str:
    """The launch flags for the log, with the API key hidden (real 0.5.23 logs it in clear)."""
    shown: list[str] = []
    hide_next = False
    for token in args.argv:
        if hide_next:
            shown.append("<redacted>")
            hide_next = False
        elif token in ("--api-key", "--admin-api-key"):
            shown.append(token)
            hide_next = True
        elif token.startswith(("--api-key=", "--admin-api-key=")):
            shown.append(token.split("=", 1)[0] + "=<redacted>")
        else:
            shown.append(token)
    return " ".join(shown)


async def _sleep_or_stop(seconds: float, stop: asyncio.Event) -> bool:
    """Sleep ``seconds`` unless asked to stop first; True when stopped."""
    if seconds <= 0:
        return stop.is_set()
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


def _die_while_loading(cause: str) -> int:
    log.error(
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "sglang/srt/managers/scheduler.py", in run_scheduler_process\n'
        "torch.OutOfMemoryError: CUDA out of memory. "
        f"(simulated by opsctl-sim: {cause})"
    )
    log.error("Received sigquit from a child process. It usually means the child failed.")
    return EXIT_FAILED


async def _announce_ready(lifecycle: Lifecycle, metrics: SglangMetrics | None) -> None:
    while lifecycle.starting():
        await asyncio.sleep(0.05)
    if metrics is not None:
        load = lifecycle.load_seconds
        metrics.set_startup_time({"load_weight": load, "kv_cache_allocation": 0.0,
                                  "scheduler_e2e": load, "tokenizer_e2e": load})
    log.info("The server is fired up and ready to roll!")


def release_from_env(environ: Mapping[str, str]) -> str:
    """The pinned sglang release whose /server_info and /model_info the simulator speaks."""
    release = environ.get(RELEASE_ENV, "") or DEFAULT_RELEASE
    known = releases()
    if release not in known:
        raise ValueError(f"{RELEASE_ENV}={release!r}: the simulator speaks sglang "
                         f"{', '.join(known)}")
    return release


def _announce_patch(view: ServerView) -> None:
    """Print the patch's start-up line to stdout, where the patched backend's log goes."""
    line = marker_line(view.resolved("none"), os.environ, SIM_MAX_TOTAL_NUM_TOKENS)
    if line is not None:
        print(line, flush=True)


async def serve(args: SimArgs, behaviour: Behaviour, release: str = DEFAULT_RELEASE) -> int:
    """Run until SIGTERM/SIGINT (exit 0) or a simulated start-up failure (exit 1)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    box = BehaviourBox(behaviour)
    lifecycle = Lifecycle(box)
    lifecycle.load_seconds = behaviour.load_seconds
    log.info("server_args=%s (opsctl-sim, sglang %s API)", _redacted_argv(args), release)
    log.info("Load weight begin. (simulated, %.1f s)", behaviour.load_seconds)
    if behaviour.fault == "die_while_loading" or args.oom_at_start():
        if await _sleep_or_stop(behaviour.load_seconds / 2, stop):
            return 0
        return _die_while_loading(
            "OPSCTL_SIM_FAULT=die_while_loading" if behaviour.fault == "die_while_loading"
            else f"--mem-fraction-static above {SIM_MAX_MEM_FRACTION}")
    if await _sleep_or_stop(behaviour.load_seconds, stop):
        return 0
    log.info("Load weight end. (simulated)")
    log.info("Memory pool end. (simulated)")
    log.info("Capture target decode CUDA graph begin. (simulated)")
    log.info("Capture target decode CUDA graph end. (simulated)")
    view = ServerView(args, release, read_model_config(args.model_path))
    _announce_patch(view)

    metrics = SglangMetrics(args, release) if args.enable_metrics else None
    engine = Engine(box.get, metrics, args.max_running_requests, args.cuda_graph_max_bs)
    api = SimApi(view, box, lifecycle, engine, metrics)
    server = HttpServer(api.handle)
    try:
        await server.start(args.host, args.port)
    except OSError as exc:
        log.error("ERROR: could not bind %s:%s: %s", args.host, args.port, exc)
        return EXIT_FAILED
    lifecycle.listening_since = loop.time()
    log.info("Uvicorn running on http://%s:%s (Press CTRL+C to quit)", args.host, args.port)
    ready_task = asyncio.create_task(_announce_ready(lifecycle, metrics))

    await stop.wait()
    log.info("SIGTERM received. Draining requests and shutting down...")
    lifecycle.exiting = True
    server.stop_accepting()
    if not await server.drain(DRAIN_SECONDS):
        log.info("Gracefully exiting... Remaining number of requests %d.", server.in_flight)
    ready_task.cancel()
    await server.close_connections()
    return 0


def run(argv: Sequence[str]) -> int:
    """Entry point of ``python -m opsctl.sim`` and ``opsctl sim``; returns the exit status."""
    _configure_logging()
    try:
        args = SimArgs.parse(argv)
        behaviour = Behaviour.from_env(os.environ)
        release = release_from_env(os.environ)
    except (ArgvError, ValueError) as exc:
        log.error("error: %s", exc)
        return EXIT_USAGE
    return asyncio.run(serve(args, behaviour, release))
