"""What every kind's handlers share: spec parsing with field-naming errors, and
status writes that happen only on change, with an Event on each transition."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import kopf
from pydantic import BaseModel, ValidationError

from slipway import GROUP, VERSION, metrics
from slipway.mlflow import MlflowClient, MlflowError, MlflowUnavailable
from slipway.models.base import describe_errors
from slipway.status.conditions import READY, STALLED, Cond, get_condition, reconciling, set_conditions, stalled

M = TypeVar("M", bound=BaseModel)
WARNING_PHASES = {"Failed", "Rejected", "RolledBack"}


class InvalidSpec(Exception):
    """The spec passed the CRD schema but not Slipway's own checks."""

    def __init__(self, kind: str, name: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{kind} {name}: {'; '.join(problems)}")


def parse_spec(model: type[M], body: Mapping[str, Any]) -> M:
    """Validate the spec with the pydantic model (the same rules as the CRD's CEL)."""
    try:
        return model.model_validate(dict(body.get("spec") or {}))
    except ValidationError as exc:
        meta = body.get("metadata", {})
        kind = body.get("kind", "object")
        raise InvalidSpec(kind, f"{meta.get('namespace')}/{meta.get('name')}", describe_errors(exc.errors())) from exc


def _event_for(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The Event to post when a summary condition changes, as (type, reason, message)."""
    if old is not None and old.get("status") == new["status"] and old.get("reason") == new["reason"]:
        return None
    warning = new["type"] == STALLED and new["status"] == "True"
    return (
        "Warning" if warning else "Normal",
        new["reason"],
        new["message"] or f"{new['type']}={new['status']}",
    )


def write_status(
    kind: str,
    body: kopf.Body,
    patch: kopf.Patch,
    conditions: Iterable[Cond],
    **fields: Any,
) -> bool:
    """Patch status fields and conditions that differ from what is stored; post Events on transitions.

    Returns True when something was written. Nothing is written at rest, so a
    resync or a restart causes no status churn.
    """
    status = body.get("status") or {}
    generation = body.get("metadata", {}).get("generation")
    merged = set_conditions(status.get("conditions"), conditions, generation)
    changed = False
    if merged != status.get("conditions"):
        patch.status["conditions"] = merged
        changed = True
    for key, value in {**fields, "observedGeneration": generation}.items():
        if status.get(key) != value:
            # Status is merge-patched: keys the new value lacks must be sent as null to go away.
            patch.status[key] = _with_removals(status.get(key), value)
            changed = True
    phase = fields.get("phase")
    if phase is not None and status.get("phase") != phase:
        # One Event per transition: the new phase, with the Ready message as the why.
        metrics.TRANSITIONS.labels(kind, phase).inc()
        message = (get_condition(merged, READY) or {}).get("message", "")
        kopf.event(body, type="Warning" if phase in WARNING_PHASES else "Normal", reason=phase, message=message)
    else:
        # Within a phase, a change of the Ready reason (or a new Stalled) is the transition.
        old = status.get("conditions")
        for type_ in (READY, STALLED):
            new = get_condition(merged, type_)
            event = _event_for(get_condition(old, type_), new) if new else None
            if event and (type_ == READY or event[0] == "Warning"):
                kopf.event(body, type=event[0], reason=event[1], message=event[2])
    return changed


def _with_removals(old: Any, new: Any) -> Any:
    """``new``, plus ``None`` for every key of ``old`` (recursively) that ``new`` no longer has."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    merged = {key: _with_removals(old.get(key), value) for key, value in new.items()}
    merged.update({key: None for key in old if key not in new})
    return merged


@contextmanager
def mlflow_errors(kind: str, body: kopf.Body, patch: kopf.Patch) -> Iterator[None]:
    """MLflow trouble becomes a condition a user can read, and a retry (or a stop) for kopf."""
    try:
        yield
    except MlflowUnavailable as exc:
        write_status(kind, body, patch, reconciling("MlflowUnavailable", f"{exc}; retrying"))
        raise kopf.TemporaryError(str(exc), delay=10) from exc
    except MlflowError as exc:
        write_status(kind, body, patch, stalled("MlflowError", str(exc)))
        raise kopf.TemporaryError(str(exc), delay=60) from exc


# How often every object is reconciled even when nothing about it changed (level-based).
RESYNC_SECONDS = float(os.environ.get("SLIPWAY_RESYNC_SECONDS", "5"))
LOCK_TIMEOUT_SECONDS = 120.0
MLFLOW_NOT_CONFIGURED = "the operator has no MLflow address: set SLIPWAY_MLFLOW_URL (or --mlflow-url) in its Deployment"
F = TypeVar("F", bound=Callable[..., Any])


def level_based(plural: str, *, on_update: bool = True) -> Callable[[F], F]:
    """Register one reconcile function for resume, create, spec updates and a resync timer."""

    def register(fn: F) -> F:
        kopf.timer(GROUP, VERSION, plural, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)(fn)
        if on_update:
            kopf.on.update(GROUP, VERSION, plural, field="spec")(fn)
        kopf.on.create(GROUP, VERSION, plural)(fn)
        kopf.on.resume(GROUP, VERSION, plural)(fn)
        return fn

    return register


def reconcile_with(
    kind: str,
    model: type[M],
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    step: Callable[[M, MlflowClient | None], None],
    *,
    needs_mlflow: bool = True,
) -> None:
    """The frame of every reconcile: timed and counted, the spec parsed (an invalid one is Stalled
    with the field named), MLflow required if asked, MLflow trouble turned into a condition."""
    with metrics.reconcile_timer(kind):
        try:
            spec = parse_spec(model, body)
        except InvalidSpec as exc:
            write_status(kind, body, patch, stalled("InvalidSpec", str(exc)))
            return
        client: MlflowClient | None = memo.get("mlflow")
        if client is None and needs_mlflow:
            write_status(kind, body, patch, stalled("MlflowNotConfigured", MLFLOW_NOT_CONFIGURED))
            return
        # One pass at a time per object: the timer runs beside the create/update/resume
        # handlers, and two passes racing could both create what each looked up first.
        lock: threading.Lock = memo.setdefault("reconcile_lock", threading.Lock())
        if not lock.acquire(timeout=LOCK_TIMEOUT_SECONDS):
            raise kopf.TemporaryError("another reconciliation of this object is still running", delay=5)
        try:
            with mlflow_errors(kind, body, patch), kubernetes_errors(kind, body, patch):
                step(spec, client)
        finally:
            lock.release()


@contextmanager
def kubernetes_errors(kind: str, body: kopf.Body, patch: kopf.Patch) -> Iterator[None]:
    """Kubernetes API trouble (already in kopf's error vocabulary) also becomes a condition."""
    try:
        yield
    except kopf.PermanentError as exc:
        write_status(kind, body, patch, stalled("KubernetesError", str(exc)))
        raise kopf.TemporaryError(str(exc), delay=60) from exc
    except kopf.TemporaryError as exc:
        write_status(kind, body, patch, reconciling("KubernetesUnavailable", f"{exc}; retrying"))
        raise
