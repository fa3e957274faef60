"""The hand-read release table against the release's own resolution.

patches/sglang/<version>/defaults.json is read from the wheels by hand; verify takes its
expectations for argvs without a record from it (opsctl.verify.facts), and the simulator (a
stdlib island that must answer any argv) computes its answers from it (opsctl.sim.releases).
Every committed record of `opsctl profile resolve` is sglang's own answer for a variant's argv on
the profile's target GPU, so both readings must agree with every record on every field they
know: a disagreement is a wrong hand-read fact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from opsctl.config import resolve
from opsctl.config.profiles import load_profile, to_argv
from opsctl.core.paths import release_dir
from opsctl.sim import records as sim_records
from opsctl.sim import releases as sim
from opsctl.sim.config import SimArgs
from opsctl.sim.info import ServerView
from opsctl.verify import checks
from opsctl.verify.facts import facts_for

CASES = [(name, variant) for name in resolve.record_profiles()
         for variant in load_profile(name).variants]


def _record(profile: str, variant: str) -> tuple[Any, list[str], dict[str, Any]]:
    deployment = load_profile(profile).resolve(variant)
    found = resolve.current_record(deployment)
    assert found is not None, f"no current record for {profile}.{variant}: run opsctl profile " \
                              "resolve --write-records"
    return deployment, to_argv(deployment)[len(deployment.server.entrypoint):], found[0]


@pytest.mark.parametrize(("profile", "variant"), CASES)
def test_verifys_hand_read_defaults_agree_with_the_release(profile: str, variant: str) -> None:
    deployment, argv, record = _record(profile, variant)
    facts = facts_for(deployment.image.sglang_version)
    assert facts is not None
    expected = checks.expectations(facts, argv, deployment.profile.model.architecture,
                                   deployment.expect)
    for name, fact in facts.items():
        found, real = checks.lookup(record["resolved"], fact.key)
        assert found, f"{name}: {'.'.join(fact.key)} is not in the release's resolution"
        if expected[name].known:
            assert checks.same(expected[name].value, real), (
                f"{profile}.{variant} {name}: facts.py expects {expected[name].value} "
                f"({expected[name].source}), sglang resolves {real}")


@pytest.mark.parametrize(("profile", "variant"), CASES)
def test_the_simulator_resolves_what_the_release_resolves(profile: str, variant: str) -> None:
    deployment, argv, record = _record(profile, variant)
    version = deployment.image.sglang_version
    config = json.loads((resolve.project_root() / resolve.FIXTURE).read_text())
    settings = sim.resolve(version, SimArgs.parse(argv).typed_flags(), sim.Checkpoint(config))
    for name, fact in sim.table(version).items():
        _, real = checks.lookup(record["resolved"], fact.key)
        assert checks.same(settings[name], real), (
            f"{profile}.{variant} {name}: the simulator reports {settings[name]}, "
            f"sglang {version} resolves {real}")


def test_the_simulator_reports_the_record_for_exactly_its_argv(tmp_path: Path) -> None:
    """`opsctl up -p sim` runs exactly the variant's argv: the simulator then answers with the
    release's own resolution; another argv (or another model's config.json) gets the table."""
    deployment = load_profile("sim").resolve("native")
    argv = to_argv(deployment)[len(deployment.server.entrypoint):]
    folder = tmp_path / "0.5.23" / "resolved"
    folder.mkdir(parents=True)
    table = sim.DEFAULTS_FILE  # the release's table sits beside its records, as in the image
    (tmp_path / "0.5.23" / table).write_bytes((release_dir("0.5.23") / table).read_bytes())
    record = json.loads(resolve.record_path(deployment).read_text())
    record["resolved"]["page_size"] = 4096  # marks the record's value apart from the table's
    (folder / "sim.native.json").write_text(json.dumps(record))
    assert sim_records.resolved_for("0.5.23", argv, root=tmp_path)["page_size"] == 4096
    assert sim_records.resolved_for("0.5.23", [*argv, "--port", "1"], root=tmp_path) is None
    assert sim_records.resolved_for("0.5.15", argv, root=tmp_path) is None

    def view(config: dict[str, Any], flags: list[str]) -> int:
        server = ServerView(SimArgs.parse(flags), "0.5.23", config)
        original = sim_records.RECORDS_ROOT
        sim_records.RECORDS_ROOT = tmp_path
        try:
            return int(server.resolved("")["page_size"])
        finally:
            sim_records.RECORDS_ROOT = original

    assert view({}, argv) == 4096
    assert view({}, [*argv, "--port", "1"]) == 64
    assert view({"architectures": ["GlmMoeDsaForCausalLM"], "index_kpool": 2}, argv) == 128
