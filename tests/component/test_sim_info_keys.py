"""The simulator's /model_info and /server_info carry the keys the real release's code builds.

The key sets are read from each pinned wheel's source by its AST (not from a hand-kept list):
``entrypoints/http_server.py`` ``model_info`` and ``server_info``, 0.5.23's ``build_server_info``
(``utils/common.py``), the scheduler's ready message (``managers/scheduler.py``: the dict that
carries ``max_req_input_len``), and the ServerArgs field names (an older release: the ``ServerArgs``
dataclass in ``server_args.py``; 0.5.23: the field namespaces under ``arg_groups/fields/``).
The simulator runs with the flags the real profile renders for a variant of that release.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import httpx
import pytest

from opsctl.config.profiles import load_profile, to_argv
from opsctl.core import wheels
from opsctl.deploy import localsim

SRT = "sglang/srt/"
# The real profile's variants and the release each pins (read from deploy/*.yaml below).
VARIANTS = ("gathercast", "native")


def _function(tree: ast.Module, name: str) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no function {name}")


def _literal_keys(node: ast.AST) -> set[str]:
    return {key.value for sub in ast.walk(node) if isinstance(sub, ast.Dict)
            for key in sub.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}


def _key_assignment(stmt: ast.AST, var: str) -> str | None:
    """``var["key"] = ...`` -> "key"."""
    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                    and target.value.id == var and isinstance(target.slice, ast.Constant):
                return str(target.slice.value)
    return None


def built_keys(scope: ast.AST, var: str) -> tuple[set[str], set[str]]:
    """(always, sometimes): the keys of the dict ``var`` that ``scope`` builds: its literal and
    the ``var["k"] = ...`` next to that assignment (always), those under a branch (sometimes)."""
    for node in ast.walk(scope):
        for stmts in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
            if not isinstance(stmts, list):
                continue
            made = [s for s in stmts if isinstance(s, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == var for t in s.targets)]
            if not made:
                continue
            always = _literal_keys(made[0].value) if isinstance(made[0].value, ast.Dict) else set()
            always |= {k for k in (_key_assignment(s, var) for s in stmts) if k}
            anywhere = {k for k in (_key_assignment(s, var) for s in ast.walk(scope)) if k}
            return always, anywhere - always
    raise AssertionError(f"no assignment of {var}")


def _scheduler_ready_info(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The scheduler's ready message: the dict with "status" and "max_req_input_len"."""
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for stmt in ast.walk(func):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict) \
                    and {"status", "max_req_input_len"} <= _literal_keys(stmt.value) \
                    and isinstance(stmt.targets[0], ast.Name):
                return built_keys(func, stmt.targets[0].id)
    raise AssertionError("no scheduler ready message")


def _class_fields(tree: ast.Module, only: str | None = None) -> set[str]:
    return {item.target.id for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and (only is None or node.name == only)
            for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}


class RealKeys:
    """What one release's source builds for the two endpoints: keys always there, keys there
    under a condition, and the ServerArgs fields (what every other /server_info key must be)."""

    def __init__(self, wheel: Path) -> None:
        with zipfile.ZipFile(wheel) as archive:
            def tree(path: str) -> ast.Module:
                return ast.parse(archive.read(SRT + path).decode("utf-8"))

            names = archive.namelist()
            http = tree("entrypoints/http_server.py")
            self.model_info, self.model_info_sometimes = built_keys(
                _function(http, "model_info"), "result")
            self.server_info = _literal_keys(_function(http, "server_info"))
            self.server_info_sometimes: set[str] = set()
            if "def build_server_info" in archive.read(SRT + "utils/common.py").decode():
                always, sometimes = built_keys(
                    _function(tree("utils/common.py"), "build_server_info"), "result")
                self.server_info |= always
                self.server_info_sometimes |= sometimes
            always, sometimes = _scheduler_ready_info(tree("managers/scheduler.py"))
            self.server_info |= always
            self.server_info_sometimes |= sometimes
            fields = [n for n in names if n.startswith(SRT + "arg_groups/fields/")
                      and n.endswith(".py")]
            if fields:
                self.server_args = set().union(*(_class_fields(tree(n[len(SRT):]))
                                                 for n in fields))
                # resolved_dict() adds the deprecated enable_dp_attention (server_args.py).
                self.server_args.add("enable_dp_attention")
            else:
                self.server_args = _class_fields(tree("server_args.py"), "ServerArgs")


@pytest.fixture(scope="module", params=VARIANTS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[str, RealKeys, dict[str, object], dict[str, object]]:
    deployment = load_profile("glm5-nvfp4-rtx6000").resolve(request.param)
    release = deployment.image.sglang_version
    flags = to_argv(deployment)[len(deployment.server.entrypoint):]
    log = tmp_path_factory.mktemp("sim-info") / "sim.log"
    sim = localsim.start(flags, {"OPSCTL_SIM_SGLANG_VERSION": release}, log,
                         ready_timeout_s=20.0)
    try:
        model_info = httpx.get(sim.url + "/model_info").json()
        server_info = httpx.get(sim.url + "/server_info").json()
    finally:
        sim.stop(timeout_s=10.0)
    return release, RealKeys(wheels.fetch("sglang", release)), model_info, server_info


def test_model_info_has_exactly_the_real_keys(
        served: tuple[str, RealKeys, dict[str, object], dict[str, object]]) -> None:
    release, real, model_info, _ = served
    assert "model_path" in real.model_info, release  # the extraction found the literal
    assert real.model_info <= set(model_info), (release, sorted(real.model_info - set(model_info)))
    assert set(model_info) - real.model_info <= real.model_info_sometimes, release


def test_server_info_keys_are_the_real_ones(
        served: tuple[str, RealKeys, dict[str, object], dict[str, object]]) -> None:
    release, real, _, server_info = served
    assert {"version", "internal_states", "max_req_input_len"} <= real.server_info, release
    missing = real.server_info - set(server_info)
    assert not missing, (release, sorted(missing))
    echoed = set(server_info) - real.server_info - real.server_info_sometimes
    assert "tp_size" in echoed, release
    assert echoed <= real.server_args, (release, sorted(echoed - real.server_args))
