"""One folder per pinned sglang release: `patches/sglang/<version>/` holds the release's patch set
(manifest.json and the files it lists) beside its records (cli-args.json, stack.json, defaults.json,
resolved/).

Every reader finds the folder through opsctl.core.paths.release_dir (the simulator, an island,
through its own copy of the path), and the records beside the patch set are never part of the
patch set's identity: its sha256, the files an image build stages, the image's content hash.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from opsctl.argspec import spec, stack
from opsctl.config import patchsets, releasefacts, resolve
from opsctl.config.profiles import load_profile
from opsctl.core import paths
from opsctl.image import patchset
from opsctl.image.plan import PATCHES_DIR, plan
from opsctl.sim import records as sim_records
from opsctl.sim import releases as sim_releases

ROOT = Path(__file__).resolve().parents[2]
RECORDS = (spec.SPEC_FILE, stack.STACK_FILE, releasefacts.DEFAULTS_FILE)


def test_each_pinned_release_has_one_folder_under_patches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(paths.PROJECT_DIR_ENV, raising=False)
    assert paths.releases_root() == ROOT / "patches" / "sglang"
    assert not (ROOT / "sglang-args").exists()
    releases = patchsets.available_versions()
    assert releases == sorted(
        p.parent.name for p in paths.releases_root().glob(f"*/{spec.SPEC_FILE}")
    )
    assert {"0.5.15", "0.5.23"} <= set(releases)
    for version in releases:
        folder = ROOT / "patches" / "sglang" / version
        assert paths.release_dir(version) == patchsets.patch_set_dir(version) == folder
        assert (
            spec.spec_path(version) == folder / spec.SPEC_FILE and spec.spec_path(version).is_file()
        )
        assert (
            stack.stack_path(version) == folder / stack.STACK_FILE
            and stack.stack_path(version).is_file()
        )
    deployment = load_profile("sim").resolve("baseline")
    assert resolve.record_path(deployment) == (ROOT / "patches" / "sglang" / "0.5.23" / "resolved"
                                               / "sim.baseline.json")
    assert resolve.record_path(deployment).is_file()


def test_the_simulator_reads_the_same_folders_with_its_own_copy_of_the_path() -> None:
    assert sim_records.RELEASES_DIR == paths.RELEASES_DIR
    assert sim_records.RECORD_DIR == resolve.RECORD_DIR
    assert sim_releases.DEFAULTS_FILE == releasefacts.DEFAULTS_FILE
    assert sim_records.RECORDS_ROOT == ROOT / paths.RELEASES_DIR  # this checkout's


def test_one_table_per_release_read_by_verify_and_the_simulator() -> None:
    """patches/sglang/<version>/defaults.json is the only table: both readers see its rows."""
    tables = sorted(p.parent.name for p in paths.releases_root().glob(
        f"*/{releasefacts.DEFAULTS_FILE}"))
    assert tables == sim_releases.releases() == ["0.5.15", "0.5.23"]
    for version in tables:
        verify, sim = releasefacts.facts_for(version), sim_releases.table(version)
        assert verify is not None and list(verify) == list(sim), version
        for name, fact in verify.items():
            row = sim[name]
            assert (row.endpoint, row.key, row.flag, row.dsa_only, row.forced, row.unset) == (
                fact.endpoint, fact.key, fact.flag, fact.dsa_only, fact.forced, fact.unset)
            assert dict(row.aliases) == dict(fact.aliases), (version, name)
    assert releasefacts.facts_for("0.0.1") is None and releasefacts.facts_for("../x") is None


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project copy holding one release's folder and the kernel its manifest names."""
    root = tmp_path / "project"
    shutil.copytree(ROOT / paths.RELEASES_DIR / "0.5.23", root / paths.RELEASES_DIR / "0.5.23")
    shutil.copytree(ROOT / "opsctl" / "kernels", root / "opsctl" / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv(paths.PROJECT_DIR_ENV, str(root))
    return root / paths.RELEASES_DIR / "0.5.23"


def test_the_records_are_no_part_of_the_patch_set(project: Path) -> None:
    before = patchset.patch_set_sha256("0.5.23")
    files = patchset.patch_set_files("0.5.23")
    manifest = patchsets.load_manifest("0.5.23")
    assert set(files) == {patchsets.MANIFEST, *(e["diff"] for e in manifest["files"]),
                          *(Path(e["source"]).name for e in manifest["new_files"])}
    assert not set(files) & set(RECORDS)
    for name in RECORDS:
        (project / name).write_text('{"rewritten": true}\n')
    (project / resolve.RECORD_DIR / "p.new.json").write_text("{}\n")
    assert patchset.patch_set_sha256("0.5.23") == before
    assert patchset.patch_set_files("0.5.23") == files
    # ...while the patch set's own files are its identity.
    manifest_path = project / patchsets.MANIFEST
    manifest_path.write_text(json.dumps(json.loads(manifest_path.read_text())) + "\n")
    assert patchset.patch_set_sha256("0.5.23") != before


def test_an_image_stages_only_its_patch_set_and_the_simulator_only_the_tables_and_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(paths.PROJECT_DIR_ENV, raising=False)
    sim = load_profile("sim")
    sglang = plan(
        sim.model_copy(
            update={
                "name": "unit-sglang",
                "image": sim.image.model_copy(
                    update={
                        "kind": "sglang",
                        "repository": "opsctl/test-sglang",
                        "dockerfile": "docker/Dockerfile",
                    }
                ),
            }
        )
    )
    staged = {name.removeprefix(f"{PATCHES_DIR}/") for name in sglang.files
              if name.startswith(f"{PATCHES_DIR}/")}
    assert staged == set(patchset.patch_set_files("0.5.23"))
    simulator = plan(sim)
    records = {name for name in simulator.files if name.startswith(f"app/{paths.RELEASES_DIR}/")}
    committed = sorted([*paths.releases_root().glob(f"*/{resolve.RECORD_DIR}/*.json"),
                        *paths.releases_root().glob(f"*/{releasefacts.DEFAULTS_FILE}")])
    assert committed and records == {f"app/{p.relative_to(ROOT).as_posix()}" for p in committed}
