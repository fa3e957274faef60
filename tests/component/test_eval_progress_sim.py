"""smoke's evals say how far they are as they run: the long-context probes against the
simulator, and GSM8K's answered count (every tenth of the questions, and the last)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from conftest import SimServer

from opsctl.traffic.client import make_client
from opsctl.traffic.smoke_evals import LongContextPlan, _gsm8k_progress, long_context_check

StartSim = Callable[..., SimServer]
MODEL = "/models/GLM-5-NVFP4"


def test_the_probes_report_each_step(sim_server: StartSim) -> None:
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}).url
    lines: list[str] = []

    async def go() -> str:
        async with make_client(url, None) as client:
            status, _, _ = await long_context_check(
                client, LongContextPlan(sizes=(4096, 16384), prefix_pair_tokens=4096),
                model=MODEL, api="completions", request_timeout_s=60, remaining_s=120,
                progress=lines.append)
            return status

    assert asyncio.run(go()) == "pass"
    assert [line.split(", ")[0:2] for line in lines] == [
        ["long-context probes: 0/3 done", "needle 4k next"],
        ["long-context probes: 1/3 done", "needle 16k next"],
        ["long-context probes: 2/3 done", "prefix pair next"]]


def test_gsm8k_progress_every_tenth_and_the_last() -> None:
    lines: list[str] = []
    answered = _gsm8k_progress(lines.append)
    assert answered is not None and _gsm8k_progress(None) is None
    for done in range(1, 26):
        answered(done, 25)
    assert [line.split(",")[0] for line in lines] == [
        f"gsm8k: {n}/25 answered" for n in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 25)]
