"""`opsctl doctor` against the shared fake engine and a FAKE `nvidia-smi` (and `lspci`) on PATH.

Every nvidia-smi/lspci answer below is a SAMPLE written for these tests (driver versions, UUIDs,
memory figures and topologies are made up in the shapes the tools print), not a real
machine's output. The real engine's part is tests/integration/test_doctor_engine.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoints import write_checkpoint
from doctor_samples import (
    BASE,
    GLM5,
    SAMPLE_FOUR,
    SAMPLE_GARBAGE,
    SAMPLE_H100,
    SAMPLE_LIST,
    SAMPLE_OLD_DRIVER,
    SAMPLE_RTX,
    fake_tools,
)
from fakes import FakeClock, FakeEngine

from opsctl.config.profiles import load_profile
from opsctl.core.errors import DaemonUnreachable
from opsctl.core.tools import run_tool
from opsctl.doctor import app as doctor_app
from opsctl.doctor.app import DoctorRequest, Host, Tools, doctor
from opsctl.doctor.checks import FAIL, NO_GPU, PASS, WARN, parse_gpus
from opsctl.engine.api import EngineInfo, PortBinding

GIB = 2**30


def checkpoint(folder: Path, nextn: bool = True) -> Path:
    """tests/checkpoints.py's folder; doctor reads the tokenizer's files only (no transformers
    on the host side), so two files stand for it."""
    write_checkpoint(folder, nextn=nextn, tokenizer=False)
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


class Box:
    """The collaborators of one doctor run: a fake engine, fake tools on PATH, a fake host."""

    def __init__(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str | None = SAMPLE_RTX
    ):
        self.tmp_path = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        if query is not None:
            fake_tools(self.bin, query)
        monkeypatch.setenv("PATH", str(self.bin))
        monkeypatch.setenv("OPSCTL_LOCK_DIR", str(tmp_path / "locks"))
        monkeypatch.chdir(tmp_path)
        self.engine = FakeEngine()
        root = tmp_path / "docker-root"
        root.mkdir()
        self.engine.engine_info = EngineInfo(version="0.0.0-fake", api_version="1.41",
                                             runtimes=("nvidia", "runc"), default_runtime="runc",
                                             root_dir=str(root))
        self.clock = FakeClock()
        self.free = {"": (100 * GIB, 50 * GIB)}  # path prefix -> (total, free)
        self.port: str | None = None
        self.connect_error: Exception | None = None
        self.on_run = lambda argv: None

    def host(self) -> Host:
        def usage(path: str) -> tuple[int, int]:
            return next(v for k, v in sorted(self.free.items(), reverse=True) if path.startswith(k))

        def read(path: Path) -> str:
            return "MemTotal:       24576000 kB\n" if path == Path("/proc/meminfo") else ""

        return Host(which=shutil.which, disk_usage=usage, read_text=read,
                    count_entries=lambda path: 0, port_problem=lambda address, port: self.port)

    def tools(self) -> Tools:
        def connect() -> FakeEngine:
            if self.connect_error is not None:
                raise self.connect_error
            return self.engine

        def run(argv: list[str], timeout: float) -> tuple[int, str]:
            self.on_run(argv)
            assert 0 < timeout <= doctor_app.TOOL_TIMEOUT_S
            return run_tool(argv, timeout_s=timeout)

        return Tools(connect=connect, run=run, clock=self.clock, host=self.host())

    def glm5_ready(self) -> Path:
        """The base present with CUDA 13, locked; GPUs given to containers; a whole checkpoint."""
        image_id = self.engine.add_image(BASE)
        self.engine.images[BASE].env = {"CUDA_VERSION": "13.0.1"}  # SAMPLE image config
        locks = self.tmp_path / "locks"
        locks.mkdir(exist_ok=True)
        (locks / f"{GLM5}.json").write_text(json.dumps(
            {"bases": {BASE: {"digest": image_id, "kind": "image-id"}}}))
        self.engine.gpu_answer = (0, SAMPLE_LIST)
        return checkpoint(self.tmp_path / "ckpt")

    def run(self, profile: str = GLM5, **request: object) -> dict[str, doctor_app.Check]:
        report = doctor(DoctorRequest(load_profile(profile), **request), self.tools())  # type: ignore[arg-type]
        self.report = report
        return {check.name: check for check in report.checks}


def test_sim_profile_without_a_gpu_fails_the_gpu_rows_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch, query=None)  # no nvidia-smi on PATH
    box.engine.add_image("opsctl/debian-base:bookworm")
    rows = box.run("sim")
    for name in ("GPUs in a container", "GPU count", "GPU model", "GPU compute capability",
                 "GPU memory"):
        assert (rows[name].status, rows[name].detail) == (FAIL, NO_GPU), name
    assert rows["P2P, IOMMU, ACS"].status == FAIL
    assert "nvidia-smi not found" in rows["P2P, IOMMU, ACS"].detail
    assert box.engine.gpu_runs == []  # no container is started for GPUs the host lacks
    assert rows["docker"].status == PASS and "0.0.0-fake" in rows["docker"].detail
    assert (
        rows["checkpoint"].status == PASS and "model.host_path unset" in rows["checkpoint"].detail
    )
    assert rows["driver for opsctl/debian-base:bookworm"].status == PASS  # not a CUDA image
    assert rows["base opsctl/debian-base:bookworm"].status == WARN  # present, never locked
    assert rows["/dev/shm"].status == PASS and "64m" in rows["/dev/shm"].detail
    assert rows["port 127.0.0.1:30000"].status == PASS
    assert box.report.failed and "pull_image" not in box.engine.calls


def test_a_ready_gpu_host_passes_every_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    folder = box.glm5_ready()
    rows = box.run(checkpoint=folder)
    assert not box.report.failed, [(c.name, c.detail) for c in box.report.failed]
    assert [c.name for c in box.report.checks if c.status == WARN] == []
    assert "lists 8 GPU(s)" in rows["GPUs in a container"].detail
    assert "nvidia runtime is registered" in rows["GPUs in a container"].detail
    image, command, timeout = box.engine.gpu_runs[0]
    assert command == ["nvidia-smi", "-L"] and timeout <= doctor_app.GPU_RUN_TIMEOUT_S
    assert image == BASE  # the only local image (the variants' own are not built yet)
    assert rows["GPU count"].detail == "8 GPU(s); the profile uses [0, 1, 2, 3, 4, 5, 6, 7]"
    assert rows["GPU compute capability"].detail == "12.0"
    assert rows[f"driver for {BASE}"].detail == "CUDA 13.0.1; host driver 580.00.01"
    assert "SYS" not in rows["P2P, IOMMU, ACS"].fix
    assert rows["checkpoint safetensors"].status == PASS
    mtp = [name for name in rows if name.startswith("checkpoint MTP")]
    assert mtp and "mtp" in mtp[0]  # names the variants that draft with the NextN layer
    assert rows[f"base {BASE}"].detail.startswith("present, matches its lock")
    assert "ipc_host" in rows["/dev/shm"].detail


@pytest.mark.parametrize(("query", "failing"), [
    (SAMPLE_H100, {"GPU model", "GPU compute capability"}),
    (SAMPLE_FOUR, {"GPU count"}),
    (SAMPLE_OLD_DRIVER, {f"driver for {BASE}"}),
])
def test_gpus_and_driver_are_judged_against_the_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str, failing: set[str]) -> None:
    box = Box(tmp_path, monkeypatch, query=query)
    folder = box.glm5_ready()
    rows = box.run(checkpoint=folder)
    assert {c.name for c in box.report.failed} == failing
    if query is SAMPLE_H100:
        assert rows["GPU memory"].status == WARN and "81559 MiB" in rows["GPU memory"].detail
    if query is SAMPLE_FOUR:
        assert "[4, 5, 6, 7] absent" in rows["GPU count"].detail
    if query is SAMPLE_OLD_DRIVER:
        assert "570.00.01" in rows[f"driver for {BASE}"].detail


def test_an_unknown_gpu_count_is_one_line_per_gpu_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch, query=SAMPLE_GARBAGE)
    rows = box.run(checkpoint=box.glm5_ready())
    assert rows["GPU count"].status == FAIL
    assert rows["GPU count"].detail.startswith(
        "the GPU count is unknown: unexpected nvidia-smi line"
    )
    assert "\n" not in rows["GPU count"].detail


def test_a_failing_nvidia_smi_is_a_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_SMI_EXIT", "9")
    rows = box.run(checkpoint=box.glm5_ready())
    assert rows["GPU model"].detail.startswith("nvidia-smi failed (exit 9)")


def test_the_gpu_count_option_replaces_the_profiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch, query=SAMPLE_FOUR)
    rows = box.run(checkpoint=box.glm5_ready(), gpu_count=4)
    assert (
        rows["GPU count"].status == PASS
        and rows["GPU count"].detail == "4 GPU(s); the profile needs 4"
    )


def test_engine_refusing_gpus_names_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    folder = box.glm5_ready()
    box.engine.gpu_answer = FakeEngine().gpu_answer  # the fake's default: Docker's refusal
    rows = box.run(checkpoint=folder)
    row = rows["GPUs in a container"]
    assert row.status == FAIL and "could not select device driver" in row.detail
    assert "nvidia-ctk runtime configure" in row.fix


def test_no_local_image_means_no_gpu_container_and_no_pull(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    rows = box.run(checkpoint=checkpoint(tmp_path / "ckpt"))
    assert rows["GPUs in a container"].detail.startswith("no local image")
    assert rows[f"base {BASE}"].status == FAIL and f"docker pull {BASE}" in rows[f"base {BASE}"].fix
    assert rows[f"driver for {BASE}"].status == WARN
    assert "pull_image" not in box.engine.calls and box.engine.gpu_runs == []


def test_a_moved_base_fails_against_its_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    folder = box.glm5_ready()
    (tmp_path / "locks" / f"{GLM5}.json").write_text(json.dumps(
        {"bases": {BASE: {"digest": "sha256:" + "e" * 64, "kind": "image-id"}}}))
    rows = box.run(checkpoint=folder)
    row = rows[f"base {BASE}"]
    assert row.status == FAIL and "locked sha256:eeee" in row.detail and "--force" in row.fix


def test_docker_unreachable_is_a_row_and_the_engine_is_not_asked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    box.connect_error = DaemonUnreachable("Docker daemon unreachable: sample", hint="start it")
    rows = box.run(checkpoint=checkpoint(tmp_path / "ckpt"))
    assert (rows["docker"].status, rows["docker"].detail) == (
        FAIL,
        "Docker daemon unreachable: sample",
    )
    assert rows["base images"].detail == "not checked: Docker daemon unreachable: sample"
    assert rows["GPU model"].status == PASS  # the host's own checks still run
    assert rows["disk (images)"].status == WARN


def test_docker_failing_mid_call_stops_further_engine_calls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    folder = box.glm5_ready()
    box.engine.fail("run_to_completion", DaemonUnreachable("the Docker engine stopped answering",
                                                           hint="check `docker info`"))
    rows = box.run(checkpoint=folder)
    assert rows["GPUs in a container"].detail == "the Docker engine stopped answering"
    calls = len(box.engine.calls)
    assert rows["base images"].detail.startswith("not checked")
    assert box.engine.calls.count("run_to_completion") == 1 and len(box.engine.calls) == calls


def test_checkpoint_problems_are_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    box.glm5_ready()
    folder = checkpoint(tmp_path / "partial", nextn=False)
    (folder / "model-00002-of-00002.safetensors").unlink()
    rows = box.run(checkpoint=folder)
    assert rows["checkpoint config.json"].status == PASS
    assert rows["checkpoint safetensors"].status == FAIL
    assert "model-00002-of-00002.safetensors is missing" in rows["checkpoint safetensors"].detail
    mtp = next(c for name, c in rows.items() if name.startswith("checkpoint MTP"))
    assert mtp.status == FAIL
    # The profile's own folder (/models/GLM-5-NVFP4) is not on this machine: one row.
    rows = box.run()
    assert (
        rows["checkpoint"].detail
        == "checkpoint folder /models/GLM-5-NVFP4 does not exist on this host"
    )


def test_disk_shm_and_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    folder = box.glm5_ready()
    box.free[str(tmp_path / "docker-root")] = (100 * GIB, 10 * GIB)  # 10% < 15%
    box.free["/dev/shm"] = (8 * GIB, 4 * GIB)
    box.port = "Address already in use"
    rows = box.run(checkpoint=folder)
    assert rows["disk (images)"].status == FAIL and "(10%)" in rows["disk (images)"].detail
    assert rows["disk (out/)"].status == PASS
    assert rows["port 127.0.0.1:30000"].detail == "taken: Address already in use"
    # An opsctl server publishing the port holds it: `up` replaces it.
    box.engine.add_container("opsctl-glm5", {"opsctl.managed": "true", "opsctl.role": "server",
                                             "opsctl.profile": GLM5},
                             ports=[PortBinding(30000, 30000)])
    assert box.run(checkpoint=folder)["port 127.0.0.1:30000"].status == PASS
    rows = box.run("sim")
    assert rows["/dev/shm"].status == PASS  # 64m against 23.4 GiB of memory


def test_no_check_starts_past_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Box(tmp_path, monkeypatch)
    folder = box.glm5_ready()
    box.on_run = lambda argv: box.clock.sleep(30)  # each tool run "takes" 30 s
    rows = box.run(checkpoint=folder)
    skipped = [c.name for c in box.report.checks if c.detail.startswith("not run: the 50 s budget")]
    assert skipped and "base images" in skipped and "docker" not in skipped
    assert rows["base images"].status == WARN


def test_ctrl_c_in_a_check_is_a_partial_report_of_the_rows_so_far(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 item 5: a Ctrl-C inside a check was a bare exit 130 with no report; now the
    rows so far are kept, the rest marked not run, and the report says partial."""
    box = Box(tmp_path, monkeypatch)
    folder = box.glm5_ready()

    def interrupt(argv: list[str]) -> None:
        raise KeyboardInterrupt

    box.on_run = interrupt  # the first tool doctor runs (nvidia-smi) meets a Ctrl-C
    rows = box.run(checkpoint=folder)
    assert rows["docker"].status == PASS  # checked before the Ctrl-C
    not_run = [c.name for c in box.report.checks if c.detail == "not run: interrupted (Ctrl-C)"]
    assert not_run and "base images" in not_run and "docker" not in not_run
    payload = box.report.to_json()
    assert payload["partial"] is True and payload["partial_reason"] == "interrupted (Ctrl-C)"


def test_parse_gpus_reads_the_query_and_refuses_other_lines() -> None:
    gpus = parse_gpus(SAMPLE_RTX)
    assert len(gpus) == 8 and gpus[7].index == 7 and gpus[0].capability == (12, 0)
    assert gpus[0].memory_mib == 97887 and gpus[0].driver == "580.00.01"
    assert parse_gpus("0, Sample GPU, [N/A], [N/A], 470.00.01\n")[0].capability is None
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_gpus(SAMPLE_GARBAGE)
