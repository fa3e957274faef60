"""`opsctl build --push` in a fresh process: refused before building; the dry run names each
push."""

from __future__ import annotations

from typing import Any

from opsctl.core.errors import EXIT_USAGE

REPO = "127.0.0.1:5000/team/opsctl-sim"


def test_cli_refuses_a_bad_repository_before_building(opsctl: Any) -> None:
    result = opsctl("build", "--profile", "sim", "--push", "127.0.0.1:5000/opsctl/sim:v1",
                    DOCKER_HOST="unix:///nonexistent.sock")
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "not a repository name" in result.stderr and "Traceback" not in result.stderr


def test_dry_run_shows_where_each_image_would_be_pushed(opsctl: Any) -> None:
    result = opsctl("build", "--profile", "sim", "--dry-run", "--push", REPO)
    assert result.returncode == 0, result.stderr
    assert f"push  {REPO}:" in result.stdout
