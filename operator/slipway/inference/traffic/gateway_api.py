"""spec.traffic.mode GatewayAPI: an HTTPRoute with exact weights between one Service per track (and
the Service over both for clients that address it); the canary gets the fewest pods that carry the
step's weight at the stable's load per pod, the weight capped at what its pods can carry. The
Service over both tracks stops selecting the canary's pods while they are kept with no traffic after
a rollback (spec.rollout.scaleDownDelaySeconds), so that they get none through it either."""

from __future__ import annotations

import math
from typing import Any

from slipway.inference import build
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.traffic.base import Objects, Sizing, replica_weight, split
from slipway.kinds import HTTPROUTE, SERVICE, Kind
from slipway.tenancy import Policy


def route_capacity(canary_pods: int, stable_replicas: int) -> int:
    """The route weight ``canary_pods`` can carry at the stable's per-pod load."""
    return math.floor(100 * canary_pods / (max(1, stable_replicas) + canary_pods)) if canary_pods > 0 else 0


def _rank(share: float, weight: int, canary: int, pods: int) -> tuple[Any, ...]:
    # Splits that carry the weight first, the fewest pods among them; else the largest share.
    short = share < weight - 1e-9
    return (short, -share if short else pods, round(abs(share - weight), 9))


def _share_and_note(weight: int, total: int, max_surge: int, canary: int, pods: int) -> tuple[int, str]:
    share = min(weight, math.floor(100 * canary / pods + 1e-9))
    note = (
        f"capped by spec.rollout.maxSurgeReplicas={max_surge}: {share}% for a {weight}% step" if share < weight else ""
    )
    return share, note


class GatewayAPI:
    mode = "GatewayAPI"
    kinds: tuple[Kind, ...] = (SERVICE, HTTPROUTE)
    weights_apart_from_pods = True

    def check(self, spec: InferenceDeploymentSpec, namespace: str, tenancy: Policy) -> None:
        refs = [(ref.namespace or namespace, ref.name) for ref in spec.traffic.parent_refs or []]
        tenancy.check_gateways(refs, "spec.traffic.parentRefs")
        tenancy.check_hostnames(spec.traffic.hostnames or [], "spec.traffic.hostnames")

    def split(self, weight: int, total: int, max_surge: int) -> Sizing:
        return split(weight, total, max_surge, _rank, _share_and_note)

    def carried(self, sizing: Sizing, weight: int, canary_ready: int, stable_ready: int) -> int:
        # Ready canary pods keep the share they can carry while the rest start: the route never
        # falls back to 0% between two steps.
        if canary_ready >= sizing.pods:
            return sizing.share
        return min(weight, route_capacity(canary_ready, stable_ready))

    def shared(self, canary_ready: int, stable_ready: int) -> int:
        # Route weights in proportion to the tracks' ready pods: the same load on every pod.
        return replica_weight(canary_ready, stable_ready)

    def objects(
        self, name: str, namespace: str, spec: InferenceDeploymentSpec, canary_weight: int, held_out: bool = False
    ) -> Objects:
        # The Service over both tracks leaves the canary out while its pods are held with no traffic.
        both = build.service(name, namespace, spec, selects="stable" if held_out else None)
        services = (both, *(build.service(name, namespace, spec, track) for track in build.TRACKS))
        return {SERVICE: services, HTTPROUTE: (build.http_route(name, namespace, spec, canary_weight),)}
