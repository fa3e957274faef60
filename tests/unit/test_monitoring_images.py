"""Monitoring images: tags in one file, digests locked at the first pull and enforced after."""

from __future__ import annotations

import pytest

from opsctl.core.errors import LaunchError
from opsctl.observe.monitoring import load_images, resolve_digest
from opsctl.observe.report import legend_of, parse_duration, with_variant

DIGEST_A = "prom/prometheus@sha256:" + "a" * 64
DIGEST_B = "prom/prometheus@sha256:" + "b" * 64


class RecordingEngine:
    """Just the two engine calls resolve_digest makes, recording whether it pulled."""

    def __init__(self, local: list[str], remote: list[str]) -> None:
        self.local, self.remote, self.pulled = local, remote, False

    def image_repo_digests(self, ref: str) -> list[str]:
        return self.local

    def pull_image(self, ref: str) -> list[str]:
        self.pulled = True
        return self.remote


def test_images_are_pinned_by_explicit_tag_in_one_file() -> None:
    images = load_images()
    for ref in (images.prometheus, images.pushgateway, images.grafana):
        name, _, tag = ref.rpartition(":")
        assert name and tag and tag != "latest" and "@" not in ref


def test_first_use_pulls_and_records_the_pulled_digest() -> None:
    engine = RecordingEngine(local=[], remote=[DIGEST_A])
    assert resolve_digest(engine, "prom/prometheus:v2.42.0", {}) == DIGEST_A  # type: ignore[arg-type]
    assert engine.pulled


def test_a_present_image_is_not_pulled_again() -> None:
    engine = RecordingEngine(local=[DIGEST_A], remote=[DIGEST_B])
    lock = {"prom/prometheus:v2.42.0": DIGEST_A}
    assert resolve_digest(engine, "prom/prometheus:v2.42.0", lock) == DIGEST_A  # type: ignore[arg-type]
    assert not engine.pulled


def test_a_moved_tag_is_refused() -> None:
    engine = RecordingEngine(local=[DIGEST_B], remote=[])
    with pytest.raises(LaunchError, match="pins"):
        resolve_digest(engine, "prom/prometheus:v2.42.0",  # type: ignore[arg-type]
                       {"prom/prometheus:v2.42.0": DIGEST_A})


def test_report_substitutes_the_dashboard_variable_and_legends() -> None:
    assert with_variant('x{variant=~"$variant"}', "gathercast|baseline") == \
        'x{variant=~"gathercast|baseline"}'
    assert legend_of("{{variant}} p99", {"variant": "gathercast"}) == "gathercast p99"
    assert parse_duration("30m") == 1800.0
