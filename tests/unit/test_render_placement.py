"""`render k8s` scheduling and sizing options: nodeSelector, tolerations, affinity and
priorityClassName on the serving pods (not the router), a PodDisruptionBudget, and a KEDA
ScaledObject on sglang's queue; every bad value refused with one line (exit 2) before writing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from opsctl.config.profiles import load_profile
from opsctl.core import labels
from opsctl.core.errors import UsageError
from opsctl.render import app as render
from opsctl.render import placement
from opsctl.render.serving import LWS_API
from opsctl.render.settings import RenderSettings

TWO_HOSTS = str(Path(__file__).parent.parent / "fixtures" / "profiles" / "glm5-2node.yaml")
GLM = "glm5-nvfp4-rtx6000"
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["RTX-PRO-6000"]}]}]}}}
FULL = placement.Placement(
    node_selector={"nvidia.com/gpu.present": "true"},
    tolerations=[placement.toleration("nvidia.com/gpu:NoSchedule")],
    affinity=AFFINITY, priority_class="llm-serving", pdb_max_unavailable=1,
    autoscale=placement.Autoscale(max_replicas=6, prometheus="http://prometheus.monitoring:9090",
                                  queue_threshold=4))


def _objects(profile: str = GLM, chosen: placement.Placement = FULL, **options: Any
             ) -> list[dict[str, Any]]:
    return render.render_objects(load_profile(profile).resolve("gathercast"), "IMAGE",
                                 RenderSettings(replicas=2, placement=chosen, **options))


def _one(
    objects: list[dict[str, Any]], kind: str, role: str = labels.ROLE_SERVER
) -> dict[str, Any]:
    (found,) = [obj for obj in objects if obj["kind"] == kind
                and obj["metadata"]["labels"][labels.ROLE] == role]
    return found


def test_scheduling_goes_to_every_serving_pod_and_not_the_router() -> None:
    wanted = {"nodeSelector": {"nvidia.com/gpu.present": "true"},
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                               "effect": "NoSchedule"}],
              "affinity": AFFINITY, "priorityClassName": "llm-serving"}
    one_host = _one(_objects(), "Deployment")["spec"]["template"]["spec"]
    group = _one(_objects(TWO_HOSTS), "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    for spec in (one_host, group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]):
        assert {key: spec[key] for key in wanted} == wanted
    router = _one(_objects(), "Deployment", labels.ROLE_ROUTER)["spec"]["template"]["spec"]
    assert not set(wanted) & set(router)
    plain = _one(_objects(chosen=placement.Placement()), "Deployment")["spec"]
    assert not set(wanted) & set(plain["template"]["spec"]) and plain["replicas"] == 2
    assert {obj["kind"] for obj in _objects(chosen=placement.Placement())}.isdisjoint(
        {"PodDisruptionBudget", "ScaledObject"})


def test_the_disruption_budget_selects_the_serving_pods() -> None:
    objects = _objects()
    budget = _one(objects, "PodDisruptionBudget")
    server = _one(objects, "Deployment")
    assert budget["apiVersion"] == "policy/v1" and budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == server["spec"]["selector"]["matchLabels"]
    assert budget["metadata"]["name"] == server["metadata"]["name"]


def test_keda_scales_the_router_fronted_units_on_their_queue() -> None:
    objects = _objects(name="glm")
    scaled = _one(objects, "ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": "glm"}
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 6)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metadata"] == {
        "serverAddress": "http://prometheus.monitoring:9090", "threshold": "4",
        "query": 'sum({__name__=~"sglang[:_]num_queue_reqs", job="sglang", namespace="opsctl", '
                 'variant="gathercast", pod=~"glm-[a-z0-9]+-[a-z0-9]+"})'}
    # KEDA owns the count: a re-apply must not reset it, so the Deployment names none
    assert "replicas" not in _one(objects, "Deployment")["spec"]
    group = _one(_objects(TWO_HOSTS, name="two"), "ScaledObject")["spec"]
    assert group["scaleTargetRef"] == {"apiVersion": LWS_API, "kind": "LeaderWorkerSet",
                                       "name": "two"}
    assert 'pod=~"two-[0-9]+"' in group["triggers"][0]["metadata"]["query"]  # leaders only


def test_the_queue_query_matches_serving_pods_only() -> None:
    query = _one(_objects(name="glm"), "ScaledObject")["spec"]["triggers"][0]["metadata"]["query"]
    pattern = re.search(r'pod=~"([^"]+)"', query)
    assert pattern is not None
    assert re.fullmatch(pattern[1], "glm-7d9f8c6b5-x2x9z")  # a pod of Deployment glm
    # the router, --name glm-x
    for other in ("glm-router-7d9f8c6b5-x2x9z", "glm-x-7d9f8c6b5-x2x9z"):
        assert not re.fullmatch(pattern[1], other)


def test_toleration_and_node_selector_spellings() -> None:
    assert placement.toleration("dedicated=llm:NoExecute") == {
        "key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoExecute"}
    assert placement.toleration("nvidia.com/gpu") == {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert placement.node_selector(["a=b", "example.com/pool=gpu-1"]) == {
        "a": "b", "example.com/pool": "gpu-1"}


@pytest.mark.parametrize(("call", "words"), [
    (lambda: placement.node_selector(["nokey"]), "not KEY=VALUE"),
    (lambda: placement.node_selector(["a=b", "a=c"]), "given twice"),
    (lambda: placement.node_selector(["bad key=1"]), "not a Kubernetes label or taint key"),
    (lambda: placement.node_selector(["a=" + "x" * 64]), "not a Kubernetes label value"),
    (lambda: placement.toleration("gpu:Never"), "effect 'Never' is not one of"),
    (lambda: placement.toleration("Bad_Prefix.com/x:NoSchedule"), "not a Kubernetes label"),
    (lambda: placement.priority_class("High Priority"), "cannot name a PriorityClass"),
    (lambda: placement.autoscale(4, None, 1, 2), "needs --keda-prometheus"),
    (lambda: placement.autoscale(None, "http://p:9090", 1, 2), "without --keda-max-replicas"),
    (lambda: placement.autoscale(1, "http://p:9090", 1, 2), "below --replicas 2"),
    (lambda: placement.autoscale(4, "prom:9090", 1, 2), "not an http"),
    (lambda: placement.autoscale(4, "http://u:secret@p:9090", 1, 2), "holds credentials"),
])
def test_bad_values_are_refused(call: Any, words: str) -> None:
    with pytest.raises(UsageError, match=words) as caught:
        call()
    assert "\n" not in str(caught.value) and caught.value.hint


def test_affinity_file_in_yaml_or_json(tmp_path: Path) -> None:
    as_json = tmp_path / "affinity.json"
    as_json.write_text(json.dumps(AFFINITY))
    as_yaml = tmp_path / "affinity.yaml"
    as_yaml.write_text("podAntiAffinity:\n  preferredDuringSchedulingIgnoredDuringExecution: []\n")
    assert placement.affinity(as_json) == AFFINITY
    assert placement.affinity(as_yaml) == {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("nodeAffinity: [", "not YAML or JSON (line 1)"),
        ("- a\n", "not a mapping"),
        ("", "not a mapping"),
        ("nodeAfinity: {}\n", "'nodeAfinity' is not a field of Affinity"),
        ("nodeAffinity: 3\n", "nodeAffinity is not a mapping"),
    ],
)
def test_a_bad_affinity_file_is_one_line(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "affinity.yaml"
    path.write_text(content)
    with pytest.raises(UsageError, match=re.escape(words)):
        placement.affinity(path)
    with pytest.raises(UsageError, match="No such file"):
        placement.affinity(tmp_path / "missing.yaml")
