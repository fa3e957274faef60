"""Rendered Kubernetes objects validated offline (tests/k8sschemas.py; versions in
tests/k8s/SCHEMAS.md): every committed golden manifest, and every profile x variant rendered with
two replicas.

Each validator is first shown to reject what a cluster would reject (an unknown field, a wrong
type, a missing required field, a value outside an enum, and what the API server checks beyond
the schemas: names, labels, port names), so a passing golden means something.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT
from k8sschemas import K8S_VERSION, LWS_CRD, crd_errors, schema_errors, schema_errors_of_sets

from opsctl.config.profiles import load_profile
from opsctl.render import placement
from opsctl.render.app import render_objects
from opsctl.render.settings import RenderSettings

GOLDENS = sorted((REPO_ROOT / "tests" / "unit" / "golden" / "k8s").glob("*.yaml"))
TWO_HOSTS = str(REPO_ROOT / "tests" / "fixtures" / "profiles" / "glm5-2node.yaml")
PROFILES = ("glm5-nvfp4-rtx6000", "sim", TWO_HOSTS)
PUSHED = "127.0.0.1:5000/opsctl/sglang@sha256:" + "0" * 64  # a reference's shape, not a real image


# every option of `render k8s` that adds fields or objects: they must validate too
EVERY_OPTION = placement.Placement(
    node_selector={"nvidia.com/gpu.present": "true", "example.com/pool": "llm"},
    tolerations=[placement.toleration("nvidia.com/gpu:NoSchedule"),
                 placement.toleration("dedicated=llm:NoExecute"), placement.toleration("spot")],
    affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": {"app": "x"}}}}]}},
    priority_class="llm-serving", pdb_max_unavailable=1,
    autoscale=placement.Autoscale(max_replicas=4, prometheus="http://prometheus:9090",
                                  queue_threshold=2))


def rendered(profile: str = TWO_HOSTS, variant: str = "gathercast",
             chosen: placement.Placement | None = EVERY_OPTION) -> list[dict[str, Any]]:
    return render_objects(load_profile(profile).resolve(variant), PUSHED,
                          RenderSettings(replicas=2, placement=chosen or placement.Placement()))


def _failures(errors: dict[str, list[str]]) -> dict[str, list[str]]:
    return {key: found for key, found in errors.items() if found}


CASES = [
    (profile, variant) for profile in PROFILES for variant in sorted(load_profile(profile).variants)
]


@pytest.fixture(scope="module")
def validated() -> dict[str, tuple[int, dict[str, list[str]]]]:
    """Every golden and every profile x variant render, validated at once: (objects, errors)."""
    sets = {f"golden:{path.stem}": [obj for obj in yaml.safe_load_all(path.read_text()) if obj]
            for path in GOLDENS}
    sets.update({f"render:{Path(profile).stem}.{variant}": rendered(profile, variant, None)
                 for profile, variant in CASES})
    sets.update({f"options:{Path(profile).stem}": rendered(profile) for profile in PROFILES})
    results = schema_errors_of_sets(list(sets.values()))
    return {key: (len(objects), errors)
            for (key, objects), errors in zip(sets.items(), results, strict=True)}


@pytest.mark.parametrize("golden", GOLDENS, ids=[path.stem for path in GOLDENS])
def test_every_golden_manifest_validates(
        golden: Path, validated: dict[str, tuple[int, dict[str, list[str]]]]) -> None:
    count, errors = validated[f"golden:{golden.stem}"]
    assert count and len(errors) == count and _failures(errors) == {}


@pytest.mark.parametrize(("profile", "variant"), CASES,
                         ids=[f"{Path(profile).stem}.{variant}" for profile, variant in CASES])
def test_every_variant_renders_valid_objects(
        profile: str, variant: str, validated: dict[str, tuple[int, dict[str, list[str]]]]) -> None:
    count, errors = validated[f"render:{Path(profile).stem}.{variant}"]
    assert count and len(errors) == count and _failures(errors) == {}


@pytest.mark.parametrize("profile", PROFILES, ids=[Path(profile).stem for profile in PROFILES])
def test_every_option_renders_valid_objects(
        profile: str, validated: dict[str, tuple[int, dict[str, list[str]]]]) -> None:
    count, errors = validated[f"options:{Path(profile).stem}"]
    assert {key.split("/")[0] for key in errors} >= {"PodDisruptionBudget", "ScaledObject"}
    assert count and len(errors) == count and _failures(errors) == {}


def test_the_goldens_cover_every_kind_and_validator() -> None:
    """Single- and multi-host goldens exist, so the LWS and monitoring paths are exercised."""
    kinds = {obj["kind"] for path in GOLDENS for obj in yaml.safe_load_all(path.read_text()) if obj}
    assert {"Deployment", "LeaderWorkerSet", "PodMonitor", "PrometheusRule", "ConfigMap",
            "Service", "ServiceAccount", "Role", "RoleBinding"} <= kinds


def _object(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind)


# (kind, how to break it, words the error must hold)
BREAKS = [
    ("Deployment", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(imagee="x"),
     "imagee"),
    ("Deployment", lambda o: o["spec"].update(replicas="two"), "integer"),
    ("Service", lambda o: o["spec"]["ports"][0].pop("port"), "port"),
    ("ConfigMap", lambda o: o.update(datta={}), "datta"),
    ("RoleBinding", lambda o: o["roleRef"].update(kind=3), "string"),
    ("LeaderWorkerSet", lambda o: o["spec"].update(replica=2), "replica"),
    ("LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"].update(size="2"), "integer"),
    ("LeaderWorkerSet", lambda o: o["spec"].update(startupPolicy="Eager"), "Eager"),
    ("LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"].pop("workerTemplate"),
     "workerTemplate"),
    ("LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
     ["containers"][0]["resources"].update(limit={}), "limit"),
    ("LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
     ["containers"][0]["ports"][0].update(containerPort="30000"), "integer"),
    ("PodMonitor", lambda o: o["spec"]["podMetricsEndpoints"][0].update(pathh="/metrics"),
     "pathh"),
    ("PodMonitor", lambda o: o["spec"]["podMetricsEndpoints"][0].update(port=30000), "string"),
    ("PodMonitor", lambda o: o["spec"]["podMetricsEndpoints"][0].update(interval="often"),
     "pattern"),
    ("PodMonitor", lambda o: o["spec"].pop("selector"), "selector"),
    ("PrometheusRule", lambda o: o["spec"]["groups"][0]["rules"][1].update(fore="5m"), "fore"),
    ("PrometheusRule", lambda o: o["spec"]["groups"][0]["rules"][0].update(labels=[]), "rules/0"),
    ("ScaledObject", lambda o: o["spec"].update(maxReplicas=4), "maxReplicas"),
    ("ScaledObject", lambda o: o["spec"].update(minReplicaCount="2"), "integer"),
    ("ScaledObject", lambda o: o["spec"].pop("scaleTargetRef"), "scaleTargetRef"),
    ("ScaledObject", lambda o: o["spec"]["triggers"][0].pop("type"), "type"),
    ("PodDisruptionBudget", lambda o: o["spec"].update(maxUnavailabe=1), "maxUnavailabe"),
    ("LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
     ["tolerations"][0].update(operator=1), "string"),
    # what the API server checks beyond the schemas
    ("Deployment", lambda o: o["metadata"]["labels"].update(team="x" * 64), "not a label value"),
    ("ConfigMap", lambda o: o["metadata"].update(annotations={"bad key!": "1"}),
     "not a qualified name"),
    ("Service", lambda o: o["metadata"].update(name="9router"), "DNS-1035"),
    ("LeaderWorkerSet", lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
     ["containers"][0].update(name="Server"), "DNS-1123 label"),
    ("Deployment", lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
        name="sglang-http-metrics"), "IANA service name"),
]


@pytest.mark.parametrize(("kind", "breaks", "words"), BREAKS,
                         ids=[f"{kind}-{words}" for kind, _, words in BREAKS])
def test_validators_reject_what_a_cluster_rejects(kind: str, breaks: Any, words: str) -> None:
    broken = copy.deepcopy(_object(rendered(), kind))
    breaks(broken)
    errors = schema_errors([broken])
    (found,) = errors.values()
    assert found and any(words in line for line in found), found


def test_a_kind_without_a_schema_is_an_error_not_a_pass() -> None:
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert schema_errors([unknown]) == {"Widget/w": [
        f"Couldn't find schema for kind Widget with api version example.com/v1 for kubernetes "
        f"version {K8S_VERSION}"]}


def test_crd_validation_rejects_unknown_fields_and_honours_int_or_string(tmp_path: Path) -> None:
    """The path the upstream LWS CRD takes when it is provided at LWS_CRD (SCHEMAS.md says why
    it is not in the repo), on a small CRD written here in the same OpenAPI v3 form."""
    crd = tmp_path / "crd.yaml"
    crd.write_text(
        yaml.safe_dump(
            {
                "spec": {
                    "versions": [
                        {
                            "name": "v1",
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "properties": {
                                        "apiVersion": {"type": "string"},
                                        "kind": {"type": "string"},
                                        "metadata": {"type": "object"},
                                        "spec": {
                                            "type": "object",
                                            "required": ["size"],
                                            "properties": {
                                                "size": {"type": "integer"},
                                                "maxSurge": {
                                                    "x-kubernetes-int-or-string": True,
                                                    "anyOf": [
                                                        {"type": "integer"},
                                                        {"type": "string"},
                                                    ],
                                                },
                                                "template": {
                                                    "type": "object",
                                                    "x-kubernetes-preserve-unknown-fields": True,
                                                    "properties": {"a": {"type": "string"}},
                                                },
                                            },
                                        },
                                    },
                                }
                            },
                        }
                    ]
                }
            }
        )
    )
    good = {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "k"},
            "spec": {"size": 2, "maxSurge": "10%", "template": {"a": "b", "free": 1}}}
    assert crd_errors(good, crd) == []
    assert crd_errors({**good, "spec": {"size": "2", "sizee": 1}}, crd) == [
        "/spec/size '2' is not of type 'integer'",
        "/spec Additional properties are not allowed ('sizee' was unexpected)"]
    assert crd_errors({**good, "apiVersion": "x/v2"}, crd) == ["crd.yaml serves no version v2"]
    if LWS_CRD.exists():  # provided: the rendered LWS passes the real CRD too
        assert crd_errors(_object(rendered(), "LeaderWorkerSet"), LWS_CRD) == []
