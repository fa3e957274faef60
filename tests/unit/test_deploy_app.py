"""`up`'s launch and readiness state machine, and `down`/`status`/`logs`, against FakeEngine.

The HTTP side is httpx.MockTransport (FakeSglang) and time is a FakeClock, so nothing sleeps and
every branch (refused, 503, not listed yet, death while loading, timeout, Ctrl-C) is driven here;
tests/integration/test_lifecycle.py checks the same contract on the real engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes import Behaviour, FakeClock, FakeEngine, FakeSglang

from opsctl.config.profiles import Deployment, load_profile
from opsctl.config.runspec import run_spec
from opsctl.core import labels
from opsctl.core.errors import (
    EXIT_DAEMON,
    EXIT_LAUNCH,
    DaemonUnreachable,
    LaunchError,
    ProfileError,
)
from opsctl.deploy import app
from opsctl.deploy.launch import Launch, up
from opsctl.deploy.readiness import Phase, http_ok, probe
from opsctl.engine.api import Engine
from opsctl.engine.dockerpy import DockerEngine

PROFILE = load_profile("sim")
IMAGE = "opsctl/sim:test"
SERVED = PROFILE.model.served_name
POLL = PROFILE.readiness.poll_interval_seconds


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Removed servers' logs go to out/logs/ under the working directory: a temporary one here."""
    monkeypatch.chdir(tmp_path)


def deployment(variant: str = "gathercast") -> Deployment:
    return PROFILE.resolve(variant)


def engine_with_image() -> FakeEngine:
    return FakeEngine(images={IMAGE: {labels.PATCH_SHA256: "abc123"}})


def launch(
    engine: FakeEngine,
    server: FakeSglang,
    variant: str = "gathercast",
    *,
    clock: FakeClock | None = None,
    progress: list[app.Progress] | None = None,
    on_progress: Callable[[app.Progress], None] | None = None,
    **options: Any,
) -> app.UpResult:
    seen = progress if progress is not None else []
    collaborators = Launch(engine=engine, image_for=lambda _: IMAGE, verify=None, state=None,
                           http=server.client, clock=clock or FakeClock())
    return up(deployment(variant), collaborators, on_progress=on_progress or seen.append,
                  **options)


def phases(progress: list[app.Progress]) -> list[Phase]:
    return [p.probe.phase for p in progress]


# --- readiness ---------------------------------------------------------------------------------


def test_ready_at_once_runs_the_labelled_container() -> None:
    engine, progress = engine_with_image(), []
    result = launch(engine, FakeSglang(SERVED, ["ready"]), progress=progress)
    assert not result.already_up and result.elapsed_seconds == 0
    assert result.base_url == "http://127.0.0.1:30000"
    (container,) = engine.containers.values()
    assert container.status == "running" and container.name == "opsctl-sim"
    assert container.labels[labels.VARIANT] == "gathercast"
    assert container.labels[labels.PATCH_SHA256] == "abc123"
    assert container.labels[labels.CONFIG_HASH] == deployment().config_hash()
    assert phases(progress) == [Phase.READY]


def test_refused_then_503_is_loading_then_warming_until_ready() -> None:
    engine, progress, clock = engine_with_image(), [], FakeClock()
    server = FakeSglang(SERVED, ["refused", "refused", "503", "ready"])
    result = launch(engine, server, clock=clock, progress=progress)
    assert phases(progress) == [Phase.LOADING, Phase.LOADING, Phase.WARMING, Phase.READY]
    assert "503" in progress[2].probe.detail
    assert clock.sleeps == [POLL] * 3 and result.elapsed_seconds == pytest.approx(3 * POLL)
    assert [c.status for c in engine.containers.values()] == ["running"]


def test_healthy_but_model_not_listed_yet_keeps_waiting() -> None:
    engine, progress = engine_with_image(), []
    launch(engine, FakeSglang(SERVED, ["unlisted", "ready"]), progress=progress)
    assert phases(progress) == [Phase.WARMING, Phase.READY]
    assert repr(SERVED) in progress[0].probe.detail


def test_progress_carries_the_last_log_line() -> None:
    engine, progress = engine_with_image(), []
    engine.next_run = Behaviour(log=["Load weight begin", "", "Capture cuda graph bs [1, 2, 4]"])
    launch(engine, FakeSglang(SERVED, ["503", "ready"]), progress=progress)
    assert progress[0].last_log_line == "Capture cuda graph bs [1, 2, 4]"


@pytest.mark.parametrize("exit_code", [0, 1])
def test_exit_before_ready_is_a_launch_error_with_the_log_and_removes_it(exit_code: int) -> None:
    engine = engine_with_image()
    engine.next_run = Behaviour(
        exit_after_inspects=2,
        exit_code=exit_code,
        log=["Load weight begin", "torch.OutOfMemoryError: CUDA out of memory", "Received sigquit"],
    )
    with pytest.raises(LaunchError) as caught:
        launch(engine, FakeSglang(SERVED, ["refused"]))
    error = caught.value
    assert error.exit_code == EXIT_LAUNCH
    assert f"exited before it was ready (exit code {exit_code})" in error.message
    assert "CUDA out of memory" in error.message and "container removed" in error.message
    assert "--- log tail ---" in error.details and "Received sigquit" in error.details
    assert engine.containers == {}


def test_readiness_timeout_is_a_launch_error_and_removes_it() -> None:
    engine, clock = engine_with_image(), FakeClock()
    with pytest.raises(LaunchError) as caught:
        launch(engine, FakeSglang(SERVED, ["503"]), clock=clock, timeout_seconds=10)
    assert "not ready after 10 s" in caught.value.message and "warming" in caught.value.message
    assert clock.time - 1000.0 > 10
    assert engine.containers == {}


def test_ctrl_c_from_the_progress_callback_removes_the_container() -> None:
    engine, seen = engine_with_image(), []

    def interrupt_second(progress: app.Progress) -> None:
        seen.append(progress)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launch(engine, FakeSglang(SERVED, ["refused"]), on_progress=interrupt_second)
    assert engine.containers == {} and engine.stopped == [("opsctl-sim", app.CLEANUP_GRACE_SECONDS)]


def test_ctrl_c_while_sleeping_removes_the_container() -> None:
    engine = engine_with_image()
    with pytest.raises(KeyboardInterrupt):
        launch(engine, FakeSglang(SERVED, ["503"]), clock=FakeClock(interrupt_on_sleep=1))
    assert engine.containers == {}


def test_daemon_error_while_waiting_propagates_and_cleans_up() -> None:
    engine = engine_with_image()
    engine.fail("inspect", DaemonUnreachable("Docker daemon unreachable: gone"))
    with pytest.raises(DaemonUnreachable) as caught:
        launch(engine, FakeSglang(SERVED, ["ready"]))
    assert caught.value.exit_code == EXIT_DAEMON
    assert engine.containers == {}


def test_port_taken_is_a_launch_error_and_starts_nothing() -> None:
    engine = engine_with_image()
    engine.ports_in_use.add(PROFILE.container.host_port)
    with pytest.raises(LaunchError, match="host port already taken"):
        launch(engine, FakeSglang(SERVED, ["ready"]))
    assert engine.containers == {}


def test_missing_image_says_how_to_build_it() -> None:
    engine = FakeEngine()
    with pytest.raises(LaunchError) as caught:
        launch(engine, FakeSglang(SERVED, ["ready"]))
    assert "opsctl build --profile sim" in caught.value.hint
    assert "run" not in engine.calls


# --- an existing deployment --------------------------------------------------------------------


def test_already_up_with_the_same_configuration_is_left_alone() -> None:
    engine = engine_with_image()
    first = launch(engine, FakeSglang(SERVED, ["ready"]))
    again = launch(engine, FakeSglang(SERVED, ["refused"]))
    assert again.already_up and again.container.id == first.container.id
    assert engine.calls.count("run") == 1 and engine.stopped == []


def test_another_configuration_without_replace_is_refused_untouched() -> None:
    engine = engine_with_image()
    launch(engine, FakeSglang(SERVED, ["ready"]), "baseline")
    with pytest.raises(LaunchError) as caught:
        launch(engine, FakeSglang(SERVED, ["ready"]), "gathercast")
    assert "variant 'baseline'" in caught.value.message and "--replace" in caught.value.hint
    assert [c.labels[labels.VARIANT] for c in engine.containers.values()] == ["baseline"]


def test_replace_stops_the_old_one_with_its_grace_and_starts_the_new() -> None:
    engine = engine_with_image()
    launch(engine, FakeSglang(SERVED, ["ready"]), "baseline")
    launch(engine, FakeSglang(SERVED, ["ready"]), "bf16kv", replace=True)
    assert [c.labels[labels.VARIANT] for c in engine.containers.values()] == ["bf16kv"]
    assert engine.stopped == [("opsctl-sim", PROFILE.container.stop_grace_seconds)]


def test_an_exited_server_of_the_profile_is_replaced_without_asking() -> None:
    engine = engine_with_image()
    old = engine.add_container("opsctl-sim", run_spec(deployment("baseline"), IMAGE).labels,
                               status="exited", exit_code=137)
    launch(engine, FakeSglang(SERVED, ["ready"]))
    assert old.id not in engine.containers and len(engine.containers) == 1


# --- down, status, logs, dry run -----------------------------------------------------------------


def server_labels(
    profile: str, variant: str = "baseline", url: str = "http://127.0.0.1:1"
) -> dict[str, str]:
    return {labels.MANAGED: labels.TRUE, labels.ROLE: labels.ROLE_SERVER, labels.PROFILE: profile,
            labels.VARIANT: variant, labels.BASE_URL: url, labels.SERVED_MODEL: SERVED,
            labels.STOP_GRACE_SECONDS: "7"}


def test_down_removes_only_opsctl_servers_of_the_profile() -> None:
    engine = FakeEngine()
    engine.add_container("opsctl-a", server_labels("a"))
    engine.add_container("opsctl-b", server_labels("b"))
    engine.add_container("foreign", {labels.ROLE: labels.ROLE_SERVER, labels.PROFILE: "a"})
    assert app.down(engine, "a").removed == ["opsctl-a"]
    assert engine.stopped == [("opsctl-a", 7)]
    assert app.down(engine, None, grace_seconds=1).removed == ["opsctl-b"]
    assert [c.name for c in engine.containers.values()] == ["foreign"]


def test_status_reads_labels_uptime_and_probes_readiness() -> None:
    engine = FakeEngine()
    engine.add_container("opsctl-a", server_labels("a", "gathercast"))
    engine.add_container("opsctl-b", server_labels("b"), status="exited", exit_code=1)
    result = app.status(engine, http=FakeSglang(SERVED, ["503"]).client, clock=FakeClock())
    first, second = result
    assert (first.name, first.profile, first.variant, first.readiness) == (
        "opsctl-a",
        "a",
        "gathercast",
        "warming",
    )
    assert first.uptime == "1h00m00s" and first.patch_sha256 == "none"
    assert (second.uptime, second.readiness) == ("-", "exited (exit 1)")


def test_logs_of_the_one_server_or_a_clear_error() -> None:
    engine = FakeEngine()
    with pytest.raises(LaunchError, match="no opsctl server"):
        app.logs(engine, None, follow=False, tail=10)
    engine.add_container("opsctl-a", server_labels("a"), log=["one", "two", "three"])
    assert "".join(app.logs(engine, None, follow=False, tail=2).chunks) == "two\nthree\n"
    assert "".join(app.logs(engine, "a", follow=True, tail=1).chunks) == "three\n"
    engine.add_container("opsctl-b", server_labels("b"))
    with pytest.raises(LaunchError, match="several servers run"):
        app.logs(engine, None, follow=False, tail=10)


def test_base_url_for_needs_a_running_server() -> None:
    engine = FakeEngine()
    engine.add_container("opsctl-a", server_labels("a", url="http://127.0.0.1:9"), status="exited")
    with pytest.raises(LaunchError, match="no running opsctl server"):
        app.base_url_for(engine, "a")
    engine.add_container("opsctl-a2", server_labels("a", url="http://127.0.0.1:8"))
    assert app.base_url_for(engine, "a") == "http://127.0.0.1:8"


def test_dry_run_without_a_build_says_what_is_missing() -> None:
    def not_built(_: Deployment) -> str:
        raise ProfileError("no lock yet", hint="build first")

    plan = app.dry_run(deployment(), not_built)
    assert plan.spec.image == f"<{PROFILE.image.repository}: no lock yet>"
    assert plan.base_url == "http://127.0.0.1:30000"
    assert plan.spec.labels[labels.VARIANT] == "gathercast"


# --- the probe on its own, and the engine contract ------------------------------------------------


def answering(routes: dict[str, httpx.Response | type[Exception]]) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        answer = routes[request.url.path]
        if isinstance(answer, httpx.Response):
            return answer
        raise answer("no", request=request)  # type: ignore[call-arg]

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_probe_treats_a_refused_or_timed_out_or_locked_server_as_not_ready() -> None:
    url = "http://server"
    refused = answering({"/health_generate": httpx.ConnectError})
    assert probe(refused, url, SERVED).phase is Phase.LOADING
    slow = answering({"/health_generate": httpx.ReadTimeout})
    assert probe(slow, url, SERVED).phase is Phase.WARMING
    locked = answering({"/health_generate": httpx.Response(200), "/v1/models": httpx.Response(401)})
    assert probe(locked, url, SERVED).phase is Phase.WARMING
    odd = answering(
        {"/health_generate": httpx.Response(200), "/v1/models": httpx.Response(200, json=[])}
    )
    assert probe(odd, url, SERVED).phase is Phase.WARMING
    assert (
        http_ok(answering({"/-/ready": httpx.Response(200)}), f"{url}/-/ready").phase is Phase.READY
    )


@pytest.mark.parametrize("implementation", [DockerEngine, FakeEngine])
def test_engines_implement_every_method_of_the_protocol(implementation: type) -> None:
    members = [name for name, value in vars(Engine).items()
               if callable(value) and not name.startswith("_")]
    assert {"run", "find", "stop_and_remove", "build"} <= set(members)
    for name in members:
        expected = list(inspect.signature(getattr(Engine, name)).parameters)
        assert list(inspect.signature(getattr(implementation, name)).parameters) == expected, name
