"""Checks a mounted checkpoint with what an image holds. STDLIB ONLY: it runs inside the image.

`opsctl up` runs it in a throwaway container of the variant's own image (no network, no GPU,
the checkpoint mounted read-only where the server will read it) as
`python3 -c <this file's source> <request JSON>`, before the 8-GPU server starts. The request
(opsctl.deploy.preflight builds it): `model_dir`, `mtp` (the variant decodes speculatively on
the checkpoint's own NextN layer), `strict` (an sglang image: transformers and sglang must be
there; the simulator image may lack them), `trust_remote_code` (as the server's argv says).

What it checks, each one a `{"check", "ok", "detail"}` row:
  * config.json parses, names a model_type; the image's transformers knows that model_type
    (its CONFIG_MAPPING) and `AutoConfig.from_pretrained` loads it; where sglang is importable,
    sglang's own `get_config` loads it too (what the server calls: it adds sglang's config
    classes and workarounds on top of transformers);
  * the tokenizer: `AutoTokenizer.from_pretrained` (sglang's `get_tokenizer` where sglang
    imports); without transformers, that tokenizer files are there and tokenizer_config.json
    parses;
  * the safetensors index names only shards that exist in the folder, each non-empty, and their
    sizes add up to at least the index's `metadata.total_size` (tensor bytes; a file adds its
    header); without an index, model.safetensors exists and is non-empty;
  * with `mtp`: the checkpoint holds the NextN layer sglang loads as the draft model. sglang
    0.5.23 (read in its wheel): a draft of `GlmMoeDsaForCausalLM` becomes
    `GlmMoeDsaForCausalLMNextN` (srt/configs/model_config.py:1038-1039), a
    `DeepseekV3ForCausalLMNextN` (srt/models/glm4_moe.py:1288) whose load_weights loads with
    is_nextn=True (srt/models/deepseek_nextn.py:316-317); the loader requires
    `num_nextn_predict_layers` == 1 in config.json and reads only the weights under
    `model.layers.{N}.`, N = num_hidden_layers (0 when num_hidden_layers is 1), with the NextN
    weights eh_proj, enorm, hnorm, shared_head.norm among them
    (srt/models/deepseek_common/deepseek_weight_loader.py:563-582, 324-325).

Run here: on the simulator image (no transformers: JSON and files only) and on test images
holding the real transformers 4.57.1 and 5.19.0 (tests/integration/test_preflight_engine.py).
Not run here: the sglang step, which needs a release image (sglang imports torch and its CUDA
stack); the pinned release exports get_config(model, trust_remote_code) and
get_tokenizer(name, trust_remote_code=...) from srt/utils/hf_transformers_utils.py (0.5.23
re-exports them from srt/utils/hf_transformers/config.py:336 and tokenizer.py:470), which is
what the probe calls.

Prints one JSON report on stdout; exits 0 when every check passed, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")
NEXTN_WEIGHTS = ("eh_proj", "enorm", "hnorm", "shared_head.norm")
MAX_JSON_BYTES = 256 << 20  # an index of a 744B-parameter checkpoint is a few MiB
MAX_SHARDS = 100_000  # a real checkpoint has hundreds; 10^6 names took 45 s to stat


class Report:
    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    def record(self, check: str, ok: bool, detail: str) -> bool:
        self.results.append({"check": check, "ok": ok, "detail": " ".join(detail.split())[:400]})
        return ok


def read_json(path: Path) -> Any:
    """A regular file's JSON, opened without blocking (a FIFO would hang the probe until its
    timeout) and read under the cap."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        data = handle.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_JSON_BYTES >> 20} MiB")
    return json.loads(data)


def version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def check_config(report: Report, model_dir: Path) -> dict[str, Any] | None:
    path = model_dir / CONFIG
    try:
        config = read_json(path)
    except FileNotFoundError:
        report.record("config.json", False, f"{path} does not exist")
        return None
    except (OSError, ValueError, RecursionError) as exc:
        report.record("config.json", False, f"{path} does not parse: {why(exc)}")
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or not model_type:
        report.record("config.json", False, f"{path} names no model_type")
        return None
    arch = config.get("architectures")
    first = arch[0] if isinstance(arch, list) and arch else "?"
    report.record("config.json", True, f"model_type {model_type!r}, {first}, "
                  f"{config.get('num_hidden_layers', '?')} layers")
    return config


def check_transformers(report: Report, model_dir: Path, config: dict[str, Any] | None,
                       request: dict[str, Any], use_sglang: bool) -> None:
    strict, remote = bool(request.get("strict")), bool(request.get("trust_remote_code"))
    model_type = config.get("model_type") if config else None
    version = version_of("transformers")
    if version is None:
        report.record("transformers", not strict, "transformers is not installed in this image"
                      + ("" if strict else " (simulator): config.json read as JSON only"))
        check_tokenizer_files(report, model_dir)
        return
    try:
        from transformers import AutoConfig, AutoTokenizer
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except Exception as exc:  # an image whose transformers does not import is the finding
        report.record("transformers", False, f"transformers {version} does not import: {why(exc)}")
        return
    if model_type is not None:
        # With --trust-remote-code an `auto_map` in config.json names the checkpoint's own code.
        if model_type not in CONFIG_MAPPING and not (remote and "auto_map" in (config or {})):
            report.record("transformers config", False,
                          f"model_type {model_type!r} is unknown to transformers {version}")
        else:
            try:
                loaded = AutoConfig.from_pretrained(str(model_dir), local_files_only=True,
                                                    trust_remote_code=remote)
                report.record("transformers config", True,
                              f"transformers {version} AutoConfig: {type(loaded).__name__}")
            except Exception as exc:
                report.record("transformers config", False,
                              f"transformers {version} cannot load config.json: {why(exc)}")
    if not use_sglang:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True,
                                                      trust_remote_code=remote)
            report.record("tokenizer", True, f"transformers {version} AutoTokenizer: "
                          f"{type(tokenizer).__name__}, {len(tokenizer)} tokens")
        except Exception as exc:
            report.record("tokenizer", False,
                          f"transformers {version} cannot load the tokenizer: {why(exc)}")


def check_sglang(report: Report, model_dir: Path, config_ok: bool, remote: bool) -> None:
    """sglang's own loaders, as the server calls them (both pinned releases export them here)."""
    version = version_of("sglang")
    try:
        from sglang.srt.utils.hf_transformers_utils import get_config, get_tokenizer
    except Exception as exc:
        report.record("sglang", False, f"sglang {version}'s config loader does not import: "
                      f"{why(exc)}")
        return
    if config_ok:
        try:
            loaded = get_config(str(model_dir), trust_remote_code=remote)
            report.record("sglang config", True, f"sglang {version} get_config: "
                          f"{type(loaded).__name__}")
        except Exception as exc:
            report.record("sglang config", False,
                          f"sglang {version} cannot load config.json: {why(exc)}")
    try:
        tokenizer = get_tokenizer(str(model_dir), trust_remote_code=remote)
        report.record("tokenizer", True, f"sglang {version} get_tokenizer: "
                      f"{type(tokenizer).__name__}, {len(tokenizer)} tokens")
    except Exception as exc:
        report.record("tokenizer", False, f"sglang {version} cannot load the tokenizer: {why(exc)}")


def check_tokenizer_files(report: Report, model_dir: Path) -> None:
    found = [name for name in TOKENIZER_FILES if (model_dir / name).is_file()]
    if not found:
        report.record("tokenizer", False, f"no tokenizer file ({', '.join(TOKENIZER_FILES)}) "
                      f"in {model_dir}")
        return
    try:
        read_json(model_dir / "tokenizer_config.json")
    except (OSError, ValueError, RecursionError) as exc:
        report.record("tokenizer", False, f"tokenizer_config.json: {why(exc)}")
        return
    report.record("tokenizer", True, f"{', '.join(found)} and tokenizer_config.json present "
                  "(not loaded: no transformers here)")


class _Failed(Exception):
    """A check's failure; the message is the check's detail."""


def check_shards(report: Report, model_dir: Path) -> dict[str, str]:
    """The index's weight map (tensor name -> shard file) once every shard it names is there."""
    index_path = model_dir / INDEX
    if not index_path.exists():
        single = model_dir / SINGLE
        ok = single.is_file() and single.stat().st_size > 0
        report.record("safetensors", ok, f"no {INDEX}; {SINGLE} "
                      + (f"{single.stat().st_size} bytes" if ok else "is missing or empty"))
        return {}
    try:
        index, weight_map = _read_index(index_path)
        sizes = _shard_sizes(model_dir, weight_map)
        declared = _declared_total(index, sizes)
    except _Failed as exc:
        report.record("safetensors", False, str(exc))
        return {}
    total = sum(sizes.values())
    declared_note = f" (index total_size {declared})" if declared is not None else ""
    report.record("safetensors", True, f"{len(weight_map)} tensors in {len(sizes)} shards, "
                  f"{total / 2**30:.2f} GiB{declared_note}")
    return weight_map


def _read_index(index_path: Path) -> tuple[Any, dict[str, str]]:
    """The index and its weight map, which names at least one tensor and at most MAX_SHARDS
    shards."""
    try:
        index = read_json(index_path)
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise ValueError("weight_map is not an object of tensor name -> file name")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise _Failed(f"{INDEX} does not parse: {why(exc)}") from None
    if not weight_map:
        raise _Failed(f"{INDEX} names no tensor")
    shards = set(weight_map.values())
    if len(shards) > MAX_SHARDS:
        raise _Failed(f"{INDEX} names {len(shards)} shards, more than {MAX_SHARDS}: not a "
                      "checkpoint's index")
    return index, weight_map


def _shard_sizes(model_dir: Path, weight_map: dict[str, str]) -> dict[str, int]:
    """Each shard's size, once every one is a non-empty file inside the checkpoint folder."""
    try:
        root = resolved(model_dir)
    except OSError as exc:
        raise _Failed(f"{model_dir} cannot be resolved: {why(exc)}") from None
    shards = sorted(set(weight_map.values()))
    sizes: dict[str, int] = {}
    problems: list[str] = []
    for shard in shards:
        problem, size = shard_problem(root, model_dir, shard)
        if problem:
            problems.append(problem)
        else:
            sizes[shard] = size
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise _Failed(f"{INDEX} names {len(shards)} shards; {problems[0]}{more}")
    return sizes


def _declared_total(index: Any, sizes: dict[str, int]) -> int | None:
    """The index's metadata.total_size where it states one, which the shards must reach."""
    metadata = index.get("metadata") if isinstance(index, dict) else None
    declared = metadata.get("total_size") if isinstance(metadata, dict) else None
    if not isinstance(declared, int):
        return None
    total = sum(sizes.values())
    if total < declared:
        raise _Failed(f"the {len(sizes)} shards hold {total} bytes, less than the index's "
                      f"total_size {declared}: truncated or partly downloaded")
    return declared


def resolved(path: Path) -> Path:
    """`path.resolve()`, a symlink loop an OSError (ELOOP) as Python 3.13 raises it: 3.11's
    RuntimeError would end the probe in a traceback, which `up` reads as a broken image."""
    try:
        return path.resolve()
    except RuntimeError as exc:
        raise OSError(errno.ELOOP, f"{exc}") from None


def shard_problem(root: Path, model_dir: Path, shard: str) -> tuple[str | None, int]:
    """(why the shard the index names is unusable, or None; its size)."""
    shown = shard if len(shard) <= 120 else shard[:120] + "..."
    try:
        path = resolved(model_dir / shard)
        if root not in path.parents:
            return f"{shown!r} lies outside the checkpoint folder", 0
        if not path.is_file():
            return f"{shown} is missing", 0
        size = path.stat().st_size
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a link loop
        return f"{shown!r} cannot be read: {why(exc)}", 0
    return (f"{shown} is empty", 0) if size == 0 else (None, size)


def check_nextn(report: Report, config: dict[str, Any] | None, weight_map: dict[str, str]) -> None:
    check = "MTP (NextN) weights"
    if config is None or not weight_map:
        report.record(check, False, "not checked: config.json or the index failed")
        return
    try:
        prefix = _nextn_prefix(config)
        names = _nextn_names(weight_map, prefix, config["num_hidden_layers"])
    except _Failed as exc:
        report.record(check, False, str(exc))
        return
    shards = sorted({weight_map[n] for n in names})
    more = " ..." if len(shards) > 3 else ""
    report.record(check, True, f"{len(names)} tensors under {prefix}* in "
                  f"{', '.join(shards[:3])}{more}")


def _nextn_prefix(config: dict[str, Any]) -> str:
    """The tensor-name prefix of the NextN layer, which follows the model's layers."""
    layers = config.get("num_hidden_layers")
    predict = config.get("num_nextn_predict_layers")
    if not isinstance(layers, int) or layers < 1:
        raise _Failed("config.json has no num_hidden_layers")
    if predict != 1:
        raise _Failed(f"config.json num_nextn_predict_layers is {predict!r}; sglang's NextN "
                      "loader needs exactly 1")
    return f"model.layers.{0 if layers == 1 else layers}."


def _nextn_names(weight_map: dict[str, str], prefix: str, layers: int) -> list[str]:
    """The index's tensors under `prefix`, once every part of the NextN layer is there."""
    names = [name for name in weight_map if name.startswith(prefix)]
    missing = [part for part in NEXTN_WEIGHTS
               if not any(name.startswith(f"{prefix}{part}.") for name in names)]
    if not names:
        raise _Failed(f"the index has 0 tensors under {prefix}* (the NextN layer after "
                      f"{layers} layers)")
    if missing:
        raise _Failed(f"the index has {len(names)} tensors under {prefix}* (the NextN layer "
                      f"after {layers} layers); missing {', '.join(missing)}")
    return names


def run_checks(request: dict[str, Any]) -> list[dict[str, Any]]:
    report = Report()
    model_dir = Path(request["model_dir"])
    strict = bool(request.get("strict"))
    if not model_dir.is_dir():
        report.record("checkpoint", False, f"{model_dir} is not a directory in the container")
        return report.results
    config = check_config(report, model_dir)
    use_sglang = importlib.util.find_spec("sglang") is not None
    if strict and not use_sglang:
        report.record("sglang", False, "sglang is not installed in this image")
    check_transformers(report, model_dir, config, request, use_sglang)
    if use_sglang and version_of("transformers") is not None:
        check_sglang(report, model_dir, config is not None and all(
            r["ok"] for r in report.results if r["check"] == "transformers config"),
            bool(request.get("trust_remote_code")))
    weight_map = check_shards(report, model_dir)
    if request.get("mtp"):
        check_nextn(report, config, weight_map)
    return report.results


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: preflight_probe.py '{\"model_dir\": ...}'", file=sys.stderr)
        return 2
    try:
        request = json.loads(argv[0])
        if not isinstance(request, dict) or not isinstance(request.get("model_dir"), str):
            raise ValueError("the request names no model_dir")
    except ValueError as exc:
        print(f"opsctl preflight: bad request: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub: it is a local folder
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    results = run_checks(request)
    failed = [r for r in results if not r["ok"]]
    print(json.dumps({"ok": not failed, "results": results}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
