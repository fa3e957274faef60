"""`opsctl base-image` without an engine: mirror discovery, root check, skip-if-present, version
check."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.core.errors import EXIT_BUILD, EXIT_USAGE, BuildError, UsageError
from opsctl.engine.api import BuildEvent
from opsctl.image import baseimage

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# deb http://commented.example/debian bookworm main
deb http://security.example/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://archive.example/debian bookworm main
"""


class AbsentEngine:
    def image_id(self, ref: str) -> str | None:
        return None


class PresentEngine:
    def image_id(self, ref: str) -> str | None:
        return "sha256:" + "1" * 64


def test_mirror_from_deb822_sources() -> None:
    assert baseimage.parse_debian_mirror(DEB822) == "http://mirror.example/debian"


def test_mirror_from_one_line_sources_skips_comments_security_and_options() -> None:
    assert baseimage.parse_debian_mirror(ONE_LINE) == "http://archive.example/debian"


def test_no_bookworm_source_is_a_build_error(tmp_path: Path) -> None:
    sources = tmp_path / "sources.list"
    sources.write_text("deb http://archive.example/ubuntu noble main\n")
    with pytest.raises(BuildError, match="no Debian mirror"):
        baseimage.debian_mirror((sources, tmp_path / "absent"))


def test_building_the_base_needs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseimage.os, "geteuid", lambda: 1000)
    with pytest.raises(BuildError, match="needs root") as info:
        baseimage.build_debian_base(AbsentEngine(), force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert info.value.exit_code == EXIT_BUILD and "sudo opsctl base-image" in info.value.hint


def test_present_base_is_skipped_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseimage.os, "geteuid", lambda: 1000)
    events: list[BuildEvent] = []
    result = baseimage.build_debian_base(PresentEngine(), force=False, on_event=events.append)  # type: ignore[arg-type]
    assert result.skipped and result.ref == baseimage.DEBIAN_BASE
    assert "--force rebuilds it" in events[0].text


@pytest.mark.parametrize("bad", ["latest", "0.5.23; rm -rf /", "../0.5"])
def test_standin_version_must_be_a_version(bad: str) -> None:
    with pytest.raises(UsageError) as info:
        baseimage.build_standin(AbsentEngine(), bad, force=False, on_event=lambda e: None)  # type: ignore[arg-type]
    assert info.value.exit_code == EXIT_USAGE
