"""Runs in a subprocess: imports one sglang release's real OpenAI protocol models and checks bodies.

Started by ``tests/sglangprotocol.py`` as ``python sglangprotocol_worker.py <stage>``, where
<stage> holds files unpacked from the real wheels (``src/``: sglang's ``protocol.py``,
``sse_utils.py`` when the release has it, ``utils.py``; ``deps/``: the openai release the sglang
wheel pins, msgspec, distro). Everything else protocol.py imports (pydantic, typing_extensions,
openai's own dependencies) comes from the interpreter's site-packages.

``sglang/__init__.py`` and ``sglang/utils.py`` import the whole runtime (numpy, IPython, requests,
...); protocol.py needs only ``convert_json_schema_to_str`` from the latter, so that one function
is taken verbatim from the real ``utils.py`` (by its AST) into a module of its own, and the
``sglang`` package is a bare package over the unpacked tree. xgrammar is absent, so protocol.py's
own ``try: from xgrammar import StructuralTag`` falls back to ``Any`` as it does upstream.

Protocol: one JSON object per stdin line, ``{"kind", "endpoint", "body"}``; one JSON line back,
``{"model": <class name or null>, "problems": [...]}``. See tests/sglangprotocol.py for the kinds.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

STAGE = Path(sys.argv[1])
SRC = STAGE / "src"
sys.path[:0] = [str(STAGE / "deps"), str(SRC)]

# ModelList etc. by (kind, endpoint); "error" bodies are ErrorResponse whatever the endpoint.
MODELS = {
    ("response", "/v1/models"): "ModelList",
    ("response", "/v1/models/{model}"): "ModelCard",
    ("response", "/v1/completions"): "CompletionResponse",
    ("response", "/v1/chat/completions"): "ChatCompletionResponse",
    ("chunk", "/v1/completions"): "CompletionStreamResponse",
    ("chunk", "/v1/chat/completions"): "ChatCompletionStreamResponse",
    ("request", "/v1/completions"): "CompletionRequest",
    ("request", "/v1/chat/completions"): "ChatCompletionRequest",
}


def _install_sglang() -> tuple[types.ModuleType, Any]:
    package = types.ModuleType("sglang")
    package.__path__ = [str(SRC / "sglang")]
    sys.modules["sglang"] = package
    utils_source = (SRC / "sglang" / "utils.py").read_text(encoding="utf-8")
    (func,) = [node for node in ast.parse(utils_source).body
               if isinstance(node, ast.FunctionDef) and node.name == "convert_json_schema_to_str"]
    utils = types.ModuleType("sglang.utils")
    utils.__file__ = str(SRC / "sglang" / "utils.py")
    header = "import json\nfrom typing import Type, Union\nfrom pydantic import BaseModel\n"
    exec(compile(header + (ast.get_source_segment(utils_source, func) or ""),  # noqa: S102
                 utils.__file__, "exec"), utils.__dict__)
    sys.modules["sglang.utils"] = utils
    package.utils = utils  # type: ignore[attr-defined]
    protocol = importlib.import_module("sglang.srt.entrypoints.openai.protocol")
    sse = None
    if (SRC / "sglang/srt/entrypoints/openai/sse_utils.py").is_file():
        sse = importlib.import_module("sglang.srt.entrypoints.openai.sse_utils")
    return protocol, sse


PROTOCOL, SSE = _install_sglang()
import openai  # noqa: E402  (after the path set-up: the pinned release's openai)
import pydantic  # noqa: E402


def _path(parts: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts) or "."


def _model_keys(model: pydantic.BaseModel) -> set[str]:
    keys = set()
    for name, info in type(model).model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
        if isinstance(info.validation_alias, str):
            keys.add(info.validation_alias)
    return keys


def undefined_fields(model: Any, raw: Any, at: tuple[Any, ...] = ()) -> list[str]:
    """Keys of the JSON that the validated model does not define, at every nesting level."""
    found: list[str] = []
    if isinstance(model, pydantic.BaseModel) and isinstance(raw, dict):
        known = _model_keys(model)
        allows = type(model).model_config.get("extra") == "allow"
        for key in raw:
            if key not in known:
                how = "kept: the model allows extras" if allows else "dropped by the model"
                found.append(f"undefined field {_path((*at, key))} "
                             f"({type(model).__name__} does not define it; {how})")
        for name, info in type(model).model_fields.items():
            key = info.alias or name
            if key in raw:
                found += undefined_fields(getattr(model, name), raw[key], (*at, key))
    elif isinstance(model, (list, tuple)) and isinstance(raw, list):
        for index, (item, raw_item) in enumerate(zip(model, raw, strict=False)):
            found += undefined_fields(item, raw_item, (*at, index))
    elif isinstance(model, dict) and isinstance(raw, dict):
        for key, value in model.items():
            if key in raw:
                found += undefined_fields(value, raw[key], (*at, key))
    return found


def differences(sent: Any, expected: Any, at: tuple[Any, ...] = ()) -> list[str]:
    """Where the body differs from what sglang serialises for the same content."""
    if isinstance(sent, dict) and isinstance(expected, dict):
        out = []
        for key in sent.keys() - expected.keys():
            out.append(f"key {_path((*at, key))} is not in sglang's serialisation")
        for key in expected.keys() - sent.keys():
            out.append(f"key {_path((*at, key))} missing: sglang sends "
                       f"{json.dumps(expected[key])}")
        for key in sent.keys() & expected.keys():
            out += differences(sent[key], expected[key], (*at, key))
        return sorted(out)
    if isinstance(sent, list) and isinstance(expected, list) and len(sent) == len(expected):
        return [d for i, (a, b) in enumerate(zip(sent, expected, strict=True))
                for d in differences(a, b, (*at, i))]
    if sent != expected or type(sent) is not type(expected):
        return [f"value at {_path(at)}: sent {json.dumps(sent)}, sglang serialises "
                f"{json.dumps(expected)}"]
    return []


def sglang_serialisation(kind: str, endpoint: str, model: Any) -> Any:
    """The JSON sglang writes for this model instance on this path (read from serving_*.py)."""
    if kind == "error":
        return model.model_dump()  # serving_base.create_error_response: ORJSONResponse(dump)
    if kind == "response":
        # 0.5.23 model_json_response: model_dump_json(by_alias=True).
        return json.loads(model.model_dump_json(by_alias=True))
    if not model.choices:
        # The usage chunk: completions dump it with exclude_none=True, chat with the defaults.
        exclude_none = endpoint == "/v1/completions"
        return json.loads(model.model_dump_json(exclude_none=exclude_none))
    if endpoint == "/v1/chat/completions" and SSE is not None and len(model.choices) == 1 \
            and model.choices[0].delta.tool_calls is None:
        # Releases with sse_utils.py build content/role/finish chunks with msgspec.
        choice = model.choices[0]
        line = SSE.build_sse_content(
            chunk_id=model.id, created=model.created, model=model.model, index=choice.index,
            role=choice.delta.role, content=choice.delta.content,
            reasoning_content=choice.delta.reasoning_content,
            finish_reason=choice.finish_reason,
            logprobs=choice.logprobs.model_dump() if choice.logprobs is not None else None,
            matched_stop=choice.matched_stop,
            usage=model.usage.model_dump() if model.usage is not None else None)
        return json.loads(line[len("data: "):])
    return json.loads(model.model_dump_json())


def coerced(cls: Any, text: str) -> list[str]:
    """Values sglang accepts only by converting them (a string for a number, ...)."""
    try:
        cls.model_validate_json(text, strict=True)
    except pydantic.ValidationError as exc:
        return [f"coerced {_path(tuple(e['loc']))}: {e['msg']} (input {json.dumps(e.get('input'))})"
                for e in exc.errors(include_url=False)]
    return []


def check(kind: str, endpoint: str, body: Any) -> dict[str, Any]:
    if kind == "chunk" and isinstance(body, dict) and set(body) == {"error"}:
        kind, body = "error", body["error"]  # a streamed error: json.dumps({"error": dump})
        wrapped = True
    else:
        wrapped = False
    name = "ErrorResponse" if kind == "error" else MODELS.get((kind, endpoint))
    if name is None:
        return {"model": None, "problems": [f"no protocol.py model for {kind} {endpoint}"]}
    cls = getattr(PROTOCOL, name)
    text = json.dumps(body)
    try:
        # Requests: lax, as FastAPI validates them; responses: strict JSON (no coercion).
        model = cls.model_validate_json(text, strict=kind != "request")
    except pydantic.ValidationError as exc:
        return {"model": name, "problems": [
            f"invalid {_path(tuple(e['loc']))}: {e['msg']} (input {json.dumps(e.get('input'))})"
            for e in exc.errors(include_url=False)]}
    problems = undefined_fields(model, body)
    if kind == "request":
        problems += coerced(cls, text)
    else:
        problems += differences(body, sglang_serialisation(kind, endpoint, model))
    return {"model": f"{{error: {name}}}" if wrapped else name, "problems": problems}


def main() -> None:
    print(json.dumps({"ready": True, "openai": openai.__version__,
                      "pydantic": pydantic.VERSION, "protocol": PROTOCOL.__file__}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = check(request["kind"], request["endpoint"], request["body"])
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who fails the test
            answer = {"model": None, "problems": [f"checker error: {type(exc).__name__}: {exc}"]}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
