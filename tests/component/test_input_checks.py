"""Issue 25's L items, each failing on the code before its fix: exit-2 errors without a hint,
server strings printed raw by `verify`, `expect:` keys and image names checked only later (or
never), secret-looking profile values, tune grids with no bound, a probe that raised."""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from inprocess import run_cli

from opsctl.config.profiles import load_profile
from opsctl.core.errors import EXIT_USAGE, ProfileError
from opsctl.core.paths import project_root
from opsctl.core.redact import redact

PACKAGE = project_root() / "opsctl"
EXIT_2_BASES = {"UsageError", "ProfileError"}


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in __import__("os").environ if n.startswith("OPSCTL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OPSCTL_STATE_DIR", str(tmp_path / "state"))
    # exit 6 if reached
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/opsctl-l-items.sock")


# --- every exit-2 error has a hint -------------------------------------------------------------


def _exit_2_classes(trees: dict[Path, ast.Module]) -> dict[str, bool]:
    """Every class deriving (by name) from UsageError/ProfileError -> whether it sets a
    `default_hint` of its own."""
    found: dict[str, bool] = dict.fromkeys(EXIT_2_BASES, False)
    grew = True
    while grew:
        grew = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in found and any(
                        isinstance(base, ast.Name) and base.id in found for base in node.bases):
                    found[node.name] = any(
                        isinstance(item, ast.Assign)
                        and any(
                            isinstance(t, ast.Name) and t.id == "default_hint" for t in item.targets
                        )
                        for item in node.body
                    )
                    grew = True
    return found


def test_every_exit_2_error_opsctl_raises_carries_a_hint() -> None:
    trees = {path: ast.parse(path.read_text()) for path in PACKAGE.rglob("*.py")}
    classes = _exit_2_classes(trees)
    missing = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name not in classes or classes[name]:
                continue
            if len(node.args) < 2 and not any(k.arg in ("hint", None) for k in node.keywords):
                missing.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {name}")
    assert not missing, "exit-2 errors without a hint:\n" + "\n".join(missing)


def test_a_hintless_error_before_now_prints_its_hint(tmp_path: Path) -> None:
    outcome = run_cli("trace", "analyze", str(tmp_path / "missing.json"))
    assert outcome.code == EXIT_USAGE
    assert "no such file" in outcome.err and "\nhint: " in outcome.err


# --- verify escapes what a server sent ------------------------------------------------------

HOSTILE_VALUE = "\x1b]0;pwned\x07\x1b[31mflashinfer\nforged | row\u202e"


@pytest.fixture
def escaping_server() -> Iterator[str]:
    answers: dict[str, Any] = {
        "/server_info": {"version": "0.5.23", "attention_backend": HOSTILE_VALUE,
                         "kv_cache_dtype": HOSTILE_VALUE, "tp_size": 8},
        "/model_info": {"model_path": HOSTILE_VALUE, "served_model_name": "glm-5"},
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps(answers.get(self.path, {})).encode()
            self.send_response(200 if self.path in answers else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_verify_escapes_control_characters_a_server_sent(escaping_server: str) -> None:
    outcome = run_cli("verify", "--base-url", escaping_server, "--timeout", "5")
    shown = outcome.out + outcome.err
    assert outcome.code in (0, 4), shown
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "flashinfer\nforged" not in shown
    assert "\\x1b[31mflashinfer\\nforged" in outcome.out


# --- profiles: expect keys, image names, secrets ------------------------------------------------


def _sim() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    for key in ("dataset", "shots_from"):
        data["eval"]["gsm8k"][key] = str(project_root() / data["eval"]["gsm8k"][key])
    return data


def _load(data: dict[str, Any], tmp_path: Path) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path))
    assert caught.value.hint, caught.value.message
    return caught.value.message


def test_an_unknown_expect_key_is_refused_at_load(tmp_path: Path) -> None:
    data = _sim()
    data["variants"]["native"]["expect"]["dsa_prefil_backend"] = "flashinfer_sparse_mla"
    message = _load(data, tmp_path)
    assert "variants.native.expect" in message or "expect names" in message
    assert "dsa_prefil_backend" in message


@pytest.mark.parametrize(("field", "value"), [
    ("repository", "Opsctl/Sim"),  # upper case
    ("repository", "opsctl/sim@sha256:" + "a" * 64),  # digest form
    ("repository", "rel/sim --privileged"),
    ("repository", "opsctl/sim:tag"),  # opsctl tags its builds itself
    ("repository", ""),
    ("repository", "opsctl//sim"),
    ("base", "Debian:bookworm"),
    ("base", "debian:book worm"),
    ("base", "debian:" + "t" * 129),
])
def test_an_image_name_no_engine_accepts_is_refused_at_load(field: str, value: str,
                                                            tmp_path: Path) -> None:
    data = _sim()
    data["image"][field] = value
    assert f"image.{field}" in _load(data, tmp_path)


@pytest.mark.parametrize(
    "repository",
    ["opsctl/sim", "registry.example.com:5000/team/opsctl-sglang", "a__b/c-d.e", "localhost/x"],
)
def test_a_well_formed_repository_still_loads(repository: str, tmp_path: Path) -> None:
    data = _sim()
    data["image"]["repository"] = repository
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_profile(str(path)).image.repository == repository


TOKEN = "hf_PlantedTokenAbCdEfGhIjKlMnOpQrStUv"
PASSWORD = "planted-password-31c9"


@pytest.mark.parametrize(("name", "value"), [
    ("DB_PASS", PASSWORD), ("UPSTREAM_AUTH", PASSWORD), ("AUTH_HEADER", PASSWORD),
    ("MODEL_REVISION", TOKEN),  # an hf_ token under an innocent name
    ("OPENAI_BASE", "sk-" + "x1" * 12),
])
def test_a_secret_in_a_profiles_env_is_refused_without_quoting_it(name: str, value: str,
                                                                   tmp_path: Path) -> None:
    data = _sim()
    data["container"]["env"][name] = value
    message = _load(data, tmp_path)
    assert name in message and value not in message and "env_from_host" in message


def test_a_token_in_extra_args_is_refused_and_never_printed(tmp_path: Path) -> None:
    data = _sim()
    data["server"]["extra_args"] = ["--hub-revision", TOKEN]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    for command in (("up", "--dry-run"), ("profile", "show")):
        outcome = run_cli(*command, "--profile", str(path))
        assert outcome.code == EXIT_USAGE, outcome.err
        assert TOKEN not in outcome.out + outcome.err and "access token" in outcome.err


def test_names_with_pass_or_auth_inside_a_word_are_no_secret(tmp_path: Path) -> None:
    data = _sim()
    data["container"]["env"].update({"BYPASS_CACHE": "1", "AUTHORING_MODE": "x"})
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_profile(str(path)).container.env["BYPASS_CACHE"] == "1"


def test_redact_masks_token_shaped_values_whatever_their_name() -> None:
    assert TOKEN not in redact(f"revision={TOKEN} and ghp_{'A1' * 15}")
    assert redact("hf_short and flashinfer") == "hf_short and flashinfer"


# --- tune: a grid with no bound -----------------------------------------------------------------


def _values(count: int) -> str:
    return ",".join(str(n) for n in range(1, count + 1))


@pytest.mark.parametrize(("extra", "said"), [
    (("--param", f"cuda_graph_max_bs={_values(1000)}", "--param",
      f"chunked_prefill_size={_values(1000)}"), "1000000 points"),
    (("--param", f"cuda_graph_max_bs={_values(40)}", "--param",
      f"chunked_prefill_size={_values(40)}"), "1600 points; without --budget"),
    (("--param", f"cuda_graph_max_bs={_values(1001)}"), "1001 values"),
])
def test_a_grid_past_the_limits_is_exit_2_before_the_engine(extra: tuple[str, ...], said: str
                                                           ) -> None:
    outcome = run_cli("tune", *extra)
    assert outcome.code == EXIT_USAGE, outcome.err  # 6 (no engine) before: it was accepted
    assert said in outcome.err and "hint:" in outcome.err


def test_a_large_grid_with_a_budget_still_starts() -> None:
    outcome = run_cli("tune", "--budget", "60", "--param", f"cuda_graph_max_bs={_values(40)}",
                      "--param", f"chunked_prefill_size={_values(40)}")
    assert outcome.code == 6, outcome.err  # past the checks, at the (absent) engine


# --- the readiness probe classifies every answer ------------------------------------------


def test_a_gzip_answer_to_the_health_probe_is_warming_not_a_crash() -> None:
    from opsctl.deploy import readiness

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=b"x")

    transport = httpx.MockTransport(handler)
    from opsctl.core.httpcap import CappedTransport

    with httpx.Client(transport=CappedTransport(transport)) as client:
        state = readiness.http_ok(client, "http://127.0.0.1:1/health_generate")
    assert state.phase is readiness.Phase.WARMING and "DecodingError" in state.detail
