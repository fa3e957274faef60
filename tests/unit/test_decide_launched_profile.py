"""The launched profile is the judged profile: a `decide` whose profile file is edited between
two variants smokes and sweeps every variant by the profile it launched (its SLO, its evals),
never by the file as it is now. The real composition root's traffic room runs; only the
sending of requests is replaced (no server is reached).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from fakes import FakeClock, FakeEngine, FakeSglang

from opsctl.cli.root import Root
from opsctl.config.profiles import Deployment, load_profile
from opsctl.core import labels
from opsctl.core.paths import project_root
from opsctl.decide import app as decide_app
from opsctl.decide.app import DecideRequest
from opsctl.decide.settings import DecideSettings
from opsctl.deploy.launch import Launch
from opsctl.traffic.bench.records import record_level
from opsctl.traffic.bench.report import BenchReport, ClientInfo, VariantResult
from opsctl.traffic.bench.stats import summarize
from opsctl.traffic.bench.sweep import request_files
from opsctl.traffic.client import RequestResult
from opsctl.traffic.smoke_report import CheckResult, SmokeReport
from opsctl.verify.app import VerifyResult
from opsctl.verify.checks import FieldCheck

IMAGE = "opsctl/sim:test"


def _verify(deployment: Deployment, url: str, log_text: str) -> VerifyResult:
    return VerifyResult(base_url=url, profile=deployment.profile.name,
                        variant=deployment.variant, sglang_version="0.5.23",
                        checks=[FieldCheck("tp_size", "8", "8", "ok", "argv", "/server_info")])


class Sent:
    """What smoke and bench were asked to send (their options), in order; the first sweep edits
    the profile file, as a user might during a two-hour decide."""

    def __init__(self, profile_file: Path) -> None:
        self.profile_file = profile_file
        self.smoke: list[Any] = []
        self.bench: list[Any] = []

    def run_smoke(self, options: Any, client_factory: Any) -> SmokeReport:
        self.smoke.append(options)
        check = CheckResult(name="generations", status="pass", duration_s=0.0, detail="ok")
        return SmokeReport(started_at="2026-11-29T11:00:00+00:00", duration_s=1.0,
                           base_url=options.base_url, profile=options.profile,
                           variant=options.variant, checks=[check], passed=True)

    def run_bench(self, targets: Any, options: Any, **_: Any) -> BenchReport:
        self.bench.append(options)
        if len(self.bench) == 1:
            _edit(self.profile_file)
        result = RequestResult(ok=True, ttft_s=0.1, e2e_s=0.5, output_tokens=11,
                               itl_s=[0.04] * 10, token_source="usage", finish_reason="length",
                               started=0.0)
        level = summarize(1, [result] * 4, [], duration_s=0.5)
        level._records = record_level([result] * 4, 0.0, None)
        run = VariantResult(variant=targets[0].label, base_url=targets[0].base_url,
                            levels=[level])
        report = BenchReport(started_at="2026-11-29T11:00:00+00:00", duration_s=1.0,
                             config=options.config(),
                             client=ClientInfo(hostname="h", platform="p", python="3",
                                               cpu_count=1),
                             variants=[run], failed_requests=0, passed=True)
        report._requests = request_files(report.variants)
        return report


def _edit(path: Path) -> None:
    """Another SLO and no evals: what the file says after the first variant was swept."""
    data = yaml.safe_load(path.read_text())
    data["slo"]["tpot"]["threshold_ms"] = 999
    data["slo"]["ttft"]["threshold_ms"] = 9999
    data.pop("eval")
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_profile_edited_mid_decide_is_not_what_the_variants_are_judged_by(
        tmp_path: Path) -> None:
    profile_file = tmp_path / "sim.yaml"
    shutil.copy(project_root() / "deploy" / "sim.yaml", profile_file)
    data = yaml.safe_load(profile_file.read_text())
    for section in ("dataset", "shots_from"):  # the eval files, found from the copy
        data["eval"]["gsm8k"][section] = str(project_root() / data["eval"]["gsm8k"][section])
    profile_file.write_text(yaml.safe_dump(data, sort_keys=False))
    profile = load_profile(str(profile_file))
    sent = Sent(profile_file)
    engine = FakeEngine(images={IMAGE: {labels.PATCH_SHA256: "abc"}})
    launch = Launch(engine=engine, image_for=lambda _: IMAGE, verify=_verify, state=None,
                    http=FakeSglang(profile.model.served_name, ["ready"]).client,
                    clock=FakeClock(), preflight=None)
    traffic = replace(Root().traffic(), send_smoke=sent.run_smoke, send_bench=sent.run_bench,
                      plot=lambda report, out: [])
    result = decide_app.decide(
        profile, DecideRequest(variants=("baseline", "gathercast"), out_dir=tmp_path / "out",
                               settings=DecideSettings(concurrency=(1,), requests_per_level=4,
                                                       repeats=1)),
        launch=launch, traffic=traffic)
    assert load_profile(str(profile_file)).slo.tpot.threshold_ms == 999  # the file did change
    assert [o.variant for o in sent.smoke] == ["baseline", "gathercast"]
    for options in sent.smoke:  # smoke's SLO and evals: the launched profile's
        assert (options.slo.tpot.threshold_ms, options.slo.ttft.threshold_ms) == (60, 600)
        assert options.evals.gsm8k is not None and options.evals.gsm8k.threshold == 0.9
    for options in sent.bench:  # goodput judged by the launched SLO
        assert (options.slo.tpot.threshold_ms, options.slo.ttft.threshold_ms) == (60, 600)
    swept = [BenchReport.model_validate_json((tmp_path / "out" / d / "bench.json").read_text())
             for d in ("01-baseline", "02-gathercast")]
    assert [(r.config.slo_tpot_ms, r.config.slo_ttft_ms) for r in swept] == [(60, 600)] * 2
    assert (result.report.slo_tpot_ms, result.report.slo_ttft_ms) == (60, 600)
    assert result.error is None
