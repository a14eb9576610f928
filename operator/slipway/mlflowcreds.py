"""Whose MLflow credentials a namespace's pods get: that namespace's own, never the operator's.

The operator acts in MLflow with one identity for every namespace (its own Secret, read from its
environment). The pods it creates (training, quantize, validate, fetch-model) talk to MLflow with
the namespace's identity instead: a cluster admin names, on the Namespace, a Secret of that
namespace holding MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN),
the annotation ``slipway.dev/mlflow-credentials``. The pods read it by reference (``envFrom``,
optional): its values never pass through the operator, which reads no Secret.

Without the annotation, a single-team operator falls back to the Secret its setting names
(``SLIPWAY_MLFLOW_CREDENTIALS_SECRET``, in the pod's namespace, as before); a multi-tenant one
(``--require-model-allowlist``) gives the pods no MLflow credentials at all: a namespace editor's
own Secret of that name is then no way to hand pods credentials the admin did not name. MLflow's
own permissions (its basic-auth app) then decide what each team's identity may read and write:
see docs/concepts/security.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from slipway.mlflow import MlflowError
from slipway.status.conditions import Cond

if TYPE_CHECKING:
    from slipway.reconcile import Context

MLFLOW_CREDENTIALS = "slipway.dev/mlflow-credentials"

# A Secret's name: a DNS-1123 subdomain.
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def named_secret(namespace: Mapping[str, Any] | None) -> str | None:
    """The Secret the Namespace's ``slipway.dev/mlflow-credentials`` annotation names, or None (no
    annotation, or a value that is no Secret name)."""
    annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    value = str(annotations.get(MLFLOW_CREDENTIALS) or "").strip()
    return value if len(value) <= 253 and _SECRET_NAME.fullmatch(value) else None


def workload_secret(namespace: Mapping[str, Any] | None, fallback: str, multi_tenant: bool) -> str | None:
    """The Secret of ``namespace`` (a Namespace object) whose MLflow credentials its pods read: the one
    its admin named; else, in single-team mode, ``fallback`` (the operator's setting; "" for none);
    else none."""
    named = named_secret(namespace)
    if named is not None:
        return named
    return None if multi_tenant else (fallback or None)


def missing(namespace_name: str) -> str:
    """What to say when a pod of ``namespace_name``, which got no MLflow credentials, was refused."""
    return (
        f"the pods of namespace {namespace_name} get no MLflow credentials: the Namespace has no "
        f"{MLFLOW_CREDENTIALS} annotation naming a Secret and the operator runs in multi-tenant mode; a cluster admin "
        f"names a Secret of that namespace (MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD) in it"
    )


# Failures of an object no pod of it caused: no note about its pods' credentials.
NOT_BY_PODS = frozenset({"InsufficientGPUMemory"})


def noting_missing(ctx: Context, phase: str, conditions: list[Cond]) -> list[Cond]:
    """``conditions`` of an object whose workload failed (``phase`` Failed), its Ready and Stalled
    messages ending in what the pods lacked when its namespace gave them no MLflow credentials
    (multi-tenant mode, no annotation); otherwise unchanged. Said only once a pod failed: a workload
    that needs no MLflow credentials runs without them."""
    if phase != "Failed" or not ctx.config.require_model_allowlist or of_pods(ctx) is not None:
        return conditions
    note = missing(ctx.namespace)
    return [
        dataclasses.replace(c, message=f"{c.message}; {note}")
        if c.type in ("Ready", "Stalled") and c.message and c.reason not in NOT_BY_PODS
        else c
        for c in conditions
    ]


class _State(Protocol):
    @property
    def phase(self) -> str: ...

    @property
    def conditions(self) -> list[Cond]: ...


S = TypeVar("S", bound=_State)


def noted(ctx: Context, state: S) -> S:
    """A TrainingRun's or ModelArtifact's computed state (a dataclass), noting_missing applied."""
    conditions = noting_missing(ctx, state.phase, state.conditions)
    return state if conditions is state.conditions else dataclasses.replace(state, conditions=conditions)  # type: ignore[type-var]


def of_pods(ctx: Context) -> str | None:
    """The Secret whose MLflow credentials the pods of ``ctx``'s object read (see workload_secret)."""
    namespace = ctx.cache.get("namespaces", "", ctx.namespace)
    return workload_secret(namespace, ctx.config.mlflow_credentials_secret, ctx.config.require_model_allowlist)


def _request(exc: MlflowError) -> str:
    """What MLflow refused, without the hint to check the credentials (they were good: a 403 is
    MLflow's permissions speaking)."""
    return exc.message.split(" (check MLFLOW_TRACKING_TOKEN", 1)[0]


@contextmanager
def refusals_named(field: str) -> Iterator[None]:
    """MLflow's refusal (HTTP 403: its permissions, not a wrong password) of what the spec's ``field``
    names, raised again naming that field and the fix; any other failure as it was."""
    try:
        yield
    except MlflowError as exc:
        if exc.status != 403:
            raise
        raise MlflowError(
            f"{field}: MLflow refused Slipway's MLflow identity what this field names: {_request(exc)}; "
            "name a source of this namespace's own experiments and models, or an MLflow admin grants "
            "Slipway's MLflow user READ on it",
            status=exc.status,
            error_code=exc.error_code,
        ) from None
