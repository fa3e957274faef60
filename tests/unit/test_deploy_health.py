"""The server heals and says so: restart policy, health check and log rotation in the RunSpec
and the dry run; `status`'s health, restarts, last exit and crash loop; the Docker SDK seam's
daemon-failure mapping and log frames."""

from __future__ import annotations

import io
import subprocess
import sys

import docker.errors
import pytest
import requests
import yaml
from fakes import FakeClock, FakeEngine, FakeSglang

from opsctl.config.profiles import load_profile
from opsctl.config.runspec import HEALTH_GENERATION_ENV, run_spec
from opsctl.core import labels
from opsctl.core.errors import EXIT_DAEMON, DaemonUnreachable, ProfileError
from opsctl.core.paths import project_root
from opsctl.deploy import app, view
from opsctl.engine.api import LogRotation
from opsctl.engine.dockerpy import LOG_FRAME_HEADER, answering, create_kwargs, read_exactly

SIM = load_profile("sim")
GLM = load_profile("glm5-nvfp4-rtx6000")


def test_the_run_spec_heals_and_rotates_from_the_profile() -> None:
    spec = run_spec(GLM.resolve("gathercast"), "img")
    assert spec.restart_max == 3
    assert spec.log_rotation == LogRotation(max_size="100m", max_files=5)
    check = spec.healthcheck
    assert check is not None and check.start_period_seconds == 3600  # readiness.timeout_seconds
    assert (check.interval_seconds, check.timeout_seconds, check.retries) == (30, 10, 3)
    assert check.command.startswith('python3 -c "') and check.command.endswith(
        " http://127.0.0.1:30000/health")
    assert "'" not in check.command and "curl" not in check.command
    assert spec.env[HEALTH_GENERATION_ENV] == "false"


def test_the_health_command_is_valid_python_and_fails_on_a_closed_port() -> None:
    """The very command line Docker runs, through /bin/sh, against a port nothing listens on."""
    command = run_spec(SIM.resolve(), "img").healthcheck
    assert command is not None
    closed = command.command.replace(":30000/", ":9/")
    result = subprocess.run(["/bin/sh", "-c", closed.replace("python3 ", f"{sys.executable} ", 1)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "Connection refused" in result.stderr


def test_docker_gets_the_same_policy_check_and_rotation() -> None:
    kwargs = create_kwargs(run_spec(SIM.resolve(), "img"))
    assert kwargs["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert kwargs["healthcheck"]["Test"][0] == "CMD-SHELL"
    assert kwargs["healthcheck"]["StartPeriod"] == 120 * 1_000_000_000
    assert kwargs["log_config"]["Type"] == "json-file"
    assert kwargs["log_config"]["Config"] == {"max-size": "100m", "max-file": "5"}


def test_restart_max_0_never_restarts_and_a_profile_may_keep_generation_health(tmp_path) -> None:
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    data["container"]["restart_max"] = 0
    data["container"]["env"][HEALTH_GENERATION_ENV] = "true"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = run_spec(load_profile(str(path)).resolve(), "img")
    assert create_kwargs(spec)["restart_policy"] == {"Name": "no"}
    assert "--restart no" in " ".join(spec.docker_run_argv())
    assert spec.env[HEALTH_GENERATION_ENV] == "true"


@pytest.mark.parametrize("bad", [{"log_max_size": "0"}, {"log_max_size": "lots"},
                                 {"log_max_files": 0}, {"restart_max": -1},
                                 {"health_interval_seconds": 0}])
def test_log_and_health_settings_docker_would_refuse_are_refused_at_load(tmp_path, bad) -> None:
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    data["container"].update(bad)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match=next(iter(bad))):
        load_profile(str(path))


def test_the_dry_run_shows_policy_check_and_log_options() -> None:
    text = view.dry_run_text(app.dry_run(GLM.resolve("baseline"), lambda _: "img"))
    assert "--restart on-failure:3" in text and "--health-cmd" in text
    assert "--health-start-period 3600s" in text
    assert "--log-driver json-file --log-opt max-size=100m --log-opt max-file=5" in text
    assert "# restart policy: on-failure, at most 3 restarts" in text
    assert "# health check: sglang's /health (no generation) every 30 s" in text
    assert "# logs: json-file, 5 files of 100m; saved whole to out/logs/ before any removal" in text


# --- status ------------------------------------------------------------------------------------


def server(engine: FakeEngine, name: str, **state: object) -> None:
    engine.add_container(name, {labels.MANAGED: labels.TRUE, labels.ROLE: labels.ROLE_SERVER,
                                labels.PROFILE: name, labels.BASE_URL: "http://127.0.0.1:1",
                                labels.SERVED_MODEL: "glm-5"}, **state)


def rows(engine: FakeEngine) -> dict[str, app.ServerStatus]:
    result = app.status(engine, http=FakeSglang("glm-5", ["ready"]).client, clock=FakeClock())
    return {row.name: row for row in result}


def test_status_shows_health_restarts_last_exit_and_crash_loops() -> None:
    engine = FakeEngine()
    server(engine, "fresh", restart_max=3, health="healthy")
    server(engine, "healed", restart_max=3, restart_count=1, last_exit_code=137, oom_killed=True,
           health="unhealthy", health_log="Traceback\nurllib.error.HTTPError: HTTP Error 503")
    server(engine, "gave-up", status="exited", exit_code=1, restart_max=3, restart_count=3)
    server(engine, "looping", status="restarting", exit_code=1, restart_max=3, restart_count=2)
    server(engine, "old", status="exited", exit_code=0)
    found = rows(engine)
    fresh, healed = found["fresh"], found["healed"]
    assert (fresh.health, fresh.restarts, fresh.last_exit, fresh.crash_loop) == (
        "healthy", "0 of 3", "-", "")
    assert healed.health == "unhealthy: urllib.error.HTTPError: HTTP Error 503"
    assert healed.restarts == "1 of 3" and healed.last_exit == "137 (killed for memory)"
    assert healed.crash_loop == ""
    assert found["gave-up"].crash_loop == "crash loop: gave up after 3 restarts"
    assert found["gave-up"].readiness == "exited (exit 1)"
    assert found["looping"].crash_loop == "crash loop: restarting (2 of 3 restarts so far)"
    assert (found["old"].restarts, found["old"].health, found["old"].crash_loop) == ("-", "-", "")


def test_the_status_table_marks_a_crash_loop() -> None:
    engine = FakeEngine()
    server(engine, "gave-up", status="exited", exit_code=1, restart_max=3, restart_count=3)
    table = view.status_table(list(rows(engine).values()))
    headers = [column.header for column in table.columns]
    assert {"health", "restarts", "last exit"} <= set(headers)
    cell = table.columns[headers.index("restarts")]._cells[0]
    assert "crash loop: gave up after 3 restarts" in str(cell) and cell.style == "bold red"


# --- the Docker SDK seam -----------------------------------------------------------------------


def answer(status: int) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    return response


@pytest.mark.parametrize("failure", [
    requests.exceptions.ReadTimeout("UnixHTTPConnectionPool: Read timed out. (read timeout=10)"),
    requests.exceptions.ConnectionError("('Connection aborted.', RemoteDisconnected())"),
    docker.errors.APIError("500 Server Error", response=answer(500),
                           explanation="containerd: connection refused\nmore"),
])
def test_a_dying_daemon_is_exit_6_in_one_line(failure: Exception) -> None:
    with pytest.raises(DaemonUnreachable) as caught, answering("inspecting a container"):
        raise failure
    assert caught.value.exit_code == EXIT_DAEMON and "\n" not in caught.value.message
    assert "while inspecting a container" in caught.value.message
    assert caught.value.__suppress_context__


def test_docker_refusals_pass_through_for_the_caller() -> None:
    refusal = docker.errors.NotFound("404 Client Error", response=answer(404),
                                     explanation="No such container: x")
    with pytest.raises(docker.errors.NotFound), answering("inspecting a container"):
        raise refusal


def test_log_frames_end_cleanly_or_say_they_were_cut() -> None:
    body = LOG_FRAME_HEADER.pack(1, 6) + b"hello\n"
    whole = io.BytesIO(body)
    assert read_exactly(whole, 8) == body[:8] and read_exactly(whole, 6) == b"hello\n"
    assert read_exactly(whole, 8) == b""
    with pytest.raises(ConnectionError, match="ended inside a frame"):
        read_exactly(io.BytesIO(body[:10]), 8 + 6)
