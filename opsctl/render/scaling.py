"""What keeps the serving units up and sized: a PodDisruptionBudget (voluntary evictions, as
node drains make them) and an optional KEDA ScaledObject on sglang's queue.

- PodDisruptionBudget (policy/v1) `NAME` over the serving pods, `maxUnavailable` from
  `--pdb-max-unavailable`. It counts pods. For a LeaderWorkerSet every pod of every group is
  selected; since a group restarts whole when one of its pods goes (RecreateGroupOnPodRestart),
  `1` lets a drain take one group at a time.
- ScaledObject (keda.sh/v1alpha1) `NAME` scales the serving Deployment (or LeaderWorkerSet,
  which has the scale subresource) behind the router between `--replicas` and
  `--keda-max-replicas` on `sum(sglang:num_queue_reqs)` of this render's serving pods, through
  KEDA's prometheus scaler: with its default AverageValue metric, KEDA asks for
  ceil(queued / threshold) replicas. It never scales to zero: a replica loads for up to an hour.
  The query selects the sglang job's series of this namespace and variant (sglang labels them
  with the variant: --extra-metric-labels) from the pods of this render's server object.
"""

from __future__ import annotations

from typing import Any

from opsctl.core import labels
from opsctl.observe.promnames import sglang
from opsctl.render.monitoring import SGLANG_JOB
from opsctl.render.serving import LWS_API
from opsctl.render.target import Target

KEDA_API = "keda.sh/v1alpha1"


def scaling_objects(target: Target) -> list[dict[str, Any]]:
    placement = target.placement
    made = []
    if placement.pdb_max_unavailable is not None:
        made.append(_disruption_budget(target, placement.pdb_max_unavailable))
    if placement.autoscale is not None:
        made.append(_scaled_object(target))
    return made


def _disruption_budget(target: Target, max_unavailable: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": target.metadata(target.name, labels.ROLE_SERVER),
            "spec": {"maxUnavailable": max_unavailable,
                     "selector": {"matchLabels": target.selector(labels.ROLE_SERVER)}}}


def queue_query(target: Target) -> str:
    """Queued requests summed over this render's serving pods: a Deployment's pods are named
    `NAME-<hash>-<id>`, a LeaderWorkerSet's leaders `NAME-<group>` (the only ones serving)."""
    pods = (f"{target.name}-[0-9]+" if target.deployment.server.nnodes > 1
            else f"{target.name}-[a-z0-9]+-[a-z0-9]+")
    matchers = (f'job="{SGLANG_JOB}", namespace="{target.namespace}", '
                f'variant="{target.deployment.variant}", pod=~"{pods}"')
    return f"sum({sglang('num_queue_reqs', matchers)})"


def _scaled_object(target: Target) -> dict[str, Any]:
    scale = target.placement.autoscale
    assert scale is not None
    several = target.deployment.server.nnodes > 1
    return {"apiVersion": KEDA_API, "kind": "ScaledObject",
            "metadata": target.metadata(target.name, labels.ROLE_SERVER),
            "spec": {
                "scaleTargetRef": {"apiVersion": LWS_API if several else "apps/v1",
                                   "kind": "LeaderWorkerSet" if several else "Deployment",
                                   "name": target.name},
                "minReplicaCount": target.replicas,
                "maxReplicaCount": scale.max_replicas,
                "triggers": [{"type": "prometheus", "metadata": {
                    "serverAddress": scale.prometheus,
                    "query": queue_query(target),
                    "threshold": str(scale.queue_threshold)}}]}}
