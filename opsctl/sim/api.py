"""sglang's HTTP surface as opsctl uses it: routes, auth, health, model and server info, admin.

Paths, auth exemptions and JSON shapes follow ``srt/entrypoints/http_server.py`` and
``srt/utils/auth.py`` of the pinned release; the generation endpoints live in
``opsctl.sim.completions``, the info payloads in ``opsctl.sim.info``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from opsctl.sim.completions import Generation
from opsctl.sim.config import SimArgs
from opsctl.sim.engine import Engine
from opsctl.sim.info import ServerView
from opsctl.sim.metrics import SglangMetrics
from opsctl.sim.profiler import SimProfiler
from opsctl.sim.state import ApiError, BehaviourBox, Lifecycle
from opsctl.sim.wire import Request, Response, StreamingResponse, json_response

# sglang's health-probe budget (srt/environ.py SGLANG_HEALTH_CHECK_TIMEOUT, default 20 s).
HEALTH_CHECK_TIMEOUT_ENV = "SGLANG_HEALTH_CHECK_TIMEOUT"
DEFAULT_HEALTH_CHECK_TIMEOUT = 20.0
# Auth exemptions of srt/utils/auth.py decide_request_auth (prefix match), plus the admin API.
AUTH_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics", "/_sim/")

log = logging.getLogger("opsctl.sim")

Handler = Callable[[Request], Awaitable[Any]]


class SimApi:
    """Routes a Request to its handler; everything sglang-visible is decided here."""

    def __init__(
        self,
        view: ServerView,
        box: BehaviourBox,
        lifecycle: Lifecycle,
        engine: Engine,
        metrics: SglangMetrics | None,
    ) -> None:
        self._view = view
        self._args: SimArgs = view.args
        self._box = box
        self._life = lifecycle
        self._engine = engine
        self._metrics = metrics
        gen = Generation(view.args, box, lifecycle, engine, metrics)
        prof = SimProfiler(view, box, engine)
        self._routes: dict[str, dict[str, Handler]] = {
            "/ready": {"GET": self._ready},
            "/health": {"GET": self._health},
            "/health_generate": {"GET": self._health},
            "/model_info": {"GET": self._model_info},
            "/get_model_info": {"GET": _deprecated("/get_model_info", "/model_info",
                                                   self._model_info)},
            "/server_info": {"GET": self._server_info},
            "/get_server_info": {"GET": _deprecated("/get_server_info", "/server_info",
                                                    self._server_info)},
            "/v1/models": {"GET": self._models},
            "/v1/chat/completions": {"POST": gen.chat},
            "/v1/completions": {"POST": gen.completions},
            "/generate": {"POST": gen.generate, "PUT": gen.generate},
            "/start_profile": {"GET": prof.start, "POST": prof.start},
            "/stop_profile": {"GET": prof.stop, "POST": prof.stop},
            "/_sim/config": {"GET": self._get_config, "POST": self._post_config},
        }

    # -- dispatch -------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response | StreamingResponse:
        if not self._authorized(request):
            return json_response(401, {"error": "Unauthorized"})
        endpoint, handler = self._route(request)
        if self._metrics is not None:
            self._metrics.http_started(endpoint, request.method)
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except ApiError as exc:
            status = exc.status
            return exc.response()
        finally:
            if self._metrics is not None:
                self._metrics.http_finished(endpoint, request.method, status)

    def _authorized(self, request: Request) -> bool:
        key = self._args.api_key
        if not key or request.method == "OPTIONS":
            return True
        if request.path.startswith(AUTH_EXEMPT_PREFIXES):
            return True
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token, key)

    def _route(self, request: Request) -> tuple[str, Handler]:
        path = request.path
        if self._metrics is not None and path.startswith("/metrics"):
            return "/metrics", self._metrics_endpoint if request.method == "GET" else _not_allowed
        if path.startswith("/v1/models/"):
            return "/v1/models/{model:path}", (
                self._retrieve_model if request.method == "GET" else _not_allowed)
        methods = self._routes.get(path)
        if methods is None:
            return path, _not_found
        return path, methods.get(request.method, _not_allowed)

    # -- health and info ------------------------------------------------------------------------

    async def _ready(self, _: Request) -> Response:
        life = self._life
        up = not life.starting() and not life.exiting and not life.unhealthy
        return Response(200 if up else 503, content_type=None)

    async def _health(self, _: Request) -> Response:
        if self._life.exiting or self._life.starting():
            return Response(503, content_type=None)
        behaviour = self._box.get()
        if behaviour.fault == "hang":
            # A stuck scheduler: sglang waits out its probe budget, then answers 503.
            await asyncio.sleep(_health_check_timeout())
            self._life.unhealthy = True
            return Response(503, content_type=None)
        if behaviour.health_delay_ms > 0:
            await asyncio.sleep(behaviour.health_delay_ms / 1000.0)
        self._life.unhealthy = False
        return Response(200, content_type=None)

    def _model_card(self, model_id: str) -> dict[str, Any]:
        # protocol.py ModelCard; created is stamped per response as its default_factory does.
        return {"id": model_id, "object": "model", "created": int(time.time()),
                "owned_by": "sglang", "root": model_id, "parent": None,
                "max_model_len": self._args.context_length}

    async def _models(self, _: Request) -> Response:
        names = [self._args.served_model_name, *self._box.get().extra_models]
        return json_response(200, {"object": "list",
                                   "data": [self._model_card(name) for name in names]})

    async def _retrieve_model(self, request: Request) -> Response:
        model = request.path[len("/v1/models/"):]
        if model not in (self._args.served_model_name, *self._box.get().extra_models):
            return json_response(404, {"error": {
                "message": f"The model '{model}' does not exist",
                "type": "invalid_request_error", "param": "model", "code": "model_not_found"}})
        return json_response(200, self._model_card(model))

    async def _model_info(self, _: Request) -> Response:
        return json_response(200, self._view.model_info(self._box.get().fault))

    async def _server_info(self, _: Request) -> Response:
        return json_response(200, self._view.server_info(
            self._box.get().fault, self._life.startup_times(), self._engine.gen_throughput()))

    async def _metrics_endpoint(self, request: Request) -> Response:
        if self._metrics is None:  # routed only with --enable-metrics
            return await _not_found(request)
        body, headers = self._metrics.render(
            request.headers.get("accept", ""), request.headers.get("accept-encoding", ""))
        content_type = headers.pop("content-type")
        return Response(200, body, content_type=content_type, headers=headers)

    # -- admin ----------------------------------------------------------------------------------

    async def _get_config(self, _: Request) -> Response:
        return json_response(200, self._box.get().as_json())

    async def _post_config(self, request: Request) -> Response:
        try:
            patch = request.json()
        except (ValueError, UnicodeDecodeError) as exc:
            return json_response(400, {"error": f"body is not JSON: {exc}"})
        if not isinstance(patch, dict):
            return json_response(400, {"error": "body must be a JSON object"})
        try:
            self._box.current = self._box.get().updated(patch)
        except ValueError as exc:
            return json_response(400, {"error": str(exc)})
        return json_response(200, self._box.get().as_json())


def _deprecated(old: str, new: str, handler: Callable[[Request], Awaitable[Response]]
                ) -> Callable[[Request], Awaitable[Response]]:
    """An old alias that logs sglang's deprecation warning, then answers like the new path."""

    async def alias(request: Request) -> Response:
        log.warning(f"Endpoint '{old}' is deprecated and will be removed in a future version. "
                    f"Please use '{new}' instead.")
        return await handler(request)

    return alias


async def _not_found(_: Request) -> Response:
    return json_response(404, {"detail": "Not Found"})


async def _not_allowed(_: Request) -> Response:
    return json_response(405, {"detail": "Method Not Allowed"})


def _health_check_timeout() -> float:
    raw = os.environ.get(HEALTH_CHECK_TIMEOUT_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_HEALTH_CHECK_TIMEOUT
    except ValueError:
        return DEFAULT_HEALTH_CHECK_TIMEOUT

