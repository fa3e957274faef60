"""A copy of deploy/sim.yaml for bench tests that need a profile without a container: optionally
with a model directory on this host (model.host_path), and a bench plan (BenchOptions) against a
URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from opsctl.core.paths import project_root
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.settings import BenchSettings


def sim_profile(tmp_path: Path, host_path: Path | None) -> str:
    """The path of a sim profile copy whose model is mounted from `host_path` (None: none)."""
    data: dict[str, Any] = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    if host_path is not None:
        data["model"]["host_path"] = str(host_path)
    path = tmp_path / "sim-tok.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def bench_request(profile: str, url: str, **changes: Any) -> BenchOptions:
    """One level of two requests with token-exact random prompts, unless `changes` say else."""
    values: dict[str, Any] = dict(
        profile=profile, variants=(), base_urls=(url,), concurrency=(1,), requests_per_level=2,
        input_words=4, output_tokens=2, model=None, api="completions", api_key=None,
        request_timeout_s=5.0, out_dir=None, gateway=None, dataset="random")
    values.update(changes)
    settings = {
        name: values.pop(name) for name in list(values) if name in BenchSettings.model_fields
    }
    return BenchOptions(BenchSettings(**settings), **values)
