"""`down`/`logs --profile`: the name a profile option stands for, also for a profile that was
given as a path (its containers carry its name; the hints after a failure say `opsctl down
--profile NAME`: issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from opsctl.cli.deploy import _profile_name
from opsctl.core.errors import OpsctlError
from opsctl.core.paths import project_root


def test_a_name_under_deploy_is_its_profiles_name() -> None:
    assert _profile_name("sim") == "sim" and _profile_name(None) is None


def test_a_name_no_file_under_deploy_holds_is_the_label_itself(tmp_path: Path) -> None:
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    data["name"] = "box-a1"
    path = tmp_path / "elsewhere.yaml"
    path.write_text(yaml.safe_dump(data))
    assert _profile_name(str(path)) == "box-a1"  # up --profile PATH labelled its container so
    assert _profile_name("box-a1") == "box-a1"  # and the hint's `down --profile box-a1` finds it


def test_a_path_must_load() -> None:
    with pytest.raises(OpsctlError, match="does not exist"):
        _profile_name("/nonexistent/profile.yaml")
