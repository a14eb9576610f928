"""The tenant of tests/security: what it creates, and how a refusal shows on the object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from localkube.kube import condition
from slipway_testing.cluster import GROUP, VERSION, custom


def create_as(tenant: Any, namespace: str, body: dict[str, Any]) -> None:
    """Create a Slipway object as ``tenant`` (tests/security's ``tenant`` fixture)."""
    custom(tenant.api).create_namespaced_custom_object(GROUP, VERSION, namespace, body["kind"].lower() + "s", body)


def stalled_with(reason: str) -> Callable[[dict[str, Any]], bool]:
    return lambda o: condition(o, "Stalled").get("reason") == reason
