"""Names, labels and container pieces shared by every builder."""

from __future__ import annotations

import hashlib
from typing import Any

from slipway.models.base import EnvVar, Resources

MANAGED_BY = {"app.kubernetes.io/managed-by": "slipway"}
MAX_NAME = 63  # Job and Service names end up in label values and DNS labels.


def child_name(parent: str, suffix: str) -> str:
    """A deterministic child name: ``<parent>-<suffix>``, shortened with a hash past 63 characters."""
    name = f"{parent}-{suffix}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    keep = MAX_NAME - len(suffix) - len(digest) - 2
    return f"{parent[:keep].rstrip('-')}-{digest}-{suffix}"


def env_list(base: dict[str, str], extra: list[EnvVar] | None) -> list[dict[str, Any]]:
    """Slipway's variables first, then the user's (a user's variable of the same name wins)."""
    user = [e.to_dict() for e in extra or []]
    names = {e["name"] for e in user}
    return [{"name": k, "value": v} for k, v in base.items() if k not in names] + user


def resource_requirements(resources: Resources) -> dict[str, Any]:
    """GPUs as a limit on the extended resource; CPU and memory as request = limit."""
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if resources.gpus:
        limits[resources.gpu_resource_name] = str(resources.gpus)
    for key in ("cpu", "memory"):
        value = getattr(resources, key)
        if value is not None:
            limits[key] = requests[key] = value
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out
