"""Run the real sglang ServerArgs resolution on CPU. Runs ONLY as a script, in a clean subprocess.

`opsctl profile resolve` starts `python -S -I -B <this file> <request.json>`: no site packages,
no opsctl, no caller environment. The request names the unpacked sglang wheel, a side
environment of REAL packages (the transformers the wheel pins, torch, numpy, pillow, ...), the
argv, and the GPU to report. This file imports the stdlib and `probe.py` (its neighbour, for the
placeholder classes) only.

What is real: sglang's own code (argparse, `prepare_server_args`, `resolve_once` and every hook
of its resolution pipeline, `resolved_dict`, the KV-pool row width of
`calculate_mla_kv_cache_dim`), transformers' `AutoConfig` on the config.json, torch's dtypes.
What is faked, and only this (the record lists each item and whether sglang called it):
  * `torch.cuda.*` functions that report the GPU: is_available, is_initialized, device_count,
    get_device_capability, get_device_name, mem_get_info, get_device_properties (a namespace
    with name/major/minor/total_memory/multi_processor_count absent) and `torch.version.cuda`;
  * `pynvml` and `nvidia-smi` are absent (sglang then falls back to torch.cuda, which reports
    the GPU above);
  * GPU-only packages sglang imports (sglang_kernel, flashinfer, triton, ...) are inert
    placeholders, visible to sglang's modules ONLY: torch and transformers see them absent, as on
    any CPU machine (their import-time availability probes would otherwise see a placeholder).
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import importlib.util
import json
import logging
import os
import sys
import traceback
import types
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402  (the placeholder machinery of the parser probe)

_ALLOW = [False]  # whether the import being served was asked for by a sglang module
_ABSENT = ("pynvml",)  # modules that must fail to import, as on a host without NVML


def _sglang_module(globals_: Any) -> bool:
    name = (globals_ or {}).get("__name__") or ""
    return bool(name == "sglang" or name.startswith("sglang."))


def _is_placeholder(name: str) -> bool:
    return isinstance(sys.modules.get(name.split(".", 1)[0]), probe._PlaceholderModule)


class _SglangOnlyFinder(probe._PlaceholderFinder):
    """Placeholders for what sglang imports and nobody installed; never for real packages."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.split(".", 1)[0]
        module = sys.modules.get(top)
        if module is not None and not isinstance(module, probe._PlaceholderModule):
            return None  # a missing submodule of a real package is a real ImportError
        if top in _ABSENT or not _ALLOW[-1]:
            return None
        return super().find_spec(fullname, path, target)


def _gated(allow: bool, call: Any, *args: Any) -> Any:
    _ALLOW.append(allow)
    try:
        return call(*args)
    finally:
        _ALLOW.pop()


def _install_import_gates() -> None:
    """Who may see a placeholder: sglang's modules; torch and transformers get ImportError."""
    real_import = builtins.__import__
    real_import_module = importlib.import_module
    real_find_spec = importlib.util.find_spec

    def gated_import(name: str, globals: Any = None, locals: Any = None,
                     fromlist: Any = (), level: int = 0) -> Any:
        allow = _sglang_module(globals)
        if level == 0 and not allow and _is_placeholder(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return _gated(allow, real_import, name, globals, locals, fromlist, level)

    def gated_import_module(name: str, package: str | None = None) -> Any:
        allow = _sglang_module(sys._getframe(1).f_globals)
        if not allow and not name.startswith(".") and _is_placeholder(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return _gated(allow, real_import_module, name, package)

    def gated_find_spec(name: str, package: str | None = None) -> Any:
        allow = _sglang_module(sys._getframe(1).f_globals)
        if not allow and not name.startswith(".") and _is_placeholder(name):
            return None
        return _gated(allow, real_find_spec, name, package)

    builtins.__import__ = gated_import
    importlib.import_module = gated_import_module
    importlib.util.find_spec = gated_find_spec


def _fake_gpu(torch: Any, gpu: dict[str, Any]) -> dict[str, int]:
    """Report `gpu` through torch.cuda; returns the call count of each faked function."""
    calls: dict[str, int] = {}
    total = int(gpu["memory_gb"] * 2**30)
    major, minor = gpu["capability"]

    def counted(name: str, value: Any) -> Any:
        calls[name] = 0

        def fake(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return value() if callable(value) else value

        return fake

    properties = types.SimpleNamespace(
        name=gpu["name"], major=major, minor=minor, total_memory=total)
    fakes = {
        "is_available": True, "is_initialized": False, "device_count": gpu["count"],
        "get_device_capability": (major, minor), "get_device_name": gpu["name"],
        "mem_get_info": (total, total), "get_device_properties": properties,
    }
    for name, value in fakes.items():
        setattr(torch.cuda, name, counted(f"torch.cuda.{name}", value))
    torch.version.cuda = gpu["cuda"]
    return calls


class _Log(logging.Handler):
    """sglang's own log messages (no timestamps), in order."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("sglang"):
            self.lines.append(" ".join(record.getMessage().split()))


def _failure(exc: BaseException, sglang_dir: str) -> dict[str, Any]:
    """Where in sglang a step failed: the innermost sglang frame and the message."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename.startswith(os.path.join(sglang_dir, "sglang") + os.sep)]
    where = ""
    if frames:
        frame = frames[-1]
        where = f"{os.path.relpath(frame.filename, sglang_dir)}:{frame.lineno} ({frame.name})"
    message = " ".join(str(exc).split()) or type(exc).__name__
    return {"where": where, "error": f"{type(exc).__name__}: {message}"[:800]}


def _kv_row(server_args: Any, kv_cache_dtype: str, torch: Any, sglang_dir: str
            ) -> dict[str, Any]:
    """The KV pool's row width from sglang's own pool sizing, as the scheduler computes it."""
    try:
        from sglang.srt.arg_groups.overrides import model_config_of
        from sglang.srt.mem_cache import kv_cache_dtype as kv_dtypes
        from sglang.srt.mem_cache.kv_cache_configurator import calculate_mla_kv_cache_dim
        from sglang.srt.runtime_context import publish

        publish(server_args, role="scheduler")
        _, dtype = kv_dtypes.configure_kv_cache_dtype(
            server_args_kv_cache_dtype=kv_cache_dtype, model=None, model_dtype=torch.bfloat16,
            is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None)
        dim = calculate_mla_kv_cache_dim(model_config=model_config_of(server_args),
                                         kv_cache_dtype=dtype)
    except Exception as exc:  # noqa: BLE001 - reported in the record, never guessed
        return {"computed": False, **_failure(exc, sglang_dir)}
    itemsize = torch.empty((), dtype=dtype).element_size()
    return {
        "computed": True, "pool_dtype": str(dtype).removeprefix("torch."), "elements": dim,
        "bytes": dim * itemsize,
        "source": "sglang.srt.mem_cache.kv_cache_configurator.calculate_mla_kv_cache_dim "
                  "after runtime_context.publish(role='scheduler'); dtype from "
                  "mem_cache.kv_cache_dtype.configure_kv_cache_dtype (model=None: the "
                  "checkpoint's kv_cache_quant_algo is not read for 'auto')",
    }


def _dsa_topk_shared(server_args: Any, sglang_dir: str) -> dict[str, Any] | None:
    """The layers that reuse an earlier layer's DSA top-k (IndexShare, GLM-5.2), by the release's
    own `dsa_layer_skips_topk` on the model's config; None when no layer does (or the release
    or the model has no DSA top-k sharing)."""
    try:
        from sglang.srt.arg_groups.overrides import model_config_of
        from sglang.srt.configs import model_config as configs

        skips = getattr(configs, "dsa_layer_skips_topk", None)
        config = model_config_of(server_args).hf_config
        if skips is None or not configs.is_deepseek_dsa(config):
            return None
        shared = [i for i in range(config.num_hidden_layers) if skips(config, i)]
    except Exception as exc:  # noqa: BLE001 - reported in the record, never guessed
        return {"computed": False, **_failure(exc, sglang_dir)}
    if not shared:
        return None
    return {"computed": True, "layers": len(shared), "of": config.num_hidden_layers,
            "shared": shared,
            "source": "sglang.srt.configs.model_config.dsa_layer_skips_topk on the model's "
                      "config (indexer_types / index_topk_freq / index_skip_topk_offset)"}


def main(request_path: str) -> int:
    with open(request_path) as handle:
        request = json.load(handle)
    sglang_dir = request["sglang_dir"]
    sys.path[:0] = [sglang_dir, *request["env_dirs"]]
    finder = _SglangOnlyFinder(request["pins"])
    sys.meta_path.append(finder)
    _install_import_gates()
    probe._register_bare_sglang_package(sglang_dir)

    import torch  # the real CPU build from the side environment

    calls = _fake_gpu(torch, request["gpu"])
    log = _Log()
    # On sglang's logger: prepare_server_args replaces the root logger's handlers.
    logging.getLogger("sglang").addHandler(log)

    import transformers

    out: dict[str, Any] = {"torch_version": torch.__version__,
                           "transformers_version": transformers.__version__, "results": []}
    # A warm-up resolution first: sglang caches device queries and logs some fallbacks once
    # per process, so every measured resolution below runs in the same (warm) state and a
    # record does not depend on its place in the batch. Its log and calls are reported apart.
    _resolve_one(request["argvs"][0], torch, sglang_dir)
    out["warmup"] = {"gpu_calls": dict(calls), "log": log.lines}
    for argv in request["argvs"]:
        for name in calls:
            calls[name] = 0
        log.lines = []
        result = _resolve_one(argv, torch, sglang_dir)
        result["gpu_calls"] = dict(calls)
        result["log"] = log.lines
        # A second resolution of the same argv: fields that differ (a random seed) vary per
        # launch, and the record says so instead of keeping one draw.
        again = _resolve_one(argv, torch, sglang_dir)
        for name, value in result.get("resolved", {}).items():
            if again.get("resolved", {}).get(name) != value:
                result["resolved"][name] = {"varies": "differs between two resolutions"}
        out["results"].append(result)
    out["placeholder_modules"] = sorted(finder.top_levels)
    json.dump(out, sys.stdout, sort_keys=True)
    return 0


def _resolve_one(argv: list[str], torch: Any, sglang_dir: str) -> dict[str, Any]:
    """One argv through prepare_server_args and the release's resolution, as `serve` runs it."""
    out: dict[str, Any] = {}
    try:
        from sglang.srt import server_args as module
    except Exception as exc:  # noqa: BLE001 - import-time GPU probes: reported, never guessed
        out["unresolved"] = {**_failure(exc, sglang_dir),
                             "step": "importing sglang.srt.server_args"}
        return out
    plain = getattr(module, "_plain", lambda value: value)
    parser = argparse.ArgumentParser()
    module.ServerArgs.add_cli_args(parser)
    # The parser's defaults: what an argv naming only the model leaves in each field (0.5.23
    # builds its record without resolving it; a release whose ServerArgs is a dataclass
    # resolves in __post_init__, so its defaults are the parser's namespace).
    namespace = parser.parse_args(["--model-path", argv[1]])
    if hasattr(module.ServerArgs, "resolve_once"):
        defaults = _fields(module.ServerArgs.from_cli_args(namespace))
    else:
        defaults = vars(namespace)
    out["defaults"] = {f: probe._jsonable(plain(v)) for f, v in defaults.items()}
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    out["set_by_argv"] = sorted({action.dest for action in parser._actions
                                 if given & set(action.option_strings)})
    try:
        server_args = module.prepare_server_args(argv)
        if hasattr(server_args, "resolve_once"):
            server_args.resolve_once()
        resolved = (server_args.resolved_dict() if hasattr(server_args, "resolved_dict")
                    else _fields(server_args))
        out["resolved"] = {f: probe._jsonable(plain(v)) for f, v in resolved.items()}
        out["kv_row"] = _kv_row(server_args, resolved["kv_cache_dtype"], torch, sglang_dir)
        shared = _dsa_topk_shared(server_args, sglang_dir)
        if shared is not None:
            out["dsa_topk_shared"] = shared
    except Exception as exc:  # noqa: BLE001 - sglang refusing the argv is a result
        out["refused"] = _failure(exc, sglang_dir)
    return out


def _fields(server_args: Any) -> dict[str, Any]:
    """Every field of a ServerArgs record (a msgspec Struct in 0.5.23, a dataclass
    in older releases)."""
    names = getattr(type(server_args), "__struct_fields__", None)
    if names is None:
        names = [f for f in vars(server_args) if not f.startswith("_")]
    return {name: getattr(server_args, name) for name in names}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
