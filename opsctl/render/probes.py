"""The serving pods' probes, meaning what `opsctl up`'s readiness means (deploy/readiness.py).

- startup: sglang's `/health` (HTTP GET). Connection refused while the weights load and 503 while
  the server is Starting both count as "not yet"; sglang turns Up only after its own warm-up
  request generated (0.5.23 entrypoints/http_server.py:2493-2502), so a pod past start-up has
  generated once. Its budget, failureThreshold x periodSeconds, covers the profile's
  readiness.timeout_seconds, and liveness and readiness only start after it passed.
- readiness (the leader of each unit), on a release with a non-generating readiness endpoint
  (config.releases `ready_path`; 0.5.23's `GET /ready`, http_server.py:714-718): an HTTP probe.
  It answers 200 while the tokenizer manager is Up, not paused and not shutting down, 503
  otherwise, without entering the scheduler, so a server busy with long prefills stays in the
  router's rotation (the generating `/health_generate` waits for the scheduler and has been
  seen failing under long GLM-5 prefills, sglang#22511, which would flap pods out of it). It
  is exempt from the API key (utils/auth.py:101-105). The served name needs no check here: it
  is the argv's --served-model-name, fixed when the pod was rendered.
  On a release without one (0.5.9 serves only /health and /health_generate,
  entrypoints/http_server.py:464-465): the exec probe `up`'s readiness is, python3's urllib
  inside the container: `/health_generate` answers 200 AND `/v1/models` lists the served
  name, with the API key from the container's env when the profile names one.
  The router only sends traffic to pods whose Ready condition is true (its service discovery).
- liveness: `/health` with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false (the container env
  `up` sets, runspec.py): it answers from the HTTP process at once and never enters the
  scheduler, so a server busy with long generations still answers; a pod is restarted only
  after the profile's health_retries checks in a row fail, health_interval_seconds apart, each
  given health_timeout_seconds (the values of `up`'s Docker HEALTHCHECK, which never kills;
  30 s x 3 and 10 s each in the shipped profiles). A generating check is never liveness: a
  prefill longer than its timeout would restart a healthy 8-GPU server and reload its weights.
  A hung scheduler is sglang's own watchdog's to kill (server.watchdog_timeout).
- workers of a multi-host unit (node rank > 0) run no tokenizer and no API: sglang starts a
  stand-in HTTP server on the same port that answers `/health` 200 once their schedulers are
  ready (launch_dummy_health_check_server: 0.5.23
  entrypoints/engine.py:1234-1285), so their startup, readiness and liveness are `/health`.
"""

from __future__ import annotations

import math
from typing import Any

from opsctl.config.profiles import Deployment
from opsctl.config.releases import RELEASES
from opsctl.config.runspec import HEALTH_PATH

PORT_NAME = "http"
STARTUP_PERIOD_SECONDS = 10
READY_PERIOD_SECONDS = 10
READY_FAILURES = 3
# sglang's /health_generate waits up to SGLANG_HEALTH_CHECK_TIMEOUT (default 20 s: 0.5.23
# entrypoints/http_server.py:218) for the scheduler; give it 5 s more, and
# /v1/models opsctl's own 10 s (readiness.PROBE_TIMEOUT_SECONDS).
GENERATE_WAIT_SECONDS = 25
MODELS_WAIT_SECONDS = 10
READY_TIMEOUT_SECONDS = GENERATE_WAIT_SECONDS + MODELS_WAIT_SECONDS + 5

_READY_CODE = f"""\
import json, os, sys, urllib.request as u
base, name = sys.argv[1], sys.argv[2]
key = os.environ.get(sys.argv[3], "") if sys.argv[3:] else ""
opener = u.build_opener(u.ProxyHandler({{}}))
headers = {{"Authorization": "Bearer " + key}} if key else {{}}
def get(path, timeout):
    return opener.open(u.Request(base + path, headers=headers), timeout=timeout)
if get("/health_generate", {GENERATE_WAIT_SECONDS}).status != 200:
    sys.exit(1)
models = json.load(get("/v1/models", {MODELS_WAIT_SECONDS})).get("data") or []
sys.exit(0 if name in [m.get("id") for m in models if isinstance(m, dict)] else 1)
"""


def _http(path: str) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT_NAME}}


def startup(deployment: Deployment) -> dict[str, Any]:
    budget = deployment.profile.readiness.timeout_seconds
    return {**_http(HEALTH_PATH), "periodSeconds": STARTUP_PERIOD_SECONDS,
            "timeoutSeconds": deployment.profile.container.health_timeout_seconds,
            "failureThreshold": max(1, math.ceil(budget / STARTUP_PERIOD_SECONDS))}


def liveness(deployment: Deployment) -> dict[str, Any]:
    container = deployment.profile.container
    return {**_http(HEALTH_PATH), "periodSeconds": container.health_interval_seconds,
            "timeoutSeconds": container.health_timeout_seconds,
            "failureThreshold": container.health_retries}


def ready_path(deployment: Deployment) -> str | None:
    """The pinned release's non-generating readiness endpoint, or None where none is known."""
    release = RELEASES.get(deployment.image.sglang_version)
    return release.ready_path if release else None


def serving_readiness(deployment: Deployment) -> dict[str, Any]:
    """HTTP GET on the release's readiness endpoint; without one, the exec probe
    (/health_generate 200 and /v1/models listing the served name)."""
    path = ready_path(deployment)
    if path is not None:
        return {**_http(path), "periodSeconds": READY_PERIOD_SECONDS,
                "timeoutSeconds": deployment.profile.container.health_timeout_seconds,
                "failureThreshold": READY_FAILURES}
    server = deployment.server
    # Inside the pod: the server listens on every interface (serving.py refuses anything else).
    url = f"http://127.0.0.1:{server.port}"
    key = [server.api_key_env] if server.api_key_env else []
    return {"exec": {"command": ["python3", "-c", _READY_CODE, url,
                                 deployment.model.served_name, *key]},
            "periodSeconds": READY_PERIOD_SECONDS, "timeoutSeconds": READY_TIMEOUT_SECONDS,
            "failureThreshold": READY_FAILURES}


def worker_readiness(deployment: Deployment) -> dict[str, Any]:
    return {**_http(HEALTH_PATH), "periodSeconds": READY_PERIOD_SECONDS,
            "timeoutSeconds": deployment.profile.container.health_timeout_seconds,
            "failureThreshold": READY_FAILURES}
