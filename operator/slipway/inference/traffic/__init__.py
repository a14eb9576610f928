"""Traffic routers: how a rollout's split reaches clients, one module per spec.traffic.mode.

A new router is one module implementing :class:`Router`, one row of
:data:`ROUTERS` and its name in the CRD's ``traffic.mode`` enum (a unit test keeps them equal); an
object kind no router owned before is one more row of ``slipway.kinds``. See docs/extending.md.
"""

from __future__ import annotations

from slipway.inference.traffic.base import Objects, Router, Sizing, replica_weight
from slipway.inference.traffic.gateway_api import GatewayAPI
from slipway.inference.traffic.inference_pool import InferencePool
from slipway.inference.traffic.replicas import Replicas
from slipway.kinds import Kind

ROUTERS: dict[str, Router] = {router.mode: router for router in (Replicas(), GatewayAPI(), InferencePool())}


def router(mode: str) -> Router:
    """The router of spec.traffic.mode."""
    return ROUTERS[mode]


def routed_kinds() -> tuple[Kind, ...]:
    """Every kind a router of :data:`ROUTERS` owns, once each: what a deployment's router does not
    name of these is pruned (a mode changed leaves none of the last one's objects behind)."""
    return tuple(dict.fromkeys(kind for each in ROUTERS.values() for kind in each.kinds))


__all__ = ["ROUTERS", "Objects", "Router", "Sizing", "replica_weight", "routed_kinds", "router"]
