"""Expected against resolved: what a variant implies each checked setting resolves to, how the
server's report compares, and whether the patch's start-up line says the patched path is on.

Pure functions over the rendered argv, the release facts (opsctl.verify.facts), the JSON the
server returned and the container log text. An expectation is known only when the argv sets the
flag, the release's default does not depend on the GPU or the checkpoint, or the variant states
it (`expect`); otherwise the field is "unknown" with the reason, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opsctl.config.releases import DSA_ARCHITECTURES, flag_values
from opsctl.verify.facts import (
    VERSION_KEY,
    Default,
    Depends,
    FieldFact,
    Fixed,
    Required,
    SameAs,
    Value,
)

Status = Literal["ok", "mismatch", "unknown"]
VERSION_FIELD = "sglang_version"
PATCH_FIELD = "patched_path"
ACTIVE = "active"
NOT_ACTIVE = "not active"
MarkerParser = Callable[[str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Expectation:
    value: Value
    known: bool
    source: str  # where the value comes from, or why it is not known


@dataclass(frozen=True)
class FieldCheck:
    field: str
    expected: Value
    resolved: Any
    status: Status
    source: str  # where the expectation comes from
    where: str  # where the server reports the value
    reason: str = ""  # why the status is "unknown"


def _typed(value: str, integer: bool) -> Value:
    if integer:
        try:
            return int(value)
        except ValueError:
            return value
    return value


def _unknown(reason: str) -> Expectation:
    return Expectation(None, False, reason)


def _from_default(name: str, fact: FieldFact, default: Default,
                  known: Mapping[str, Expectation]) -> Expectation:
    if isinstance(default, Fixed):
        return Expectation(default.value, True, f"sglang default ({fact.source})")
    if isinstance(default, SameAs):
        other = known[default.field]
        return Expectation(other.value, other.known,
                           f"defaults to {default.field}" if other.known else other.source)
    if isinstance(default, Depends):
        return _unknown(f"sglang's default is not fixed: {default.on} ({fact.source}); "
                        f"state it as expect.{name} on the variant")
    if isinstance(default, Required):
        return _unknown(f"{fact.flag} is required and not in the argv")
    kv = known.get("kv_cache_dtype")
    if kv is None or not kv.known:
        return _unknown("depends on kv_cache_dtype, which is not known")
    branch = {"fp8_e4m3": default.fp8, "bfloat16": default.bf16}.get(str(kv.value))
    if branch is None:
        return _unknown(f"no default recorded for kv_cache_dtype {kv.value}")
    return _from_default(name, fact, branch, known)


@dataclass(frozen=True)
class Resolution:
    """The release's own resolution of this very argv (opsctl.config.resolve's record)."""

    resolved: Mapping[str, Any]  # the record's `resolved`: /server_info's settings part
    source: str  # which record, on which reported GPU


def expectations(facts: Mapping[str, FieldFact], argv: Sequence[str], architecture: str | None,
                 expect: Mapping[str, Value] | None = None,
                 resolution: Resolution | None = None) -> dict[str, Expectation]:
    """field -> what the release should resolve for this argv (entrypoint excluded).

    In order: the variant's `expect`; the release's own resolution of this argv when a current
    record exists; else the flag and the hand-read defaults of opsctl.verify.facts.
    """
    given_flags = flag_values(argv)
    dsa = architecture in DSA_ARCHITECTURES
    out: dict[str, Expectation] = {}
    for name, fact in facts.items():
        stated = _stated(name, fact, expect, resolution)
        given = given_flags.get(fact.flag)
        out[name] = stated or _expected(name, fact, given, dsa, architecture, out)
    return out


def _stated(name: str, fact: FieldFact, expect: Mapping[str, Value] | None,
            resolution: Resolution | None) -> Expectation | None:
    """The variant's `expect` for the field, else the release's own resolution of the argv."""
    if expect and name in expect:
        return Expectation(expect[name], True, "the variant's expect")
    if resolution is None:
        return None
    present, value = lookup(resolution.resolved, fact.key)
    if present and (value is None or isinstance(value, str | int)):
        return Expectation(value, True, resolution.source)
    return None


def _expected(name: str, fact: FieldFact, given: str | None, dsa: bool,
              architecture: str | None, out: Mapping[str, Expectation]) -> Expectation:
    """The field from its flag, else from the hand-read default (unknown for a model the
    defaults were not recorded for)."""
    if given is not None and given not in fact.unset and not (dsa and fact.forced):
        value = fact.aliases.get(given, given) if dsa else given
        source = f"flag {fact.flag}" + (f" ({given} normalised)" if value != given else "")
        return Expectation(_typed(value, fact.integer), True, source)
    if fact.dsa_only and not dsa:
        return _unknown(f"architecture {architecture or '(not in the profile)'}: "
                        "defaults are recorded for DSA models only")
    found = _from_default(name, fact, fact.default, out)
    if given is not None and fact.forced and found.known:
        found = Expectation(
            found.value,
            True,
            f"{found.source}; a DSA model gets it whatever {fact.flag} says",
        )
    return found


def lookup(payload: Mapping[str, Any], key: Sequence[str]) -> tuple[bool, Any]:
    """(found, value) at a key path of a JSON object."""
    node: Any = payload
    for part in key:
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def same(expected: Value, resolved: Any) -> bool:
    if expected is None or resolved is None:
        return expected is None and resolved is None
    return str(expected) == str(resolved)


def _check(name: str, expected: Expectation, payload: Mapping[str, Any], where: str,
           key: Sequence[str]) -> FieldCheck:
    found, value = lookup(payload, key)
    if not expected.known:
        return FieldCheck(name, None, value, "unknown", "", where, expected.source)
    if not found:
        return FieldCheck(name, expected.value, None, "unknown", expected.source, where,
                          f"{where} is absent from the server's answer")
    status: Status = "ok" if same(expected.value, value) else "mismatch"
    return FieldCheck(name, expected.value, value, status, expected.source, where)


def compare(facts: Mapping[str, FieldFact], expected: Mapping[str, Expectation],
            server_info: Mapping[str, Any], model_info: Mapping[str, Any]) -> list[FieldCheck]:
    payloads = {"server_info": server_info, "model_info": model_info}
    return [
        _check(name, expected[name], payloads[fact.endpoint],
               f"/{fact.endpoint} {'.'.join(fact.key)}", fact.key)
        for name, fact in facts.items()
    ]


def version_check(pinned: str, server_info: Mapping[str, Any]) -> FieldCheck:
    """The server's release against the profile's pin: every other fact is per release."""
    return _check(VERSION_FIELD, Expectation(pinned, True, "the profile's image.sglang_version"),
                  server_info, "/server_info version", VERSION_KEY)


def _markers_seen(markers: int, active: int, reasons: list[str]) -> str:
    """What the marker lines said: how many were active, the others' reasons."""
    if not markers:
        return "no marker line"
    if active == markers:
        return f"{ACTIVE} ({active} line{'s' if active > 1 else ''})"
    seen = f"{ACTIVE} on {active} of {markers} lines, " if active else ""
    return seen + f"inactive: reason={','.join(reasons)}"


def patch_check(patched: bool, log_text: str | None, parse_marker: MarkerParser) -> FieldCheck:
    """The gather-then-cast start-up line: present and active exactly when the variant runs it."""
    expected = ACTIVE if patched else NOT_ACTIVE
    source = "the variant's requires_patch"
    where = "the patch's start-up line in the container log"
    if log_text is None:
        return FieldCheck(PATCH_FIELD, expected, None, "unknown", source, where,
                          "no container log to read (a plain --base-url; pass --log FILE)")
    markers = [m for m in map(parse_marker, log_text.splitlines()) if m is not None]
    active = sum(1 for m in markers if m.get("state") == ACTIVE)
    reasons = sorted({str(m.get("reason")) for m in markers if m.get("state") != ACTIVE})
    resolved = _markers_seen(len(markers), active, reasons)
    ok = (active > 0 and active == len(markers)) if patched else active == 0
    return FieldCheck(PATCH_FIELD, expected, resolved, "ok" if ok else "mismatch", source, where)
