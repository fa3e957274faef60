"""The generation endpoints: /v1/chat/completions, /v1/completions and native /generate.

Shapes follow ``srt/entrypoints/openai/`` and ``srt/entrypoints/http_server.py`` of sglang
0.5.23: the pydantic models' ``model_dump_json()`` (the completions usage chunk with
``exclude_none=True``), and for the usage, the chat message and chat chunks (0.5.23 builds them
with msgspec's ``sse_utils.build_sse_content``) ``opsctl.sim.shapes``; request ids
are bare uuid4 hex, as ``OpenAIServingBase._generate_request_id_base`` returns None.
Every request's output is decided up front by ``_plan`` (opsctl.sim.generate).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from opsctl.sim import shapes
from opsctl.sim.config import SimArgs
from opsctl.sim.engine import Engine, RequestTimes, TokenEvent
from opsctl.sim.evalmode import eval_plan
from opsctl.sim.generate import (
    Plan,
    count_chat_prompt_tokens,
    count_text_tokens,
    message_text,
    prompt_key,
)
from opsctl.sim.metrics import SglangMetrics
from opsctl.sim.state import INVALID_REQUEST, ApiError, BehaviourBox, Lifecycle
from opsctl.sim.wire import CutStream, Request, Response, StreamingResponse, json_response

SSE_DONE = b"data: [DONE]\n\n"


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


def _matched(finish: dict[str, Any] | None) -> Any:
    return finish.get("matched") if finish else None


def _positive_int(body: dict[str, Any], key: str, default: int | None,
                  model_checks_sign: bool = False) -> int | None:
    """A token limit; not an integer is the request model's rejection, below 1 is the model's
    where it has a validator for it (``model_checks_sign``: CompletionRequest.max_tokens)."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{key} must be a positive integer", INVALID_REQUEST)
    if value < 1:
        raise ApiError(400, f"{key} must be a positive integer",
                       INVALID_REQUEST if model_checks_sign else "BadRequestError")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"{key} must be a number", INVALID_REQUEST)
    return float(value)


class Generation:
    """Runs generation requests through the engine and shapes sglang's answers."""

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

    def _usage(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return shapes.usage(prompt_tokens, completion_tokens)

    def _admit_generation(self, request: Request) -> dict[str, Any]:
        """Body of a generation request, or ApiError for warm-up, faults and bad JSON."""
        if self._life.starting():
            raise ApiError(503, "The server is still starting (simulated warm-up).",
                           "ServiceUnavailable")
        try:
            body = request.json()
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"Invalid JSON body: {exc}", INVALID_REQUEST) from None
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.", INVALID_REQUEST)
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
        return eval_plan(prompt, max_new) or Plan.make(
            prompt_key(prompt, salt), max_new, ignore_eos
        )

    def _stream_cut_after(self) -> int | None:
        behaviour = self._box.get()
        return behaviour.stream_cut_after if behaviour.fault == "stream_cut" else None

    async def chat(self, request: Request) -> Response | StreamingResponse:
        body = self._admit_generation(request)
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise ApiError(400, "messages: a list is required", INVALID_REQUEST)
        if not messages:
            raise ApiError(400, "Messages cannot be empty.")  # serving_chat._validate_request
        if not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "Each message must be an object.", INVALID_REQUEST)
        if not all(shapes.role_accepted(m.get("role")) for m in messages):
            raise ApiError(400, "A message's role is not one the release accepts.", INVALID_REQUEST)
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
                "message": self._chat_message(gen.plan, events),
                "logprobs": None,
                "finish_reason": last.finish_reason["type"] if last.finish_reason else None,
                "matched_stop": _matched(last.finish_reason),
            }],
            "usage": self._usage(gen.prompt_tokens, last.completion_tokens),
            "metadata": {"weight_version": self._args.weight_version},
        })

    def _chat_message(self, plan: Plan, events: list[TokenEvent]) -> dict[str, Any]:
        thinking = getattr(plan, "is_thinking", lambda position: False)
        message = shapes.chat_message("".join(e.text for e in events if not thinking(e.position)))
        thought = "".join(e.text for e in events if thinking(e.position))
        if thought:  # sglang's reasoning parser puts the thinking here
            message["reasoning_content"] = thought
        return message

    async def _chat_chunks(self, gen: GenerationInput, times: RequestTimes
                           ) -> AsyncIterator[bytes]:
        rid = uuid.uuid4().hex
        created = int(time.time())
        head = {"id": rid, "object": "chat.completion.chunk", "created": created,
                "model": gen.model}

        def chunk(delta: dict[str, Any], finish: str | None = None, matched: Any = None
                  ) -> bytes:
            return _sse(shapes.chat_chunk(head, delta, finish, matched))

        last: TokenEvent | None = None
        thinking = getattr(gen.plan, "is_thinking", lambda position: False)
        async for event in self._events(gen, times):
            if event.position == 0:
                yield chunk({"role": "assistant", "content": ""})
            if event.text:
                field = "reasoning_content" if thinking(event.position) else "content"
                yield chunk({field: event.text})
            last = event
        finish = last.finish_reason if last else None
        yield chunk({}, finish["type"] if finish else None, _matched(finish))
        if gen.include_usage:
            completion = last.completion_tokens if last else 0
            yield _sse({**head, "choices": [],
                        "usage": self._usage(gen.prompt_tokens, completion)})
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
        if prompt is None or not isinstance(prompt, (str, list)):
            raise ApiError(400, "prompt: a string or a list is required", INVALID_REQUEST)
        if prompt in ("", []):
            raise ApiError(400, "Prompt cannot be empty")  # serving_completions._validate_request
        raise ApiError(400, "The simulator takes one prompt: a string or a list of token ids.")

    async def completions(self, request: Request) -> Response | StreamingResponse:
        body = self._admit_generation(request)
        prompt, prompt_tokens = self._completion_prompt(body)
        if body.get("n", 1) != 1:
            raise ApiError(400, "The simulator supports n=1 only.")
        # CompletionRequest.max_tokens = 16, and its validator wants it positive.
        max_new = _positive_int(body, "max_tokens", 16, model_checks_sign=True)
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
            "usage": self._usage(gen.prompt_tokens, last.completion_tokens),
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
            usage = self._usage(gen.prompt_tokens, last.completion_tokens if last else 0)
            # The completions usage chunk is dumped with exclude_none=True.
            yield _sse({"id": rid, "object": "text_completion", "created": created,
                        "model": gen.model, "choices": [],
                        "usage": {k: v for k, v in usage.items() if v is not None}})
        yield SSE_DONE

    async def generate(self, request: Request) -> Response | StreamingResponse:
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


def _temperature(body: dict[str, Any]) -> float:
    """Request temperature; absent or null means sglang's default of 1.0 (sampling)."""
    value = body.get("temperature")
    return 1.0 if value is None else _number(value, "temperature")


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True

