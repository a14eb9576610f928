"""Traffic routers: how a rollout's split reaches clients, one module per spec.traffic.mode.

A new router (e.g. an InferencePool mode) is one module implementing :class:`Router` and one row
of :data:`ROUTERS` (and its name in the CRD's ``traffic.mode`` enum; a unit test keeps them equal).
"""

from __future__ import annotations

from slipway.inference.traffic.base import Objects, Router, Sizing, replica_weight
from slipway.inference.traffic.gateway_api import GatewayAPI
from slipway.inference.traffic.replicas import Replicas

ROUTERS: dict[str, Router] = {router.mode: router for router in (Replicas(), GatewayAPI())}
ROUTED_KINDS = tuple(Objects().by_kind())  # every kind a router's Objects may hold: pruned by name


def router(mode: str) -> Router:
    """The router of spec.traffic.mode."""
    return ROUTERS[mode]


__all__ = ["ROUTED_KINDS", "ROUTERS", "Objects", "Router", "Sizing", "replica_weight", "router"]
