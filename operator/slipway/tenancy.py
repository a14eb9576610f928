"""Tenancy: which MLflow models a namespace may use (pure).

Cluster admins set the Namespace annotation ``slipway.dev/allowed-models`` (comma-separated
globs, e.g. ``team-a-*, shared-embeddings``); namespaces' annotations are theirs to set (RBAC
on namespaces), not the tenants'. Where the annotation is set, a TrainingRun, ModelArtifact or
InferenceDeployment naming any other model is refused before any MLflow call. With
``--require-model-allowlist`` (multi-tenant mode) a namespace without the annotation may use no
model at all, so no tenant can move another's aliases or tag its versions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

ALLOWED_MODELS = "slipway.dev/allowed-models"


def allowed_patterns(namespace: Mapping[str, Any] | None) -> list[str] | None:
    """The namespace's model globs, or None when it has no annotation."""
    annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ALLOWED_MODELS)
    if value is None:
        return None
    return [p.strip() for p in str(value).split(",") if p.strip()]


def refusal(
    namespace_name: str, namespace: Mapping[str, Any] | None, models: Iterable[str], required: bool
) -> str | None:
    """Why these models may not be used in this namespace, or None when they may."""
    patterns = allowed_patterns(namespace)
    if patterns is None and not required:
        return None
    for model in models:
        if not any(fnmatchcase(model, pattern) for pattern in patterns or []):
            where = (
                f"namespace {namespace_name} allows {', '.join(patterns)}"
                if patterns
                else f"namespace {namespace_name} has no {ALLOWED_MODELS} annotation and the operator runs with "
                "--require-model-allowlist"
            )
            return (
                f"MLflow model {model!r} is not allowed here: {where}; a cluster admin adds it to the "
                f"namespace's {ALLOWED_MODELS} annotation (comma-separated globs)"
            )
    return None
