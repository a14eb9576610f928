"""What every kind's pass shares: the context it reads from, status written only on change
(typed, with one Event per transition), and errors turned into conditions and retries."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf
from pydantic import BaseModel, ValidationError

from slipway import children, kube, metrics
from slipway.config import OperatorConfig
from slipway.controller import Cache, Key
from slipway.mlflow import MlflowClient, MlflowError, MlflowUnavailable
from slipway.models.base import StatusModel, describe_errors
from slipway.prometheus import PrometheusClient
from slipway.status.conditions import READY, STALLED, Cond, get_condition, reconciling, set_conditions, stalled

M = TypeVar("M", bound=BaseModel)
S = TypeVar("S", bound=StatusModel)
WARNING_PHASES = {"Failed", "Rejected", "RolledBack"}
MLFLOW_NOT_CONFIGURED = "the operator has no MLflow address: set SLIPWAY_MLFLOW_URL (or --mlflow-url) in its Deployment"
LEGACY_FINALIZER = "slipway.dev/finalizer"  # added by kopf timers in earlier Slipway versions


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


@dataclass
class Context:
    """One pass over one object: what it reads (the object, the cache, the clients) and what it
    will write (a status patch and Events, sent once at the end)."""

    key: Key
    body: dict[str, Any]
    status_model: type[StatusModel]
    kube: kube.Kube
    cache: Cache
    config: OperatorConfig
    mlflow: MlflowClient | None = None
    prometheus: PrometheusClient | None = None
    patch: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)  # per-object, across passes (caches only)
    deferred: list[Callable[[], Any]] = field(default_factory=list)  # writes to the object itself

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def uid(self) -> str:
        return str(self.body["metadata"]["uid"])

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def child(self, index: str, name: str) -> dict[str, Any] | None:
        """An observed child from the cache (only objects labelled as Slipway's are cached)."""
        return self.cache.get(index, self.namespace, name)

    def ensure(
        self, index: str, desired: dict[str, Any], create_extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Create, update or keep one child (see ``children``); returns it as it now is."""
        decision, obj = children.apply(
            self.kube, self.body, desired, self.child(index, desired["metadata"]["name"]), create_extra
        )
        if decision.action != "Keep":
            metrics.CHILD_ACTIONS.labels(decision.kind, decision.action).inc()
        assert obj is not None
        return obj

    def prune(self, index: str, wanted: Iterable[str]) -> None:
        """Delete this object's children in ``index`` that are not ``wanted``."""
        observed = {o["metadata"]["name"]: o for o in self.cache.owned_by(index, self.uid)}
        for decision in children.stale(observed.values(), wanted, self.uid):
            children.delete(self.kube, decision, self.namespace, observed[decision.name])
            metrics.CHILD_ACTIONS.labels(decision.kind, "Delete").inc()


def write_status(ctx: Context, conditions: Iterable[Cond], **fields: Any) -> bool:
    """Stage status fields (snake_case names of the kind's status model) and conditions that
    differ from what is stored; stage an Event on each transition. True when something changed.

    Validated through the status model, so what is written is what the CRD describes. Nothing
    is staged at rest, so a pass over a settled object writes nothing."""
    names = {f.alias or n: n for n, f in ctx.status_model.model_fields.items()}
    unknown = [k for k in fields if k not in names and k not in ctx.status_model.model_fields]
    if unknown:
        raise ValueError(f"{ctx.status_model.__name__} has no fields {unknown}")
    fields = {names.get(k, k): v for k, v in fields.items()}
    stored = ctx.status
    generation = ctx.body["metadata"].get("generation")
    try:
        current = ctx.status_model.model_validate(stored).model_dump()
    except ValidationError:
        current = {}
    merged = set_conditions(stored.get("conditions"), conditions, generation)
    current.update(fields, conditions=merged, observed_generation=generation)
    new = ctx.status_model.model_validate(current).to_dict()
    known = {f.alias or name for name, f in ctx.status_model.model_fields.items()}
    delta = {k: _with_removals(stored.get(k), v) for k, v in new.items() if stored.get(k) != v}
    delta.update({k: None for k in stored if k in known and k not in new})
    if not delta:
        return False
    _stage_events(ctx, stored, new)
    ctx.patch.update(delta)
    ctx.body["status"] = {k: v for k, v in {**stored, **new}.items() if k in new or k not in known}
    return True


def _stage_events(ctx: Context, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    phase = new.get("phase")
    if phase is not None and old.get("phase") != phase:
        # One Event per transition: the new phase, with the Ready message as the why.
        metrics.TRANSITIONS.labels(ctx.kind, phase).inc()
        message = (get_condition(new.get("conditions"), READY) or {}).get("message", "")
        ctx.event("Warning" if phase in WARNING_PHASES else "Normal", phase, message)
        return
    # Within a phase, a newly Stalled object (a Warning) or a new Ready reason is the transition.
    stalled_event = _event_for(
        get_condition(old.get("conditions"), STALLED), get_condition(new.get("conditions"), STALLED)
    )
    ready_event = _event_for(get_condition(old.get("conditions"), READY), get_condition(new.get("conditions"), READY))
    event = stalled_event if stalled_event and stalled_event[0] == "Warning" else ready_event
    if event:
        ctx.event(*event)


def _event_for(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    """The Event to post when a summary condition changes, as (type, reason, message)."""
    if new is None or (old is not None and old.get("status") == new["status"] and old.get("reason") == new["reason"]):
        return None
    warning = new["type"] == STALLED and new["status"] == "True"
    return ("Warning" if warning else "Normal", new["reason"], new["message"] or f"{new['type']}={new['status']}")


def _with_removals(old: Any, new: Any) -> Any:
    """``new``, plus ``None`` for every key of ``old`` (recursively) that ``new`` no longer has."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    merged = {key: _with_removals(old.get(key), value) for key, value in new.items()}
    merged.update({key: None for key in old if key not in new})
    return merged


def flush(ctx: Context) -> None:
    """Send the staged status (conditional on the object not having changed since it was read:
    a conflict retries the pass with the newer object), then the staged Events."""
    if ctx.patch:
        body = {"metadata": {"resourceVersion": ctx.body["metadata"]["resourceVersion"]}, "status": ctx.patch}
        written = kube.patch_status(ctx.kube, ctx.kind, ctx.namespace, ctx.name, body)
        ctx.cache.remember(ctx.key, written)
        ctx.patch = {}
    for type_, reason, message in ctx.events:
        kube.post_event(ctx.kube, ctx.body, type_, reason, message)
    ctx.events = []
    # Writes to the object's own metadata come last: they change its resourceVersion.
    for action in ctx.deferred:
        action()
    ctx.deferred = []


def drop_legacy_finalizer(ctx: Context) -> None:
    """Objects made under earlier versions carry a finalizer nothing needs any more: remove it,
    so that deleting them never waits for the operator."""
    finalizers = list(ctx.body["metadata"].get("finalizers") or [])
    if LEGACY_FINALIZER in finalizers:
        meta = {
            "finalizers": [f for f in finalizers if f != LEGACY_FINALIZER],
            "resourceVersion": ctx.body["metadata"]["resourceVersion"],
        }
        ctx.cache.remember(ctx.key, kube.patch(ctx.kube, ctx.kind, ctx.namespace, ctx.name, {"metadata": meta}))
        raise kopf.TemporaryError("removed the finalizer of an earlier Slipway version", delay=0)


def run_pass(
    ctx: Context, spec_model: type[M], step: Callable[[Context, M], float | None], *, needs_mlflow: bool = True
) -> float | None:
    """The frame of every pass: timed and counted, the pass attempted, then its status and Events
    written. Returns when to run the pass again (seconds), or None to wait for a change."""
    with metrics.reconcile_timer(ctx.kind):
        requeue = attempt(ctx, spec_model, step, needs_mlflow=needs_mlflow)
        flush(ctx)
    return requeue


def attempt(
    ctx: Context, spec_model: type[M], step: Callable[[Context, M], float | None], *, needs_mlflow: bool = True
) -> float | None:
    """Run ``step`` with the spec parsed (an invalid one is Stalled with the field named) and MLflow
    required if asked; errors become conditions a user can read, and a retry delay."""
    try:
        drop_legacy_finalizer(ctx)
        spec = parse_spec(spec_model, ctx.body)
        if ctx.mlflow is None and needs_mlflow:
            write_status(ctx, stalled("MlflowNotConfigured", MLFLOW_NOT_CONFIGURED))
            return None
        return step(ctx, spec)
    except InvalidSpec as exc:
        write_status(ctx, stalled("InvalidSpec", str(exc)))
        return None
    except children.OwnedByOther as exc:
        write_status(ctx, stalled("OwnedByOther", str(exc)))
        return 60.0
    except MlflowUnavailable as exc:
        write_status(ctx, reconciling("MlflowUnavailable", f"{exc}; retrying"))
        return 10.0
    except MlflowError as exc:
        write_status(ctx, stalled("MlflowError", str(exc)))
        return 60.0
    except kopf.PermanentError as exc:
        write_status(ctx, stalled("KubernetesError", str(exc)))
        return 60.0
    except kopf.TemporaryError as exc:
        if exc.delay:  # delay 0: a step that only needs the next pass, not an outage
            write_status(ctx, reconciling("KubernetesUnavailable", f"{exc}; retrying"))
        return float(exc.delay or 0)
