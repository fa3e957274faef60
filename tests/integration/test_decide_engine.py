"""`opsctl decide` on the real Docker engine with the simulator image.

A throwaway copy of deploy/sim.yaml mounts a small "weights" directory with the synthetic GSM8K
answer key (as tests/integration/test_gate.py does), so every variant runs the gates the profile
configures: verify, smoke with GSM8K and the long-context probes, then a short sweep. Four
variants: baseline; corrupt (the simulator's corrupt fault: greedy outputs differ from
baseline's, but every absolute gate passes); native (sparse attention: not compared with the
dense ones); inaccurate (baseline answering half of GSM8K wrong: disqualified at smoke).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from simprofile import add_weights, remove_containers, sim_profile_data, write_profile

pytestmark = pytest.mark.docker

DECIDE_TIMEOUT_S = 900  # four variants, two repeats; the simulator is ready in seconds
VARIANTS = "baseline,corrupt,native,inaccurate"


@pytest.fixture()
def decide_profile(tmp_path: Path, free_port) -> Iterator[tuple[Path, str]]:
    """(profile path, profile name); its containers are removed afterwards."""
    data, name = sim_profile_data("it-decide", free_port())
    add_weights(data, tmp_path)
    data["variants"]["inaccurate"] = {
        "description": "baseline answering half of GSM8K wrong (simulated)",
        "env": {**data["variants"]["baseline"]["env"], "OPSCTL_SIM_EVAL_WRONG_SHARE": "0.5"},
    }
    for variant in data["variants"].values():
        variant.setdefault("env", {})["OPSCTL_SIM_ITL_MS"] = "2"  # a quicker smoke and sweep
    yield write_profile(data, tmp_path), name
    remove_containers(name)


def test_decide_disqualifies_reports_the_disagreement_and_recommends(
    opsctl, sim_image: str, decide_profile: tuple[Path, str], tmp_path: Path
) -> None:
    path, name = decide_profile
    out = tmp_path / "run"
    done = opsctl("decide", "--profile", str(path), "--variants", VARIANTS, "--concurrency", "1,4",
                  "--requests", "8", "--out", str(out), "--image", sim_image, "--repeats", "2",
                  timeout=DECIDE_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads((out / "decide.json").read_text())
    records = {r["variant"]: r for r in report["variants"]}
    assert [records[v]["status"] for v in ("baseline", "corrupt", "native")] == ["qualified"] * 3
    inaccurate = records["inaccurate"]
    assert (inaccurate["status"], inaccurate["failed_gate"]) == ("disqualified", "smoke")
    assert "gsm8k" in inaccurate["reason"] and inaccurate["evidence"]
    for record in records.values():
        assert record["verify"].startswith("verified")
        assert record["checkpoint"] and not record["checkpoint"].startswith("unavailable")
        for evidence in record["evidence"]:
            assert (out / evidence).is_file(), evidence
    assert report["schema_version"] == 2 and report["repeats"] == 2
    # Progress on stderr: which variant of how many, the phase, what is left.
    assert "[1/8] variant 1 of 4 (baseline), repeat 1 of 2: up; elapsed " in done.stderr
    for variant in ("baseline", "corrupt", "native"):
        record = records[variant]
        assert [level["concurrency"] for level in record["levels"]] == [1, 4]
        assert [run["repeat"] for run in record["runs"]] == [1, 2]
        for level in record["levels"]:  # pooled over both repeats, with intervals
            assert level["repeats"] == 2 and level["requests"] == 16
            low, high = level["output_tokens_per_s_ci"]
            assert low <= level["output_tokens_per_s"] <= high
            assert level["tpot_p50_ci_ms"] is not None and level["meets_slo"] is not None
        for run in record["runs"]:  # each repeat's per-request records
            folder = (out / run["bench_report"]).parent
            bench = json.loads((out / run["bench_report"]).read_text())
            for level in bench["variants"][0]["levels"]:
                lines = (folder / level["requests_file"]).read_text().splitlines()
                assert len(lines) == 8 and json.loads(lines[0])["ok"] is True
        assert (out / record["bench_report"]).is_file() and record["accuracy"]["passed"]
        assert record["probes"] and all(probe["passed"] for probe in record["probes"])
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    corrupt = pairs[("baseline", "corrupt")]
    assert corrupt["outcome"] == "disagree", corrupt
    assert corrupt["detail"].startswith("corrupt and baseline disagree at request ")
    assert "one of them is wrong; the eval decides" in corrupt["detail"]
    assert pairs[("baseline", "native")]["outcome"] == "not compared"
    assert "sparse attention" in pairs[("baseline", "native")]["detail"]
    if report["winner"] is not None:
        assert report["recommendation"].startswith(f"run {report['winner']}: correct on every gate")
    else:  # baseline and corrupt run the same simulated speed: a tie is the honest verdict
        assert report["tie"] and report["recommendation"].startswith("tie: ")
    page = (out / "decide.md").read_text()
    assert f"**{report['recommendation']}**" in page and "### Disqualified" in page
    # The simulator runs the sim profile's recorded argvs: verify expects what sglang 0.5.23's own
    # resolution recorded, beside what /server_info said.
    native = {f["field"]: f for f in records["native"]["resolved"]}
    assert native["dsa_decode_backend"]["expected"] == "flashinfer_sparse_mla"
    assert native["dsa_decode_backend"]["status"] == "ok"
    assert "## What sglang resolves, and what the server said" in page
    assert report["recommendation"] in done.stdout
    client = docker.from_env()
    assert client.containers.list(all=True, filters={"label": f"opsctl.profile={name}"}) == []
