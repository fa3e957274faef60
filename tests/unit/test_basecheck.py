"""`opsctl build` names a missing base (exit 3: the tag, the `docker pull`, the alternatives) and
a base whose CUDA needs a newer driver than the host's, before anything is built.

The host driver comes from a FAKE `nvidia-smi` put first on PATH: a shell script written here
that prints a driver version chosen for the test (SAMPLE output, not captured from any host).
The bases' CUDA_VERSION values are samples too, in the form NVIDIA's CUDA images set it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakes import FakeEngine, fake_nvidia_smi

from opsctl.config.profiles import load_profile
from opsctl.core.errors import EXIT_BUILD, BuildError
from opsctl.image import app as image_app
from opsctl.image import basecheck

OLD = "registry.test/sglang:0.5.15"  # a name for the test, not a published image
NEW = "lmsysorg/sglang:v0.5.21-cu130"
GLM5 = "glm5-nvfp4-rtx6000"


@pytest.fixture()
def driver_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def put(output: str) -> None:
        folder = fake_nvidia_smi(tmp_path / "bin")
        monkeypatch.setenv("OPSCTL_FAKE_DRIVER", output)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return put


def engine_with(*bases: tuple[str, str]) -> FakeEngine:
    engine = FakeEngine()
    for ref, cuda in bases:
        engine.add_image(ref)
        engine.images[ref].env = {"PATH": "/usr/bin", "CUDA_VERSION": cuda}
    return engine


def plans():  # type: ignore[no-untyped-def]
    return image_app.build_plans(load_profile(GLM5))


def test_a_missing_base_exits_3_with_the_pull_and_the_alternatives_before_any_build() -> None:
    engine = engine_with((OLD, "13.0.1"))
    assert [plan.base_image for plan in plans()] == [NEW]  # the profile's one base
    with pytest.raises(BuildError) as failed:
        image_app.check_bases(plans(), engine, "580.95.05")
    error = failed.value
    assert error.exit_code == EXIT_BUILD
    assert error.message == f"base image {NEW} is not present on this engine"
    assert f"`docker pull {NEW}`" in error.hint
    assert "`opsctl build --base-image IMAGE`" in error.hint and "sglang 0.5.23" in error.hint
    assert "`opsctl base-image --sglang-standin 0.5.23`" in error.hint
    assert "build" not in engine.calls


def test_a_cuda_13_base_on_an_older_driver_is_named_before_the_build(driver_on_path) -> None:  # type: ignore[no-untyped-def]
    driver_on_path("575.57.08\n575.57.08\n")  # SAMPLE: one line per GPU
    driver = basecheck.host_driver()
    assert driver == "575.57.08"
    notes = basecheck.check_bases([(OLD, "0.5.15"), (NEW, "0.5.23")],
                                  engine_with((OLD, "13.0.1"), (NEW, "13.0.1")), driver)
    assert [(n.base, n.warning) for n in notes] == [(OLD, True), (NEW, True)]
    assert image_app.check_bases(plans(), engine_with((NEW, "13.0.1")), driver)[0].base == NEW
    assert notes[0].text.startswith(f"base {OLD} is CUDA 13.0.1, which needs an NVIDIA driver "
                                    ">= 580 (https://docs.nvidia.com/deploy/cuda-compatibility/")
    assert "this host runs 575.57.08" in notes[0].text


def test_a_new_enough_driver_says_nothing(driver_on_path) -> None:  # type: ignore[no-untyped-def]
    driver_on_path("580.95.05\n")  # SAMPLE
    engine = engine_with((NEW, "13.0.1"))
    assert image_app.check_bases(plans(), engine, basecheck.host_driver()) == []
    assert basecheck.driver_note("x", {"CUDA_VERSION": "12.8.1"}, "570.86.15") is None


def test_without_nvidia_smi_the_driver_is_not_checked_and_it_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert basecheck.host_driver() is None
    (note,) = image_app.check_bases(plans(), engine_with((NEW, "13.0.1")), None)
    assert not note.warning and "no nvidia-smi answers here" in note.text


def test_a_cuda_major_outside_nvidias_table_is_unresolved_not_guessed() -> None:
    note = basecheck.driver_note("x", {"CUDA_VERSION": "14.0.0"}, "580.95.05")
    assert note is not None and not note.warning
    assert "minimum driver is unresolved" in note.text
    assert basecheck.driver_note("x", {}, "1.0") is None  # no CUDA image: nothing to compare


def test_a_failing_nvidia_smi_reads_as_no_driver(driver_on_path) -> None:  # type: ignore[no-untyped-def]
    driver_on_path("NVIDIA-SMI has failed because it couldn't communicate with the driver\n")
    assert basecheck.host_driver() is None
