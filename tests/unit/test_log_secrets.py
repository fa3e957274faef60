"""Server logs opsctl saves or prints hold no secret. sglang logs its resolved arguments at
start-up, `api_key` among them (0.5.23's `_server_args_for_logging` masks only watermark
secrets), and `--api-key` carries the value of the profile's server.api_key_env: a saved log and
`opsctl logs` mask the values of the variables the server was given (its `opsctl.secret-env`
label names them), the API key, URL credentials and token-shaped values."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from fakes import FakeEngine

from opsctl.config.profiles import load_profile
from opsctl.config.runspec import deployment_labels
from opsctl.core import labels
from opsctl.core.paths import project_root
from opsctl.core.redact import redact_byte_stream, redact_stream
from opsctl.deploy.app import logs
from opsctl.deploy.logsave import save_log

KEY = "k3y-of-the-server-0123456789"
TOKEN_VALUE = "not-token-shaped-but-secret-42"
SERVER = {labels.MANAGED: labels.TRUE, labels.ROLE: labels.ROLE_SERVER, labels.PROFILE: "p",
          labels.VARIANT: "baseline", labels.SECRET_ENV: "SERVER_KEY,MY_TOKEN"}
ARGS_LINE = (f"server_args={{'model_path': '/models/glm', 'api_key': '{KEY}', "
             f"'served_model_name': 'glm-5'}}")


@pytest.fixture()
def host_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVER_KEY", KEY)
    monkeypatch.setenv("MY_TOKEN", TOKEN_VALUE)


def _split_everywhere(text: str) -> list[list[str]]:
    return [[text[:cut], text[cut:]] for cut in range(len(text) + 1)]


def test_a_secret_cut_by_any_chunk_boundary_is_masked() -> None:
    text = f"start\n{ARGS_LINE}\nend\n"
    for chunks in _split_everywhere(text):
        out = "".join(redact_stream(chunks, [KEY]))
        assert KEY not in out and "end\n" in out and out.startswith("start\n"), chunks


def test_a_line_without_end_is_scrubbed_in_bounded_pieces() -> None:
    line = "x" * 300_000 + KEY + "y" * 300_000
    pieces = list(redact_stream((line[i:i + 4096] for i in range(0, len(line), 4096)), [KEY]))
    assert KEY not in "".join(pieces)
    assert max(len(piece) for piece in pieces) < 80 * 1024
    assert "".join(pieces).count("x") == 300_000


def test_bytes_that_are_not_utf8_come_back_as_they_were() -> None:
    raw = [b"\xff\xfe half \xe2\x82", b"\xac euro " + KEY.encode() + b"\n"]
    out = b"".join(redact_byte_stream(raw, [KEY]))
    assert out.startswith(b"\xff\xfe half \xe2\x82\xac euro ") and KEY.encode() not in out


def test_the_saved_log_masks_what_the_server_was_given(tmp_path: Path, host_env: None) -> None:
    engine = FakeEngine()
    server = engine.add_container("opsctl-p-baseline", SERVER,
                                  log=[ARGS_LINE, f"env MY_TOKEN={TOKEN_VALUE}", "ready"])
    path = save_log(engine, server.info(), tmp_path, "test", datetime(2026, 12, 4, tzinfo=UTC))
    text = path.read_text()
    assert KEY not in text and TOKEN_VALUE not in text
    assert "# masked: the values of $SERVER_KEY, $MY_TOKEN" in text and "ready" in text
    assert "NOT masked" not in text


def test_the_saved_log_says_which_values_it_could_not_mask(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVER_KEY", KEY)
    monkeypatch.delenv("MY_TOKEN", raising=False)
    engine = FakeEngine()
    server = engine.add_container("opsctl-p-baseline", SERVER, log=[ARGS_LINE])
    text = save_log(engine, server.info(), tmp_path, "test",
                    datetime(2026, 12, 4, tzinfo=UTC)).read_text()
    assert KEY not in text
    assert "# NOT masked (not set where opsctl ran): $MY_TOKEN" in text


def test_opsctl_logs_masks_what_the_server_was_given(host_env: None) -> None:
    engine = FakeEngine()
    engine.add_container("opsctl-p-baseline", SERVER, log=[ARGS_LINE])
    for follow in (False, True):
        out = "".join(logs(engine, "p", follow=follow, tail=100).chunks)
        assert KEY not in out and "served_model_name" in out


def test_the_server_label_names_the_secret_variables_never_their_values(tmp_path: Path) -> None:
    profile_path = tmp_path / "p.yaml"
    text = (project_root() / "deploy" / "sim.yaml").read_text()
    profile_path.write_text(text)
    deployment = load_profile(profile_path).resolve("baseline")
    assert labels.SECRET_ENV not in deployment_labels(deployment, "img", {})
    server = deployment.server.model_copy(update={"api_key_env": "SERVER_KEY"})
    container = deployment.profile.container.model_copy(update={"env_from_host": ["MY_TOKEN"]})
    profile = deployment.profile.model_copy(update={"container": container})
    named = deployment.model_copy(update={"server": server, "profile": profile})
    assert deployment_labels(named, "img", {})[labels.SECRET_ENV] == "SERVER_KEY,MY_TOKEN"


def test_a_url_after_a_long_run_of_letters_still_loses_its_credentials() -> None:
    """The URL-userinfo pattern's scheme is bounded to 32 characters (unbounded, a run of n
    letters cost n^2 steps: bench/redact_scaling.py records both side by side); a URL glued to
    a longer run of letters is still found from its last 32."""
    long_scheme = "q" * 50 + "https://user:pw@host/x"
    assert "pw" not in "".join(redact_stream([long_scheme], []))


HF_TOKEN = "hf_" + "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8"  # token-shaped: masked by its shape alone


@pytest.mark.parametrize("head", [23, 25, 28])
def test_a_token_across_the_long_line_cut_is_masked_whole(head: int) -> None:
    """Found by review: a line past 64k characters with a token cut by a chunk's end there had
    the token's first part masked by its shape and the rest let through (`****l2M3n4O5p6`).
    The cut is now at a blank before 64k, and a token holds none."""
    start = 66_000 - head  # the token starts `head` characters before the 66th 1000-char chunk ends
    text = ("word " * 14_000)[:start - 1] + " " + HF_TOKEN + " end " + "word " * 100 + "\n"
    out = "".join(redact_stream((text[i:i + 1000] for i in range(0, len(text), 1000)), []))
    assert HF_TOKEN[head - 3:] not in out and " **** end " in out
    assert len(out) == len(text) - len(HF_TOKEN) + 4


def test_a_secret_of_several_lines_sent_a_line_at_a_time_is_masked() -> None:
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n" \
          "-----END PRIVATE KEY-----"
    frames = [f"2026-12-04T10:00:00Z {line}\n" for line in f"key follows\n{key}\nnext".split("\n")]
    out = "".join(redact_stream(frames, [key]))
    assert "MIIEvQ" not in out and "BKcwgg" not in out and "FAASC" not in out
    assert "key follows" in out and out.count("****") == 4


def test_a_secret_with_a_character_split_between_byte_chunks_is_masked() -> None:
    secret = "pässwörd-geheim"
    raw = f"key={secret}\n".encode()
    split = raw.index("ä".encode()) + 1  # inside the two bytes of ä
    out = b"".join(redact_byte_stream([raw[:split], raw[split:]], [secret]))
    assert secret.encode() not in out and out.startswith(b"key=****")
