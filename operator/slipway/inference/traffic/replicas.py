"""spec.traffic.mode Replicas: one Service over both tracks; the canary's share of traffic is its
share of ready pods, so the split is the nearest the pods allow."""

from __future__ import annotations

from typing import Any

from slipway.inference import build
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.traffic.base import Objects, Sizing, replica_weight, split
from slipway.kinds import SERVICE, Kind
from slipway.tenancy import Policy


def _rank(share: float, weight: int, canary: int, pods: int) -> tuple[Any, ...]:
    # The share nearest the weight; at a tie the lower share, then fewer pods.
    return (round(abs(share - weight), 9), share > weight, pods)


def _share_and_note(weight: int, total: int, max_surge: int, canary: int, pods: int) -> tuple[int, str]:
    exact = 100 * canary / pods
    share = round(exact)
    if abs(exact - weight) < 1:
        return share, ""
    if canary == 1 and exact > weight:
        return share, f"one canary pod is the floor: {share}% of {pods} pods for a {weight}% step"
    return share, (
        f"{canary} of {pods} pods ({share}%) is the nearest split to {weight}% that {total} replicas "
        f"and spec.rollout.maxSurgeReplicas={max_surge} allow"
    )


class Replicas:
    mode = "Replicas"
    kinds: tuple[Kind, ...] = (SERVICE,)
    weights_apart_from_pods = False

    def check(self, spec: InferenceDeploymentSpec, namespace: str, tenancy: Policy) -> None:
        return None  # the Service is the namespace's own

    def split(self, weight: int, total: int, max_surge: int) -> Sizing:
        return split(weight, total, max_surge, _rank, _share_and_note)

    def carried(self, sizing: Sizing, weight: int, canary_ready: int, stable_ready: int) -> int:
        return replica_weight(canary_ready, stable_ready)

    def shared(self, canary_ready: int, stable_ready: int) -> int:
        return replica_weight(canary_ready, stable_ready)

    def objects(
        self, name: str, namespace: str, spec: InferenceDeploymentSpec, canary_weight: int, held_out: bool = False
    ) -> Objects:
        return {SERVICE: (build.service(name, namespace, spec),)}
