"""Reading the lifecycle of Slipway objects on a cluster: phases, stage times, a compact live table."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from localkube.kube import condition

GROUP, VERSION = "slipway.dev", "v1alpha1"
KINDS = (
    ("TrainingRun", "trainingruns"),
    ("ModelArtifact", "modelartifacts"),
    ("InferenceDeployment", "inferencedeployments"),
)


def list_all(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    """Every Slipway object of the namespace (what `kubectl get slipway` shows)."""
    custom = client.CustomObjectsApi(api)
    objects = []
    for kind, plural in KINDS:
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]:
            item["kind"] = kind
            objects.append(item)
    return objects


def detail(obj: dict[str, Any]) -> str:
    """The one fact per kind an SRE looks at first."""
    status = obj.get("status") or {}
    if obj["kind"] == "TrainingRun":
        progress = status.get("progress") or {}
        step = f"step {progress.get('step', 0)}/{progress.get('totalSteps', '?')}" if progress else ""
        return step + (f", {status['restarts']} restarts" if status.get("restarts") else "")
    if obj["kind"] == "ModelArtifact":
        parts = [f"v{status['modelVersion']}" if status.get("modelVersion") else ""]
        if status.get("quantizedVersion"):
            parts.append(f"int8 v{status['quantizedVersion']}")
        return " ".join(p for p in parts if p)
    stable, canary = status.get("stable") or {}, status.get("canary") or {}
    text = f"stable v{stable['modelVersion']}" if stable.get("modelVersion") else ""
    if canary.get("modelVersion") and status.get("phase") not in ("Promoted", "RolledBack"):
        text += f", canary v{canary['modelVersion']} at {canary.get('weight', 0)}%"
    return text


def row(obj: dict[str, Any]) -> tuple[str, ...]:
    ready = condition(obj, "Ready")
    return (
        obj["kind"],
        obj["metadata"]["name"],
        (obj.get("status") or {}).get("phase") or "-",
        ready.get("reason") or "-",
        detail(obj),
    )


def table(rows: list[tuple[str, ...]]) -> str:
    header = ("KIND", "NAME", "PHASE", "REASON", "DETAIL")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    )


@dataclass
class Timeline:
    """When each object was first seen in each phase (wall clock since the start)."""

    start: float = field(default_factory=time.monotonic)
    seen: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def observe(self, objects: list[dict[str, Any]]) -> None:
        now = time.monotonic() - self.start
        for obj in objects:
            phase = (obj.get("status") or {}).get("phase")
            if phase:
                self.seen.setdefault((obj["kind"], obj["metadata"]["name"], phase), now)

    def at(self, kind: str, name: str, phase: str) -> float | None:
        return self.seen.get((kind, name, phase))

    def elapsed(self) -> float:
        return time.monotonic() - self.start
