"""Numbers and output paths are checked before anything is touched.

Every numeric option refuses negative, zero-where-meaningless, nan and inf values at parse time
(exit 2); DOCKER_HOST points at nothing, so a command that reached the engine would exit 6
instead. Output paths that cannot take the output (a directory where a file goes, a file where a
folder goes, a parent that is a file, an unwritable folder) exit 2 at once, before a server
(here: one that would never answer) is asked anything.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from unprivileged import without_dac_override

NO_ENGINE = "unix:///nonexistent/opsctl-test-docker.sock"


def opsctl(
    *args: str, cwd: Path = REPO_ROOT, user: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSCTL_API")}
    env["DOCKER_HOST"] = NO_ENGINE
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60, stdin=subprocess.DEVNULL,
                          preexec_fn=without_dac_override if user else None)


@pytest.fixture(scope="module")
def silent_url() -> Iterator[str]:
    """A server that accepts connections and never answers: any request would hang."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


BAD_NUMBERS = [
    ("up", "--timeout", "-1"), ("up", "--timeout", "0"), ("up", "--timeout", "nan"),
    ("up", "--timeout", "inf"), ("up", "--timeout", "1e9"),
    ("down", "--grace", "-1"), ("down", "--grace", "3601"),
    ("logs", "--tail", "-1"),
    ("smoke", "--request-timeout", "-1"), ("smoke", "--request-timeout", "nan"),
    ("smoke", "--timeout", "0"), ("smoke", "--timeout", "inf"),
    ("smoke", "--eval-questions", "0"), ("smoke", "--eval-threshold", "1.5"),
    ("smoke", "--eval-threshold", "nan"),
    ("bench", "--requests", "0"), ("bench", "--input-words", "0"),
    ("bench", "--output-tokens", "1"), ("bench", "--request-timeout", "-5"),
    ("bench", "--deadline", "0"), ("bench", "--deadline", "nan"),
    ("verify", "--timeout", "-1"), ("verify", "--timeout", "nan"),
    ("exporter", "--port", "-1"), ("exporter", "--port", "70000"),
    # Issue 25: accepted before.
    ("tune", "--request-timeout", "nan"), ("tune", "--request-timeout", "-1"),
    ("tune", "--budget", "inf"),
]


@pytest.mark.parametrize(("command", "option", "value"), BAD_NUMBERS,
                         ids=["{} {} {}".format(*case) for case in BAD_NUMBERS])
def test_bad_numbers_exit_2_before_anything_is_touched(command: str, option: str, value: str,
                                                       silent_url: str) -> None:
    extra = ["--base-url", silent_url] if command in ("smoke", "bench", "verify") else []
    run = opsctl(command, *extra, f"{option}={value}")
    assert run.returncode == 2, run.stdout + run.stderr
    assert option in run.stderr and "Traceback" not in run.stderr


def test_up_timeout_minus_one_never_reaches_the_engine() -> None:
    """The reported defect: `up --replace --timeout -1` removed the running deployment first."""
    run = opsctl("up", "--replace", "--timeout", "-1")
    assert run.returncode == 2, run.stderr
    assert "Docker" not in run.stderr


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    file = tmp_path / "a-file"
    file.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    return {"folder": folder, "file": file, "under-file": file / "report.json",
            "locked": locked / "report.json", "locked-folder": locked / "new"}


OUTPUTS = [
    # (command, option, place, extra args); file outputs first, then folder outputs.
    ("smoke", "--json", "folder"),
    ("smoke", "--json", "under-file"),
    ("smoke", "--json", "locked"),
    ("verify", "--json", "folder"),
    ("verify", "--json", "under-file"),
    ("verify", "--json", "locked"),
    ("report", "--out", "folder"),
    ("report", "--out", "under-file"),
    ("report", "--out", "locked"),
    ("bench", "--out", "file"),
    ("bench", "--out", "under-file"),
    ("bench", "--out", "locked-folder"),
    ("monitor up", "--config-dir", "file"),
    ("monitor up", "--config-dir", "locked-folder"),
    ("monitor render", "--out", "file"),
    ("monitor render", "--out", "under-file"),
    ("monitor compose", "--config-dir", "file"),
    ("monitor compose", "--config-dir", "locked-folder"),
]


@pytest.mark.parametrize(("command", "option", "place"), OUTPUTS,
                         ids=["{} {} {}".format(*case) for case in OUTPUTS])
def test_unusable_output_paths_exit_2_before_any_work(command: str, option: str, place: str,
                                                      places: dict[str, Path],
                                                      silent_url: str) -> None:
    target = places[place]
    extra = {"smoke": ["--base-url", silent_url], "bench": ["--base-url", silent_url],
             "verify": ["--base-url", silent_url], "report": ["--prometheus", silent_url],
             "monitor up": ["--dry-run"]}.get(command, [])
    run = opsctl(*command.split(), *extra, option, str(target), user=True)
    assert run.returncode == 2, run.stdout + run.stderr
    assert option in run.stderr and "Traceback" not in run.stderr
    assert not (target.exists() and place in ("locked", "locked-folder", "under-file"))


def test_the_default_report_folder_is_checked_too(tmp_path: Path, silent_url: str) -> None:
    (tmp_path / "out").write_text("a file where smoke's report folder goes")
    run = opsctl("smoke", "--base-url", silent_url, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "is a file; a directory is wanted" in run.stderr


@pytest.mark.parametrize("command", [["verify", "-p", "sim"], ["smoke"]])
@pytest.mark.parametrize("url", ["", "ftp://x", "[/x]bad"])
def test_a_base_url_that_is_not_http_is_exit_2_before_any_request(
    command: list[str], url: str
) -> None:
    result = subprocess.run([sys.executable, "-m", "opsctl", *command, "--base-url", url],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "not" in result.stderr and "URL" in result.stderr


# Issue 25: each was a traceback (exit 1) or silently accepted.
BAD_VALUES = [
    ("bench", "--base-url", "http://127.0.0.1:99999", "port"),
    ("smoke", "--base-url", "http://127.0.0.1:99999", "port"),
    ("verify", "--base-url", "http://127.0.0.1:99999", "port"),
    ("smoke", "--pushgateway", "not a url", "--pushgateway"),
    ("bench", "--pushgateway", "not a url", "--pushgateway"),
    ("bench", "--concurrency", "1,,2", "empty item"),
    ("bench", "--concurrency", ",1,2", "empty item"),
    ("bench", "--variants", "baseline,,gathercast", "empty item"),
]


@pytest.mark.parametrize(("command", "option", "value", "says"), BAD_VALUES,
                         ids=["{} {} {}".format(*case[:3]) for case in BAD_VALUES])
def test_bad_option_values_are_one_line_exit_2(command: str, option: str, value: str, says: str,
                                               silent_url: str, tmp_path: Path) -> None:
    extra = [] if option == "--base-url" else ["--base-url", silent_url]
    if command == "verify":
        extra += ["--profile", "sim"]
    run = opsctl(command, *extra, option, value, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], run.stderr
    assert not (tmp_path / "out").exists()  # refused before any report was started


# Adversarial pass: `--image` was taken as given: `up --dry-run` planned `docker run ... a b`
# (exit 0), `--image ''` silently ran the built image, a newline split the plan's lines.
BAD_IMAGES = [
    (["up", "-p", "sim", "--dry-run"], ""),
    (["up", "-p", "sim", "--dry-run"], "a b"),
    (["up", "-p", "sim", "--dry-run"], "Opsctl/Sim:1"),
    (["up", "-p", "sim", "--dry-run"], "img\nx"),
    (["bench", "-p", "sim"], "../../x"),
    (["decide", "-p", "sim"], "x" * 600),
    (["tune", "-p", "sim"], "a b"),
]


@pytest.mark.parametrize(("command", "image"), BAD_IMAGES,
                         ids=[f"{case[0][0]}-{case[1][:12]!r}" for case in BAD_IMAGES])
def test_an_image_that_no_engine_could_name_is_exit_2_while_parsing(
        command: list[str], image: str, tmp_path: Path) -> None:
    run = opsctl(*command, "--image", image, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "--image" in run.stderr
    assert not run.stdout.strip()  # no plan printed
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("image", [
    "opsctl/sim:0.5.23-755ff08c23f4b625", "e352d64a2948", "lmsysorg/sglang:v0.5.23-cu130",
    "registry.example.com:5000/team/opsctl-sglang:t@sha256:" + "a" * 64, "[::1]:5000/a/b"])
def test_an_image_reference_docker_takes_is_accepted(image: str) -> None:
    from opsctl.image.registry import image_ref_problem

    assert image_ref_problem(image) is None
