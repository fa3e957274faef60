"""sglang 0.5.23's HTTP surface as opsctl uses it: routes, auth, JSON shapes, SSE chunks.

Shapes follow ``srt/entrypoints/http_server.py`` and ``srt/entrypoints/openai/`` of the wheel:
chat chunks are built like ``sse_utils.build_sse_content`` (msgspec, ``reasoning_content`` always
present in a delta), usage/other objects like the pydantic models' ``model_dump_json()``;
request ids are bare uuid4 hex, as ``OpenAIServingBase._generate_request_id_base`` returns None.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.sim.config import Behaviour, SimArgs
from opsctl.sim.engine import SIM_MAX_TOTAL_NUM_TOKENS, Engine, RequestTimes, TokenEvent
from opsctl.sim.generate import (
    Plan,
    count_chat_prompt_tokens,
    count_text_tokens,
    message_text,
    prompt_key,
)
from opsctl.sim.metrics import SglangMetrics
from opsctl.sim.wire import CutStream, Request, Response, StreamingResponse, json_response

SGLANG_VERSION = "0.5.23"  # the pinned release whose API this simulates
# sglang's health-probe budget (srt/environ.py SGLANG_HEALTH_CHECK_TIMEOUT, default 20 s).
HEALTH_CHECK_TIMEOUT_ENV = "SGLANG_HEALTH_CHECK_TIMEOUT"
DEFAULT_HEALTH_CHECK_TIMEOUT = 20.0
# Auth exemptions of srt/utils/auth.py decide_request_auth (prefix match), plus the admin API.
AUTH_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics", "/_sim/")
SSE_DONE = b"data: [DONE]\n\n"

log = logging.getLogger("opsctl.sim")


class ApiError(Exception):
    """Answered as sglang's ErrorResponse JSON with the given status."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.err_type = err_type

    def response(self) -> Response:
        return json_response(self.status, {
            "object": "error", "message": str(self), "type": self.err_type,
            "param": None, "code": self.status,
        })


class BehaviourBox:
    """The one mutable holder of the current Behaviour (replaced whole by the admin endpoint)."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.current = behaviour

    def get(self) -> Behaviour:
        return self.current


class Lifecycle:
    """ServerStatus as the endpoints see it: starting, up, or exiting after SIGTERM."""

    def __init__(self, box: BehaviourBox) -> None:
        self._box = box
        self.listening_since: float | None = None
        self.load_seconds = 0.0
        self.exiting = False
        # Set when a health probe times out (ServerStatus.UnHealthy); a later good probe clears it.
        self.unhealthy = False

    def starting(self) -> bool:
        if self.listening_since is None:
            return True
        now = asyncio.get_running_loop().time()
        return now < self.listening_since + self._box.get().warmup_seconds


@dataclass(frozen=True)
class GenerationInput:
    """A generation request reduced to what the engine and the response builders need."""

    model: str
    plan: Plan
    prompt_tokens: int
    stream: bool
    include_usage: bool


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _sse(payload: Any) -> bytes:
    return b"data: " + _json_bytes(payload) + b"\n\n"


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """UsageInfo.model_dump() as UsageProcessor.calculate_token_usage fills it (no cache report)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def _matched(finish: dict[str, Any] | None) -> Any:
    return finish.get("matched") if finish else None


def _positive_int(body: dict[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ApiError(400, f"{key} must be a positive integer")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"{key} must be a number")
    return float(value)


class SimApi:
    """Routes a Request to its handler; everything sglang-visible is decided here."""

    def __init__(
        self,
        args: SimArgs,
        box: BehaviourBox,
        lifecycle: Lifecycle,
        engine: Engine,
        metrics: SglangMetrics | None,
    ) -> None:
        self._args = args
        self._box = box
        self._life = lifecycle
        self._engine = engine
        self._metrics = metrics
        self._error_counter = 0  # generation requests seen under error_rate (deterministic)
        self._model_config = _read_model_config(args.model_path)
        self._routes: dict[str, dict[str, Callable[[Request], Awaitable[Any]]]] = {
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
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/completions": {"POST": self._completions},
            "/generate": {"POST": self._generate, "PUT": self._generate},
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

    def _route(self, request: Request) -> tuple[str, Callable[[Request], Awaitable[Any]]]:
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
        raw = self._args.raw
        return json_response(200, {
            "model_path": self._args.model_path,
            "served_model_name": self._args.served_model_name,
            "tokenizer_path": self._args.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": raw.get("preferred_sampling_params"),
            "weight_version": self._args.weight_version,
            "load_format": raw.get("load_format", "auto"),
            "reasoning_parser": raw.get("reasoning_parser"),
            "tool_call_parser": raw.get("tool_call_parser"),
            "disaggregation_mode": raw.get("disaggregation_mode", "null"),
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self._model_config.get("model_type"),
            "architectures": self._model_config.get("architectures"),
        })

    async def _server_info(self, _: Request) -> Response:
        # build_server_info(): resolved fields + launch_command + scheduler info + kv_events,
        # then startup_time, internal_states, version, frontend. Like 0.5.23 it echoes api_key
        # (sgl-project/sglang#37457): opsctl must never print this response unredacted.
        fields = self._args.echoed_fields()
        startup = self._startup_times()
        state = {
            **fields,
            "world_size": self._args.tp_size,
            "startup_time": startup,
            "effective_max_running_requests_per_dp": self._args.max_running_requests,
            "last_gen_throughput": self._engine.gen_throughput(),
        }
        info = {
            **fields,
            "enable_dp_attention": False,
            "launch_command": " ".join(self._args.argv),
            "status": "ready",
            "max_total_num_tokens": SIM_MAX_TOTAL_NUM_TOKENS,
            "max_req_input_len": min(self._args.context_length, SIM_MAX_TOTAL_NUM_TOKENS) - 1,
            "kv_events": None,
            "startup_time": startup,
            "internal_states": [state],
            "version": SGLANG_VERSION,
            "frontend": "python",
        }
        return json_response(200, info)

    def _startup_times(self) -> dict[str, float]:
        load = self._life.load_seconds
        return {"load_weight": load, "kv_cache_allocation": 0.0, "scheduler_e2e": load,
                "tokenizer_e2e": load}

    async def _metrics_endpoint(self, request: Request) -> Response:
        assert self._metrics is not None
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

    # -- generation -----------------------------------------------------------------------------

    def _admit_generation(self, request: Request) -> dict[str, Any]:
        """Body of a generation request, or ApiError for warm-up, faults and bad JSON."""
        if self._life.starting():
            raise ApiError(503, "The server is still starting (simulated warm-up).",
                           "ServiceUnavailable")
        try:
            body = request.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.")
        behaviour = self._box.get()
        if behaviour.fault == "error_rate":
            before = int(self._error_counter * behaviour.error_rate)
            self._error_counter += 1
            if int(self._error_counter * behaviour.error_rate) > before:
                raise ApiError(500, "Internal server error: simulated failure (error_rate)",
                               "InternalServerError")
        return body

    def _plan(self, prompt: Any, body: dict[str, Any], max_new: int | None,
              temperature: float, ignore_eos: bool) -> Plan:
        behaviour = self._box.get()
        greedy = temperature == 0.0 or body.get("top_k") == 1
        salt = b""
        if not greedy:
            seed = body.get("seed", body.get("sampling_seed"))
            salt = f"seed={seed}".encode() if isinstance(seed, int) else os.urandom(8)
        if behaviour.fault == "corrupt":
            salt += b"|corrupt"
        return Plan.make(prompt_key(prompt, salt), max_new, ignore_eos)

    def _stream_cut_after(self) -> int | None:
        behaviour = self._box.get()
        return behaviour.stream_cut_after if behaviour.fault == "stream_cut" else None

    async def _chat(self, request: Request) -> Response | StreamingResponse:
        body = self._admit_generation(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "Messages cannot be empty.")
        if not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "Each message must be an object.")
        if body.get("n", 1) != 1:
            raise ApiError(400, "The simulator supports n=1 only.")
        max_new = _positive_int(body, "max_completion_tokens", None)
        if max_new is None:
            max_new = _positive_int(body, "max_tokens", None)
        temperature = _temperature(body)
        prompt = [{"role": m.get("role"), "content": message_text(m.get("content"))}
                  for m in messages]
        gen = GenerationInput(
            model=str(body.get("model", "default")),
            plan=self._plan(prompt, body, max_new, temperature, body.get("ignore_eos") is True),
            prompt_tokens=count_chat_prompt_tokens(messages),
            stream=body.get("stream") is True,
            include_usage=_include_usage(body),
        )
        times = Engine.now_times()
        if gen.stream:
            return StreamingResponse(200, self._chat_chunks(gen, times))
        events = await self._collect(gen, times)
        last = events[-1]
        return json_response(200, {
            "id": uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
            "model": gen.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "".join(e.text for e in events),
                            "reasoning_content": None},
                "logprobs": None,
                "finish_reason": last.finish_reason["type"] if last.finish_reason else None,
                "matched_stop": _matched(last.finish_reason),
            }],
            "usage": _usage(gen.prompt_tokens, last.completion_tokens),
            "metadata": {"weight_version": self._args.weight_version},
        })

    async def _chat_chunks(self, gen: GenerationInput, times: RequestTimes
                           ) -> AsyncIterator[bytes]:
        rid = uuid.uuid4().hex
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, matched: Any = None
                  ) -> bytes:
            return _sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                         "model": gen.model,
                         "choices": [{"index": 0, "delta": {"reasoning_content": None, **delta},
                                      "logprobs": None, "finish_reason": finish,
                                      "matched_stop": matched}]})

        last: TokenEvent | None = None
        async for event in self._events(gen, times):
            if event.position == 0:
                yield chunk({"role": "assistant", "content": ""})
            if event.text:
                yield chunk({"content": event.text})
            last = event
        finish = last.finish_reason if last else None
        yield chunk({}, finish["type"] if finish else None, _matched(finish))
        if gen.include_usage:
            completion = last.completion_tokens if last else 0
            yield _sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                        "model": gen.model, "choices": [],
                        "usage": _usage(gen.prompt_tokens, completion)})
        yield SSE_DONE

    def _completion_prompt(self, body: dict[str, Any]) -> tuple[Any, int]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str) and prompt:
            return prompt, count_text_tokens(prompt)
        if isinstance(prompt, list) and prompt and all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return prompt, len(prompt)
        if prompt in (None, "", []):
            raise ApiError(400, "Prompt cannot be empty")
        raise ApiError(400, "The simulator takes one prompt: a string or a list of token ids.")

    async def _completions(self, request: Request) -> Response | StreamingResponse:
        body = self._admit_generation(request)
        prompt, prompt_tokens = self._completion_prompt(body)
        if body.get("n", 1) != 1:
            raise ApiError(400, "The simulator supports n=1 only.")
        max_new = _positive_int(body, "max_tokens", 16)  # CompletionRequest.max_tokens = 16
        temperature = _temperature(body)
        gen = GenerationInput(
            model=str(body.get("model", "default")),
            plan=self._plan(prompt, body, max_new, temperature, body.get("ignore_eos") is True),
            prompt_tokens=prompt_tokens,
            stream=body.get("stream") is True,
            include_usage=_include_usage(body),
        )
        times = Engine.now_times()
        if gen.stream:
            return StreamingResponse(200, self._completion_chunks(gen, times))
        events = await self._collect(gen, times)
        last = events[-1]
        return json_response(200, {
            "id": uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
            "model": gen.model,
            "choices": [{
                "index": 0, "text": "".join(e.text for e in events), "logprobs": None,
                "finish_reason": last.finish_reason["type"] if last.finish_reason else None,
                "matched_stop": _matched(last.finish_reason),
            }],
            "usage": _usage(gen.prompt_tokens, last.completion_tokens),
            "metadata": {"weight_version": self._args.weight_version},
        })

    async def _completion_chunks(self, gen: GenerationInput, times: RequestTimes
                                 ) -> AsyncIterator[bytes]:
        rid = uuid.uuid4().hex
        created = int(time.time())
        last: TokenEvent | None = None
        async for event in self._events(gen, times):
            finish = event.finish_reason
            yield _sse({"id": rid, "object": "text_completion", "created": created,
                        "model": gen.model,
                        "choices": [{"index": 0, "text": event.text, "logprobs": None,
                                     "finish_reason": finish["type"] if finish else None,
                                     "matched_stop": _matched(finish)}],
                        "usage": None})
            last = event
        if gen.include_usage:
            usage = _usage(gen.prompt_tokens, last.completion_tokens if last else 0)
            # The completions usage chunk is dumped with exclude_none=True.
            yield _sse({"id": rid, "object": "text_completion", "created": created,
                        "model": gen.model, "choices": [],
                        "usage": {k: v for k, v in usage.items() if v is not None}})
        yield SSE_DONE

    async def _generate(self, request: Request) -> Response | StreamingResponse:
        body = self._admit_generation(request)
        text, input_ids = body.get("text"), body.get("input_ids")
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        if isinstance(text, str) and text:
            prompt: Any = text
            prompt_tokens = count_text_tokens(text)
        elif isinstance(input_ids, list) and input_ids and all(
                isinstance(t, int) and not isinstance(t, bool) for t in input_ids):
            prompt, prompt_tokens = input_ids, len(input_ids)
        else:
            raise ApiError(400, "The simulator takes one non-empty text or input_ids list.")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise ApiError(400, "sampling_params must be an object")
        max_new = _positive_int(params, "max_new_tokens", 128)  # SamplingParams default
        temperature = _temperature(params)
        gen = GenerationInput(
            model=self._args.served_model_name,
            plan=self._plan(prompt, params, max_new, temperature,
                            params.get("ignore_eos") is True),
            prompt_tokens=prompt_tokens,
            stream=body.get("stream") is True,
            include_usage=False,
        )
        times = Engine.now_times()
        rid = uuid.uuid4().hex
        if gen.stream:
            return StreamingResponse(200, self._generate_chunks(gen, times, rid))
        events = await self._collect(gen, times)
        return json_response(200, self._native_output(gen, times, rid, events))

    def _native_output(self, gen: GenerationInput, times: RequestTimes, rid: str,
                       events: list[TokenEvent]) -> dict[str, Any]:
        """tokenizer_manager's out dict: cumulative text and ids, meta_info of the last step."""
        last = events[-1]
        meta: dict[str, Any] = {
            "id": rid, "finish_reason": last.finish_reason,
            "prompt_tokens": gen.prompt_tokens, "weight_version": self._args.weight_version,
            "num_retractions": 0,
        }
        if self._metrics is not None:
            meta["request_received_ts"] = times.received_wall
        if last.finish_reason is not None:
            elapsed = asyncio.get_running_loop().time() - times.received
            meta["e2e_latency"] = elapsed
        meta.update(reasoning_tokens=0, completion_tokens=last.completion_tokens,
                    cached_tokens=0)
        return {"text": "".join(e.text for e in events),
                "output_ids": [e.token_id for e in events], "meta_info": meta}

    async def _generate_chunks(self, gen: GenerationInput, times: RequestTimes, rid: str
                               ) -> AsyncIterator[bytes]:
        events: list[TokenEvent] = []
        async for event in self._events(gen, times):
            events.append(event)
            yield _sse(self._native_output(gen, times, rid, events))
        yield SSE_DONE

    # -- engine plumbing ------------------------------------------------------------------------

    async def _events(self, gen: GenerationInput, times: RequestTimes
                      ) -> AsyncIterator[TokenEvent]:
        """Engine events for a stream, cut after N tokens under the stream_cut fault."""
        cut_after = self._stream_cut_after()
        if cut_after == 0:
            raise CutStream()
        source = self._engine.generate(gen.plan, gen.prompt_tokens, gen.stream, times)
        try:
            async for event in source:
                yield event
                if cut_after is not None and event.completion_tokens >= cut_after:
                    raise CutStream()
        finally:
            await source.aclose()

    async def _collect(self, gen: GenerationInput, times: RequestTimes) -> list[TokenEvent]:
        source = self._engine.generate(gen.plan, gen.prompt_tokens, gen.stream, times)
        try:
            return [event async for event in source]
        finally:
            await source.aclose()


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


def _temperature(body: dict[str, Any]) -> float:
    """Request temperature; absent or null means sglang's default of 1.0 (sampling)."""
    value = body.get("temperature")
    return 1.0 if value is None else _number(value, "temperature")


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _health_check_timeout() -> float:
    raw = os.environ.get(HEALTH_CHECK_TIMEOUT_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_HEALTH_CHECK_TIMEOUT
    except ValueError:
        return DEFAULT_HEALTH_CHECK_TIMEOUT


def _read_model_config(model_path: str) -> dict[str, Any]:
    """model_type/architectures from <model_path>/config.json when the path exists here."""
    try:
        data = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
