"""Make docs/decode-latency.png from a real run: two simulated variants under opsctl bench.

    .venv/bin/python scripts/observability_demo.py [--out docs/decode-latency.png]

Starts the simulator twice as the `sim` profile launches it (variants baseline and gathercast,
their ITL settings from deploy/sim.yaml, loopback ports), a Pushgateway and Prometheus with the
shipped rules (production timing, 5 s scrapes), runs `opsctl bench` against both variants at once
at rising concurrency, pushes a smoke of each, then draws the picture with `opsctl report`'s code
from Prometheus range queries. Needs Debian's prometheus and prometheus-pushgateway. Everything it
starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from opsctl.config.profiles import load_profile
from opsctl.deploy import localsim as simproc
from opsctl.observe import app, monitoring, view
from opsctl.observe.metrics import push_report
from opsctl.observe.promconfig import ScrapeTargets
from opsctl.observe.promnames import slo_rules
from opsctl.observe.report import QUERY_TIMEOUT_SECONDS
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.settings import BenchSettings
from opsctl.traffic.smoke import SmokeOptions, run_smoke

LEVELS = (1, 8, 16, 32)
OUTPUT_TOKENS = 128


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/decode-latency.png"))
    args = parser.parse_args()
    prometheus_bin = shutil.which("prometheus")
    push_bin = shutil.which("prometheus-pushgateway")
    if not prometheus_bin or not push_bin:
        print("needs Debian's prometheus and prometheus-pushgateway", file=sys.stderr)
        return 2

    profile = load_profile("sim")
    work = Path(tempfile.mkdtemp(prefix="opsctl-demo-"))
    processes: list[subprocess.Popen[bytes]] = []
    local_sims: list[simproc.LocalSim] = []
    try:
        sims: dict[str, str] = {}
        for variant in ("baseline", "gathercast"):
            sim = simproc.start_variant(
                profile.resolve(variant), log=work / f"sim-{variant}.log",
                extra_env={"OPSCTL_SIM_LOAD_SECONDS": "0", "OPSCTL_SIM_WARMUP_SECONDS": "0"})
            local_sims.append(sim)
            sims[variant] = sim.url

        prom_port, push_port = simproc.free_port(), simproc.free_port()
        targets = ScrapeTargets(
            sglang=tuple(u.removeprefix("http://") for u in sims.values()),
            opsctl_exporter=(f"127.0.0.1:{simproc.free_port()}",),
            pushgateway=(f"127.0.0.1:{push_port}",),
            scrape_interval="5s", evaluation_interval="5s",
        )
        monitoring.write_files(
            monitoring.render_files(slo_rules(profile), targets), work)
        gateway = f"http://127.0.0.1:{push_port}"
        prometheus = f"http://127.0.0.1:{prom_port}"
        processes.append(subprocess.Popen(
            # Debian's build persists to /var/lib/prometheus/ by default; keep it private.
            [push_bin, f"--web.listen-address=127.0.0.1:{push_port}",
             f"--persistence.file={work / 'pushgateway.data'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        processes.append(subprocess.Popen(
            [prometheus_bin, f"--config.file={work / 'prometheus' / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        simproc.wait_ok(f"{gateway}/-/ready")
        simproc.wait_ok(f"{prometheus}/-/ready")
        started = time.time()

        # Both variants under the same load at the same time, one bench per level, so each
        # level lasts about two minutes (34 requests per concurrent stream) and the 5 m rate
        # windows of the recording rules see each level.
        for level in LEVELS:
            threads = []
            for variant, url in sims.items():
                options = BenchOptions(BenchSettings(concurrency=(level,),
                                                     requests_per_level=34 * level,
                                                     input_words=64, output_tokens=OUTPUT_TOKENS))

                def sweep(variant: str = variant, url: str = url,
                          options: BenchOptions = options) -> None:
                    result = run_bench([Target(variant, url)], options, profile_name="sim")
                    push_report("bench", result.model_dump(mode="json"), gateway)

                threads.append(threading.Thread(target=sweep))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            print(f"level {level} done at +{time.time() - started:.0f}s", flush=True)
        for variant, url in sims.items():
            smoke = run_smoke(SmokeOptions(base_url=url, profile="sim", variant=variant,
                                           slo=profile.slo))
            push_report("smoke", smoke.model_dump(mode="json"), gateway)
        time.sleep(15)  # two more rule evaluations after the last request
        with httpx.Client(base_url=prometheus, timeout=QUERY_TIMEOUT_SECONDS) as client:
            result = app.report(client, args.out, since_seconds=time.time() - started + 30,
                                step=5, plot=view.plot_decode_latency)
        print(f"wrote {result.path}")
        return 0
    finally:
        for sim in local_sims:
            sim.stop()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
