"""The release overlay's pieces without an engine: the pins read from the release wheel, the
wheelhouse staged from the wheel cache, overlay.py's decision in an image-like layout, and
imagecheck's version proof (a local label as pip's `==` reads it; a mismatch names both).

Distributions and versions made up here are STAND-INS (named standin-*, versions 1.0/2.0);
the real release's pins come from the real wheel (tests/integration/test_build_release_overlay.py).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from opsctl.argspec import stack
from opsctl.config.profiles import load_profile
from opsctl.core import wheels
from opsctl.core.errors import BuildError, ProfileError
from opsctl.image import imagecheck, overlay, wheelhouse
from opsctl.image.plan import plans


def dist_wheel(folder: Path, name: str, version: str, tags: str = "py3-none-any",
               requires: tuple[str, ...] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('-', '_')}-{version}"
    wheel = folder / f"{stem}-{tags}.whl"
    metadata = "\n".join([f"Name: {name}", f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in requires)])
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{stem}.dist-info/METADATA", metadata + "\n")
    return wheel


def site_with(folder: Path, **versions: str) -> Path:
    """A site directory holding the dist-info of each distribution (no code)."""
    for name, version in versions.items():
        info = folder / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Name: {name.replace('_', '-')}\nVersion: {version}\n")
    return folder


def test_pins_keep_an_extras_pin_under_its_distribution(tmp_path: Path) -> None:
    wheel = dist_wheel(tmp_path, "sglang", "9.9.9", requires=(
        "standin_a[cu13]==1.0", "standin-b==2.0", "standin-c==1.0; sys_platform == 'linux'",
        "standin-d>=1.0", "standin-e[x]==2.0; extra == 'all'"))
    assert stack.metadata_pins(wheel) == {"standin-a": "1.0", "standin-b": "2.0"}


def test_the_release_is_the_recorded_wheel_and_its_pins() -> None:
    release = wheelhouse.release("0.5.23")
    record = json.loads(stack.stack_path("0.5.23").read_text())
    assert (release["wheel"], release["wheel_sha256"]) == (
        record["provenance"]["wheel"], record["provenance"]["wheel_sha256"])
    assert release["pins"] == {"sglang": "0.5.23", **record["pins"]}
    assert set(wheelhouse.HEADLINE) <= set(release["pins"])


def test_a_cached_release_wheel_with_other_bytes_is_refused(tmp_path: Path) -> None:
    release = wheelhouse.release("0.5.23")
    impostor = dist_wheel(tmp_path / "build", "sglang", "0.5.23")
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copyfile(impostor, cache / release["wheel"])
    with pytest.raises(BuildError, match="stack record was made from") as info:
        wheelhouse.stage(release, tmp_path / "opsctl-build", cache)
    assert "delete the cached wheel" in info.value.hint
    assert not (tmp_path / "opsctl-build").exists()


def test_stage_copies_every_wheel_of_each_pin_and_records_its_sha256(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    release = dist_wheel(cache, "sglang", "9.9.9", "cp311-cp311-linux_x86_64",
                         requires=("standin-a==1.0", "standin_b[cu13]==2.0"))
    wanted = [dist_wheel(cache, "standin-a", "1.0", "cp311-cp311-linux_x86_64"),
              dist_wheel(cache, "standin-a", "1.0", "cp312-cp312-linux_x86_64"),
              dist_wheel(cache, "standin_b", "2.0+cu130")]  # a local label matches the pin 2.0
    dist_wheel(cache, "standin-a", "2.0")  # another version: not staged
    build_dir = tmp_path / "opsctl-build"
    pins = {"sglang": "9.9.9", "standin-a": "1.0", "standin-b": "2.0"}
    staged = wheelhouse.stage({"pins": pins, "wheel": release.name,
                               "wheel_sha256": hashlib.sha256(release.read_bytes()).hexdigest()},
                              build_dir, cache)
    expected = {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in [release, *wanted]}
    assert staged == expected
    assert sorted(p.name for p in (build_dir / "wheels").iterdir()) == sorted(expected)
    assert json.loads((build_dir / "wheels.json").read_text()) == {"pins": pins, "wheels": expected}


def test_another_wheel_of_the_release_must_pin_the_same(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    release = dist_wheel(cache, "sglang", "9.9.9", "cp311-cp311-linux_x86_64",
                         requires=("standin-a==1.0",))
    dist_wheel(cache, "sglang", "9.9.9", "cp312-cp312-linux_x86_64", requires=("standin-a==2.0",))
    dist_wheel(cache, "standin-a", "1.0")
    overlay = {"pins": {"sglang": "9.9.9", "standin-a": "1.0"}, "wheel": release.name,
               "wheel_sha256": hashlib.sha256(release.read_bytes()).hexdigest()}
    with pytest.raises(BuildError, match="cp312-cp312-linux_x86_64.whl pins standin-a 2.0, but "
                       "the stack record's .* pins 1.0"):
        wheelhouse.stage(overlay, tmp_path / "opsctl-build", cache)


def test_stage_fails_on_a_pin_pip_cannot_provide(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(wheels, "download", lambda cache, requirement: asked.append(requirement))
    release = dist_wheel(tmp_path, "sglang", "9.9.9", "cp311-cp311-linux_x86_64",
                         requires=("standin-a==1.0",))
    overlay = {"pins": {"sglang": "9.9.9", "standin-a": "1.0"}, "wheel": release.name,
               "wheel_sha256": hashlib.sha256(release.read_bytes()).hexdigest()}
    with pytest.raises(BuildError, match="pip did not produce a standin-a 1.0 wheel"):
        wheelhouse.stage(overlay, tmp_path / "opsctl-build", tmp_path)
    assert asked == ["standin-a==1.0"]


def run_overlay(tmp_path: Path, site: Path, record: dict[str, Any]
                ) -> subprocess.CompletedProcess[str]:
    """overlay.py as the image runs it: beside imagecheck.py, no opsctl package importable."""
    build = tmp_path / "build"
    (build / "wheels").mkdir(parents=True, exist_ok=True)
    for module in (overlay, imagecheck):
        shutil.copyfile(str(module.__file__), build / Path(str(module.__file__)).name)
    (build / "wheels.json").write_text(json.dumps(record))
    return subprocess.run(
        [sys.executable, "-S", str(build / "overlay.py"), str(build / "wheels.json")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(site)},
    )


def test_overlay_installs_nothing_when_the_base_holds_every_pin(tmp_path: Path) -> None:
    site = site_with(tmp_path / "site", standin_a="1.0+cu130", standin_b="2.0")
    done = run_overlay(tmp_path, site, {"pins": {"standin-a": "1.0", "standin-b": "2.0"},
                                        "wheels": {}})
    assert done.returncode == 0, done.stderr
    assert "opsctl overlay: 2 of 2 pins already in the base" in done.stdout
    report = json.loads((tmp_path / "build" / overlay.REPORT).read_text())
    assert report == {"installed": {}, "held": {"standin-a": "1.0", "standin-b": "2.0"}}


def test_overlay_refuses_a_wheel_that_is_not_the_one_the_host_recorded(tmp_path: Path) -> None:
    site = site_with(tmp_path / "site")
    (tmp_path / "build" / "wheels").mkdir(parents=True)
    (tmp_path / "build" / "wheels" / "standin_a-1.0-py3-none-any.whl").write_bytes(b"other")
    done = run_overlay(tmp_path, site, {"pins": {"standin-a": "1.0"},
                                        "wheels": {"standin_a-1.0-py3-none-any.whl": "0" * 64}})
    assert done.returncode == 1
    assert f"the host recorded {'0' * 64}" in done.stderr
    assert not (tmp_path / "build" / overlay.REPORT).exists()


def test_overlay_lists_what_differs_from_the_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    site = site_with(tmp_path / "site", standin_a="2.0", standin_b="2.0")
    monkeypatch.syspath_prepend(str(site))
    assert overlay.to_install({"standin-a": "1.0", "standin-b": "2.0", "standin-c": "1.0"}) == [
        ("standin-a", "2.0", "1.0"), ("standin-c", None, "1.0")]


@pytest.mark.parametrize(("installed", "pinned", "same"), [
    ("2.0+cu130", "2.0", True), ("2.0", "2.0+cu130", False), ("2.0.post1", "2.0", False),
    ("1.0", "1.0", True)])
def test_same_version_reads_a_local_label_as_pips_equals_does(installed: str, pinned: str,
                                                              same: bool) -> None:
    assert imagecheck.same_version(installed, pinned) is same


def test_imagecheck_names_the_package_and_both_versions(tmp_path: Path) -> None:
    site = site_with(tmp_path / "site", standin_a="2.0", standin_b="1.0+cu130")
    expect = {"distributions": {"standin-a": "1.0", "standin-b": "1.0", "standin-c": "1.0"}}
    done = subprocess.run([sys.executable, "-S", "-c", Path(imagecheck.__file__).read_text(),
                           json.dumps(expect)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 1
    results = {r["check"]: (r["ok"], r["detail"]) for r in json.loads(done.stdout)["results"]}
    assert results == {
        "standin-a version": (False, "installed 2.0, pinned 1.0"),
        "standin-b version": (True, "installed 1.0+cu130, pinned 1.0"),
        "standin-c version": (False, "not installed, pinned 1.0")}
    assert "image check failed: standin-a version: installed 2.0, pinned 1.0" in done.stderr


def test_base_image_names_an_image_that_holds_the_release() -> None:
    profile = load_profile("glm5-nvfp4-rtx6000")
    [own] = plans(profile)
    assert own.expect["overlay"]["pins"] == own.expect["distributions"]
    assert "opsctl-build/overlay.py" in own.files
    [same] = plans(profile, variant="gathercast", base_image=profile.image.base)
    assert same.expect == own.expect
    [local] = plans(profile, variant="gathercast", base_image="opsctl/sglang-standin:0.5.23")
    assert "overlay" not in local.expect and "opsctl-build/overlay.py" not in local.files
    assert local.expect["distributions"] == {"sglang": "0.5.23"}


def test_the_simulator_cannot_install_a_release() -> None:
    sim = load_profile("sim")
    spec = sim.image.model_copy(update={"install_release": True})
    with pytest.raises(ProfileError, match="install_release is for sglang images"):
        plans(sim.model_copy(update={"image": spec}))


def test_overlay_imports_only_the_standard_library_and_imagecheck() -> None:
    tree = ast.parse(Path(str(overlay.__file__)).read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    names |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module != "__future__"}
    assert names - set(sys.stdlib_module_names) == {"opsctl", "imagecheck"}
