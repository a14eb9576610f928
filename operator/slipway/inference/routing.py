"""A plan's split carried to clients: the objects the traffic router names, ensured kind by kind
(``slipway.inference.traffic.Objects``), and this deployment's objects of every kind a router owns
that its router no longer names, deleted (a mode changed leaves none of the last one's behind).

What clients address (Services) is ensured before the track Deployments change; every other
routed kind (routes and their weights) after, so that weights follow the pods. The handler knows no
kind a router owns but the Service: a router's new kind is handled here with no edit. Of the kinds the
handler makes for itself (the track Deployments, the HPA), a router prunes only the objects it
labelled as routed (``traffic.base.ROUTED``: an endpoint picker's Deployment)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from slipway.inference import traffic
from slipway.inference.traffic.base import ROUTED
from slipway.kinds import DEPLOYMENT, HPA, SERVICE, Kind
from slipway.reconcile import Context

ADDRESSED = (SERVICE,)  # ensured before the pods move
OWN = (DEPLOYMENT, HPA)  # kinds the handler makes for itself: a router's are those labelled ROUTED


def is_routed(obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in ROUTED.items())


def ensure_kinds(ctx: Context, routed: traffic.Objects, kinds: Iterable[Kind]) -> None:
    """The router's objects of ``kinds``; this deployment's other objects of these kinds are deleted."""
    for kind in kinds:
        wanted = routed.get(kind, ())
        for body in wanted:
            ctx.ensure(kind.index, body)
        ctx.prune(kind.index, [body["metadata"]["name"] for body in wanted], is_routed if kind in OWN else None)


def routed_kinds(routed: traffic.Objects) -> tuple[Kind, ...]:
    """The kinds ``routed`` names, in its order (what a route points at exists before the route; a
    RoleBinding's Role before it), then every other kind a router owns (pruned)."""
    return tuple(dict.fromkeys([*routed, *traffic.routed_kinds()]))


def before_pods(ctx: Context, routed: traffic.Objects) -> None:
    """What clients address: ensured before the track Deployments change."""
    ensure_kinds(ctx, routed, [kind for kind in routed_kinds(routed) if kind in ADDRESSED])


def after_pods(ctx: Context, routed: traffic.Objects) -> None:
    """Every other routed kind (the routes and their weights): ensured once the pods are applied."""
    ensure_kinds(ctx, routed, [kind for kind in routed_kinds(routed) if kind not in ADDRESSED])
