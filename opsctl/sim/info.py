"""/model_info and /server_info as each pinned release builds them, with resolved settings.

0.5.15 (as a real 0.5.15 server answered, ``tests/fixtures/real-sglang-0.5.15/``): /model_info
has no served name; /server_info is ``dataclasses.asdict(server_args)`` plus the scheduler's
status, token limits, the internal states, ``kv_events`` and the version. 0.5.23
(``http_server.py:812-893``, ``utils/common.py:3584-3593``): /model_info also carries the served
name, parsers and load format; /server_info is ``server_args.resolved_dict()`` plus
``launch_command``, the scheduler's ready message (``managers/scheduler.py`` ``get_init_info``:
status, token limits, ``startup_time``, ``hicache_object_layout``), ``kv_events``, ``startup_time``
and ``frontend``. The key sets are checked against the wheels' source by
``tests/component/test_sim_info_keys.py``. The fields ``opsctl verify`` checks carry what the
release resolves: its own resolution of this argv where ``opsctl profile resolve`` recorded one
(``opsctl.sim.records``), else the hand-read table (``opsctl.sim.releases``, the release's
defaults.json); every other given flag is echoed as given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.sim import records
from opsctl.sim.config import SimArgs
from opsctl.sim.engine import SIM_MAX_TOTAL_NUM_TOKENS
from opsctl.sim.releases import Checkpoint, resolve, table

# What the misresolve fault reports instead of the resolved attention backend.
MISRESOLVED_BACKEND = "triton"
MISRESOLVED_FALLBACK = "flashinfer"


def read_model_config(model_path: str) -> dict[str, Any]:
    """<model_path>/config.json when the path exists here (model_type, architectures, ...)."""
    try:
        data = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _place(payload: dict[str, Any], key: tuple[str, ...], value: Any) -> None:
    """Set a value at a key path, making the nested objects on the way."""
    node = payload
    for part in key[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[key[-1]] = value


def _hicache_disabled(page_size: Any) -> dict[str, Any]:
    """0.5.23 scheduler.get_init_info's layout without a hierarchical cache
    (``mem_cache/hicache_storage.py`` ``disabled_l3_layout``), in every /server_info."""
    return {"enabled": False, "backend": None, "page_size": page_size,
            "hicache_object_layout": {"pools": []}, "reason": "Hierarchical cache is disabled"}


@dataclass(frozen=True)
class ServerView:
    """What the info endpoints report: fixed at start-up except for the live parts passed in."""

    args: SimArgs
    release: str
    model_config: Mapping[str, Any]

    def resolved(self, fault: str) -> dict[str, Any]:
        """The checked settings as reported; the misresolve fault swaps the attention backend.

        From the release's own resolution when a record of exactly this argv exists and no
        config.json names another model (opsctl.sim.records), else from the hand-read table.
        """
        settings = resolve(self.release, self.args.typed_flags(), Checkpoint(self.model_config))
        recorded = None if self.model_config else records.resolved_for(self.release,
                                                                        self.args.argv)
        if recorded is not None:
            for name, fact in table(self.release).items():
                present, value = records.lookup(recorded, fact.key)
                if present:
                    settings[name] = value
        if fault == "misresolve":
            chosen = settings["attention_backend"]
            settings["attention_backend"] = (
                MISRESOLVED_FALLBACK if chosen == MISRESOLVED_BACKEND else MISRESOLVED_BACKEND)
        return settings

    def _with_resolved(self, payload: dict[str, Any], endpoint: str, fault: str
                       ) -> dict[str, Any]:
        settings = self.resolved(fault)
        for name, fact in table(self.release).items():
            if fact.endpoint == endpoint:
                _place(payload, fact.key, settings[name])
        return payload

    def model_info(self, fault: str) -> dict[str, Any]:
        args, raw = self.args, self.args.raw
        info: dict[str, Any] = {
            "model_path": args.model_path,
            "tokenizer_path": args.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": raw.get("preferred_sampling_params"),
            "weight_version": args.weight_version,
        }
        if self.release == "0.5.23":  # 0.5.15's (a real server's) lacks these
            info.update({
                "served_model_name": args.served_model_name,
                "load_format": raw.get("load_format", "auto"),
                "reasoning_parser": raw.get("reasoning_parser"),
                "tool_call_parser": raw.get("tool_call_parser"),
                "disaggregation_mode": raw.get("disaggregation_mode", "null"),
            })
        info.update({
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model_config.get("model_type"),
            "architectures": self.model_config.get("architectures"),
        })
        return self._with_resolved(info, "model_info", fault)

    def server_info(self, fault: str, startup: dict[str, float], gen_throughput: float
                    ) -> dict[str, Any]:
        # Like 0.5.23 it echoes api_key (sgl-project/sglang#37457): opsctl must never print
        # this response unredacted.
        args = self.args
        fields = self._with_resolved(args.echoed_fields(), "server_info", fault)
        fields["enable_dp_attention"] = False
        state = {
            **fields,
            "world_size": args.tp_size,
            "effective_max_running_requests_per_dp": args.max_running_requests,
            "last_gen_throughput": gen_throughput,
        }
        scheduler = {
            "status": "ready",
            "max_total_num_tokens": SIM_MAX_TOTAL_NUM_TOKENS,
            "max_req_input_len": min(args.context_length, SIM_MAX_TOTAL_NUM_TOKENS) - 1,
        }
        # as a real 0.5.15 server answered (tests/fixtures/real-sglang-0.5.15)
        if self.release == "0.5.15":
            del state["world_size"]
            return {**fields, **scheduler, "internal_states": [state], "version": self.release,
                    "kv_events": None}
        state["startup_time"] = startup
        return {
            **fields,
            "launch_command": " ".join(args.argv),
            **scheduler,
            "startup_time": startup,
            "hicache_object_layout": _hicache_disabled(fields.get("page_size")),
            "kv_events": None,
            "internal_states": [state],
            "version": self.release,
            "frontend": "python",
        }
