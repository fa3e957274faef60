"""The pinned sglang's own resolution, run for real (the wheel from the cache or PyPI).

1. Every committed record under patches/sglang/<version>/resolved/ equals a fresh resolution of
   its variant (apart from `provenance.run`, the side environment pip happened to assemble), so
   a hand edit or a profile change without `opsctl profile resolve --write-records` fails here.
2. What sglang 0.5.23 resolves for the GPU profile's dense and sparse variants on sm_120.
3. A variant resolved alone equals the same variant resolved in one probe with all others.
4. Offline (no wheel, no index): one line, exit 3, nothing written.

The side environment (transformers as pinned, tokenizers, pillow, ...) is installed by the code
under test into $OPSCTL_WHEEL_CACHE/resolve/ on first use, then reused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opsctl.config import resolve
from opsctl.config.profiles import load_profile
from opsctl.core.errors import EXIT_BUILD
from opsctl.core.paths import project_root, releases_root

GPU_PROFILE = "glm5-nvfp4-rtx6000"


def _comparable(record: dict[str, Any]) -> dict[str, Any]:
    provenance = dict(record["provenance"])
    provenance.pop("run")
    return {**record, "provenance": provenance}


@pytest.fixture(scope="module")
def fresh() -> dict[str, resolve.Resolved]:
    """Every variant of every profile, resolved now (one probe per release and GPU)."""
    deployments = [load_profile(name).resolve(variant) for name in resolve.record_profiles()
                   for variant in load_profile(name).variants]
    return {f"{r.record['profile']}.{r.record['variant']}": r
            for r in resolve.resolve(deployments, resolve.gpu_report)}


def test_committed_records_equal_a_fresh_resolution(fresh: dict[str, resolve.Resolved]) -> None:
    committed = sorted(releases_root().glob(f"*/{resolve.RECORD_DIR}/*.json"))
    assert sorted(r.path for r in fresh.values()) == committed, (
        "records and variants differ: run `opsctl profile resolve --write-records`")
    for item in fresh.values():
        assert _comparable(item.record) == _comparable(json.loads(item.path.read_text())), (
            f"{item.path.name} differs from sglang's own resolution; regenerate it with "
            "`opsctl profile resolve --write-records`")


def test_sglang_resolves_the_sparse_path_for_native_and_keeps_raw_rows_for_baseline(
        fresh: dict[str, resolve.Resolved]) -> None:
    native = fresh[f"{GPU_PROFILE}.native"].record
    assert native["outcome"] == "resolved"
    assert native["provenance"]["transformers"] == native["provenance"]["transformers_pinned"]
    info = native["server_info"]
    assert info["attention backend"] == "dsa"
    assert (info["DSA prefill backend"], info["DSA decode backend"]) == (
        "flashinfer_sparse_mla", "flashinfer_sparse_mla")
    assert native["kv_row"]["bytes"] == 656  # scaled FP8 row
    baseline = fresh[f"{GPU_PROFILE}.baseline"].record["server_info"]
    assert baseline["attention backend"] == "flashinfer"
    assert (baseline["DSA prefill backend"], baseline["DSA decode backend"]) == ("trtllm", "trtllm")
    assert fresh[f"{GPU_PROFILE}.baseline"].record["kv_row"]["bytes"] == 576  # raw FP8 row


def test_the_gpu_reported_decides_the_dsa_default(fresh: dict[str, resolve.Resolved]) -> None:
    """The same variant reported on an sm_90 card alone: sglang picks another path."""
    native = load_profile(GPU_PROFILE).resolve("native")
    alone = resolve.resolve([native], resolve.gpu_report)[0].record
    assert _comparable(alone) == _comparable(fresh[f"{GPU_PROFILE}.native"].record)
    hopper = resolve.resolve([native], lambda d: resolve.gpu_report(
        d, capability="9.0", memory_gb=80))[0].record
    assert hopper["gpu"]["compute_capability"] == "9.0"
    assert hopper["server_info"]["DSA decode backend"] != "flashinfer_sparse_mla"


def test_offline_without_the_wheel_is_one_line_and_exit_3(tmp_path: Path) -> None:
    env = {**os.environ, "OPSCTL_WHEEL_CACHE": str(tmp_path / "cache"), "PIP_NO_INDEX": "1",
           "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(tmp_path / "none"),
           "OPSCTL_PROJECT_DIR": str(project_root())}
    before = sorted(releases_root().glob(f"*/{resolve.RECORD_DIR}/*.json"))
    done = subprocess.run([sys.executable, "-m", "opsctl", "profile", "resolve", "-p", GPU_PROFILE,
                           "-v", "native"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == EXIT_BUILD, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    # What it would download is said first (a note per download), then the one error line:
    lines = done.stderr.splitlines()
    assert lines[0].startswith("note: ") and "sglang 0.5.23" in lines[0], done.stderr
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: pip download sglang==0.5.23 failed")
    assert sorted(releases_root().glob(f"*/{resolve.RECORD_DIR}/*.json")) == before
    # Nothing of the release it could not fetch; the link farm to opsctl's own torch
    # (argspec.resolution.torch_environment: made whole, reused by every later run) may stay.
    left = [p.name for p in (tmp_path / "cache").glob("resolve/*")]
    assert all(name.startswith("torch-") for name in left), left
