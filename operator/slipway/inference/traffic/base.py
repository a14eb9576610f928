"""What every traffic router shares: the split it plans and the search for it.

A router turns a step's weight into a split of the serving pods between the tracks (:class:`Sizing`),
says what share of traffic the canary carries as pods become ready, and names the objects that
carry the split (Services, routes), keyed by their kind. The rollout planner
(``slipway.inference.rollout``) is handed the router of ``spec.traffic.mode`` with what a pass
observes and never asks which one it is; the handler ensures the objects it names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from slipway.inference.model import InferenceDeploymentSpec
from slipway.kinds import Kind
from slipway.tenancy import Policy


@dataclass(frozen=True)
class Sizing:
    """A step's split: canary and stable pods once traffic has moved, and the share the canary carries."""

    pods: int  # canary pods
    share: int  # the canary's share of traffic once every pod of the split is ready
    note: str = ""  # why the step's weight cannot be met, if it cannot
    stable: int = 0  # stable pods


# On every object a router names that is of a kind the handler also makes for itself (an endpoint
# picker's Deployment beside the track Deployments): only objects of those kinds that carry it are
# a router's to prune (see slipway.inference.routing).
ROUTED_LABEL = "slipway.dev/routed"
ROUTED = {ROUTED_LABEL: "true"}

# What carries a split: the objects to ensure, by kind (a row of slipway.kinds). The owner's other
# objects of those kinds, and of every kind a router owns (:attr:`Router.kinds`), are pruned.
Objects = Mapping[Kind, tuple[dict[str, Any], ...]]


class Router(Protocol):
    """One traffic mode (spec.traffic.mode)."""

    mode: str
    # The kinds of the objects it names (rows of slipway.kinds, each with the RBAC verbs it needs).
    kinds: tuple[Kind, ...]
    # Traffic follows the router's weights, not the pods: a track's pods can stay with no traffic
    # (spec.rollout.scaleDownDelaySeconds keeps a rolled-back canary's pods so for a while).
    weights_apart_from_pods: bool

    def check(self, spec: InferenceDeploymentSpec, namespace: str, tenancy: Policy) -> None:
        """Refuse (tenancy.Refused) what this namespace may not route through."""

    def split(self, weight: int, total: int, max_surge: int) -> Sizing:
        """The step's split of ``total`` pods, with up to ``max_surge`` extra pods."""

    def carried(self, sizing: Sizing, weight: int, canary_ready: int, stable_ready: int) -> int:
        """The share of traffic the canary carries now, its pods ``canary_ready`` of ``sizing.pods``."""

    def shared(self, canary_ready: int, stable_ready: int) -> int:
        """The share of traffic the canary carries when both tracks serve with no step to split by (a
        promotion rolling the stable and moving the canary's pods to it; a canary whose pods are the
        only ready ones after a rollback): what this router sends to ``canary_ready`` pods beside
        ``stable_ready`` ones."""

    def objects(
        self, name: str, namespace: str, spec: InferenceDeploymentSpec, canary_weight: int, held_out: bool = False
    ) -> Objects:
        """The objects (Services, routes) that carry ``canary_weight`` percent to the canary, by kind,
        of its :attr:`kinds` only; ``held_out``: the canary's pods are kept with no traffic at all (see
        weights_apart_from_pods)."""


def replica_weight(canary_ready: int, stable_ready: int) -> int:
    """The canary's share of ready pods: what a Service over both tracks gives it."""
    total = canary_ready + stable_ready
    return round(100 * canary_ready / total) if total else 0


# A candidate split's rank (lower is better): (share, weight, canary pods, pods) -> key.
Rank = Callable[[float, int, int, int], tuple[Any, ...]]


def nearest_split(weight: int, total: int, max_surge: int, rank: Rank) -> tuple[int, int] | None:
    """The (canary pods, pods) that ``rank`` likes best among splits of ``total`` to ``total +
    max_surge`` pods with at least one pod on each track; None when there is no such split."""
    best: tuple[tuple[Any, ...], int, int] | None = None
    for pods in range(total, total + max_surge + 1):
        exact = weight * pods / 100
        for canary in {math.floor(exact), math.ceil(exact)}:
            canary = min(max(canary, 1), pods - 1)
            if canary < 1:
                continue
            key = rank(100 * canary / pods, weight, canary, pods)
            if best is None or key < best[0]:
                best = (key, canary, pods)
    return None if best is None else (best[1], best[2])


def split(
    weight: int, total: int, max_surge: int, rank: Rank, share_and_note: Callable[..., tuple[int, str]]
) -> Sizing:
    """The split a router ranks best, never fewer than ``total`` pods (at least 1); all on the canary
    at 100%; the stable alone, with a note naming the fix, when no split leaves a pod to each."""
    total = max(1, total)
    if weight >= 100:
        return Sizing(total, 100, "", 0)
    found = nearest_split(weight, total, max_surge, rank)
    if found is None:
        note = (
            f"no room for a canary pod beside the stable one: spec.replicas is {total} and "
            f"spec.rollout.maxSurgeReplicas {max_surge}; allow one extra pod or run 2 replicas"
        )
        return Sizing(0, 0, note, total)
    canary, pods = found
    share, note = share_and_note(weight, total, max_surge, canary, pods)
    return Sizing(canary, share, note, pods - canary)
