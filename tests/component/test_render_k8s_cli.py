"""`opsctl render k8s` in a fresh process: the files written, the warning, a bad option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opsctl.core.errors import EXIT_USAGE
from opsctl.render import app as render
from opsctl.render import outdir

# A node affinity as a user writes one in a file (the unit tier checks its rendering).
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["RTX-PRO-6000"]}]}]}}}


def test_cli_writes_and_warns(opsctl: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = opsctl("render", "k8s", "--profile", "sim", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "NOT DEPLOYABLE" in done.stderr and "--router-image" in done.stderr
    assert sorted(Path(line).name for line in done.stdout.splitlines()) == sorted(
        path.name for path in out.iterdir() if path.name != outdir.RECORD)
    again = opsctl("render", "k8s", "--profile", "sim", "--out", str(out))
    assert again.returncode == 0, again.stderr
    (out / render.KUSTOMIZATION).write_text("edited\n")
    edited = opsctl("render", "k8s", "--profile", "sim", "--out", str(out))
    assert edited.returncode == EXIT_USAGE and "kustomization.yaml was edited" in edited.stderr
    assert (out / render.KUSTOMIZATION).read_text() == "edited\n"
    assert "Traceback" not in edited.stderr and edited.stderr.count("error:") == 1
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "deployment.yaml").write_text("someone else's\n")
    foreign = opsctl("render", "k8s", "--profile", "sim", "--out", str(theirs), "--force")
    assert foreign.returncode == EXIT_USAGE and foreign.stderr.count("error:") == 1
    assert "did not write (deployment.yaml)" in foreign.stderr and "Traceback" not in foreign.stderr
    assert [path.name for path in theirs.iterdir()] == ["deployment.yaml"]
    bad = opsctl(
        "render", "k8s", "--profile", "sim", "--out", str(tmp_path / "x"), "--replicas", "0"
    )
    assert bad.returncode == EXIT_USAGE and not (tmp_path / "x").exists()


def test_cli_options(opsctl: Any, tmp_path: Path) -> None:
    affinity = tmp_path / "affinity.json"
    affinity.write_text(json.dumps(AFFINITY))
    out = tmp_path / "out"
    done = opsctl("render", "k8s", "--profile", "sim", "--out", str(out), "--replicas", "2",
                  "--node-selector", "pool=gpu", "--toleration", "nvidia.com/gpu:NoSchedule",
                  "--affinity", str(affinity), "--priority-class", "llm",
                  "--pdb-max-unavailable", "1", "--keda-max-replicas", "4",
                  "--keda-prometheus", "http://prometheus:9090")
    assert done.returncode == 0, done.stderr
    assert (
        "needs KEDA's controller" in done.stderr and "PriorityClass llm must exist" in done.stderr
    )
    names = sorted(path.name for path in out.iterdir())
    assert any("poddisruptionbudget" in name for name in names)
    assert any("scaledobject" in name for name in names)
    for bad, words in ((["--toleration", "x:Sometimes"], "effect 'Sometimes'"),
                       (["--keda-max-replicas", "4"], "needs --keda-prometheus"),
                       (["--affinity", str(tmp_path / "none.yaml")], "No such file")):
        refused = opsctl("render", "k8s", "--profile", "sim", "--out", str(tmp_path / "x"), *bad)
        assert refused.returncode == EXIT_USAGE and words in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and not (tmp_path / "x").exists()
