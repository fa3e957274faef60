"""What `render k8s` puts into containers, run for real: the router argv through sglang-router's
own parser (the wheel from PyPI, via the wheel cache), and the serving pods' readiness probes
against the simulator: the HTTP one on the release's /ready, and the exec one a release without
it gets (it must mean what `opsctl up` means by ready)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import SimServer

from opsctl.config.profiles import Deployment, load_profile
from opsctl.core import wheels
from opsctl.render.app import render_objects
from opsctl.render.router import ROUTER_VERSION, router_args
from opsctl.render.target import Target

TWO_HOSTS = str(Path(__file__).parent.parent / "fixtures" / "profiles" / "glm5-2node.yaml")
# Parses the router's argv with its own RouterArgs, as sglang_router.launch_router does, and
# prints what the router would run with. Only argparse, the dataclass and the Rust extension load.
_PARSE = """
import argparse, json, sys
sys.path.insert(0, sys.argv[1])
from sglang_router.router_args import RouterArgs
parser = argparse.ArgumentParser()
RouterArgs.add_cli_args(parser, use_router_prefix=False)
args = RouterArgs.from_cli_args(parser.parse_args(sys.argv[2:]), use_router_prefix=False)
print(json.dumps({key: getattr(args, key) for key in (
    "host", "port", "policy", "service_discovery", "selector", "service_discovery_port",
    "service_discovery_namespace", "prometheus_host", "prometheus_port")}))
"""


@pytest.fixture(scope="module")
def router_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sglang-router")
    with zipfile.ZipFile(wheels.fetch("sglang-router", ROUTER_VERSION)) as wheel:
        wheel.extractall(root)
    return root


@pytest.mark.parametrize("profile", ["glm5-nvfp4-rtx6000", TWO_HOSTS])
def test_router_argv_parses_with_the_real_router(router_package: Path, profile: str) -> None:
    deployment = load_profile(profile).resolve("gathercast")
    target = Target(deployment=deployment, image="IMAGE", router_image="IMAGE", replicas=2,
                    namespace="llm", name="glm5")
    argv = router_args(target)
    assert argv[:3] == ["python3", "-m", "sglang_router.launch_router"]
    done = subprocess.run([sys.executable, "-I", "-c", _PARSE, str(router_package), *argv[3:]],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    parsed = json.loads(done.stdout)
    selector = {
        item.split("=", 1)[0]: item.split("=", 1)[1]
        for item in argv[argv.index("--selector") + 1 : argv.index("--service-discovery-port")]
    }
    assert parsed == {"host": "0.0.0.0", "port": 30000, "policy": "cache_aware",
                      "service_discovery": True, "selector": selector,
                      "service_discovery_port": deployment.server.port,
                      "service_discovery_namespace": "llm", "prometheus_host": "0.0.0.0",
                      "prometheus_port": 29000}


def _sim(version: str | None = None, key: bool = False) -> Deployment:
    """The sim profile's gathercast, on another release (`version`) or with an API key."""
    deployment = load_profile("sim").resolve("gathercast")
    server = deployment.server
    if key:
        server = server.model_copy(update={"api_key_env": "OPSCTL_API_KEY"})
    if version is not None:
        server = server.model_copy(update={"disable_prefill_cuda_graph": False})
        image = deployment.image.model_copy(update={"sglang_version": version})
        deployment = deployment.model_copy(update={"image": image})
    return deployment.model_copy(update={"server": server})


def _readiness(deployment: Deployment) -> dict[str, Any]:
    objects = render_objects(deployment, "IMAGE")
    server_obj = next(obj for obj in objects if obj["kind"] == "Deployment")
    probe: dict[str, Any] = server_obj["spec"]["template"]["spec"]["containers"][0][
        "readinessProbe"]
    return probe


def _http_probe(url: str, deployment: Deployment) -> int:
    """The rendered HTTP readiness probe as the kubelet runs it: a GET without headers,
    success for 200-399 (the simulator's loopback URL for the pod's port)."""
    get = _readiness(deployment)["httpGet"]
    assert get["port"] == "http"
    try:
        with httpx.Client(timeout=10.0, trust_env=False) as client:
            return client.get(url + get["path"]).status_code
    except httpx.HTTPError:
        return 0


def _probe(url: str, served: str, key: str | None = None) -> int:
    """The rendered exec readiness probe (a release without a readiness endpoint) run as the
    kubelet would (URL swapped for the simulator's loopback port; `key` the API key in the
    container's env)."""
    command = _readiness(_sim("0.5.15", key=key is not None))["exec"]["command"]
    assert command[3:5] == ["http://127.0.0.1:30000", "glm-5"]
    argv = [sys.executable, *command[1:3], url, served, *command[5:]]
    env = {"PATH": os.environ["PATH"], **({"OPSCTL_API_KEY": key} if key else {})}
    return subprocess.run(argv, capture_output=True, timeout=60, check=False, env=env).returncode


def test_http_readiness_probe_is_ready_once_up_and_needs_no_key(
        sim_server: Callable[..., SimServer]) -> None:
    ready = sim_server(args=["--served-model-name", "glm-5", "--api-key", "k3y"])
    assert _http_probe(ready.url, _sim()) == 200
    assert _http_probe(ready.url, _sim(key=True)) == 200  # exempt from the key, as in sglang
    warming = sim_server(env={"OPSCTL_SIM_WARMUP_SECONDS": "600"},
                         args=["--served-model-name", "glm-5"], wait="listen")
    assert _http_probe(warming.url, _sim()) == 503  # not ready while warming up


def test_exec_readiness_probe_passes_only_when_up_would_call_it_ready(
        sim_server: Callable[..., SimServer]) -> None:
    ready = sim_server(args=["--served-model-name", "glm-5"])
    assert _probe(ready.url, "glm-5") == 0
    assert _probe(ready.url, "another-model") != 0  # healthy, but not serving the name
    warming = sim_server(env={"OPSCTL_SIM_WARMUP_SECONDS": "600"},
                         args=["--served-model-name", "glm-5"], wait="listen")
    assert _probe(warming.url, "glm-5") != 0  # /health_generate answers 503 while warming


def test_exec_readiness_probe_sends_the_api_key_from_the_env(
        sim_server: Callable[..., SimServer]) -> None:
    guarded = sim_server(args=["--served-model-name", "glm-5", "--api-key", "k3y"], wait="listen")
    assert _probe(guarded.url, "glm-5", key="k3y") == 0
    assert _probe(guarded.url, "glm-5", key="wrong") != 0  # /v1/models refuses it
