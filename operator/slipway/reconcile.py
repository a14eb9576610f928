"""One reconciliation pass over one object: the context it reads from, and the frame that runs
it (spec parsed, failures turned into conditions and a retry delay, status and Events written
once at the end)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf
from pydantic import BaseModel, ValidationError

from slipway import children, kube, metrics, tenancy
from slipway.config import OperatorConfig
from slipway.controller import Cache, Key
from slipway.mlflow import MlflowClient, MlflowError, MlflowUnavailable, Unproven
from slipway.models.base import StatusModel, describe_errors
from slipway.prometheus import PrometheusClient
from slipway.status.conditions import Cond, new_generation, reconciling, stalled
from slipway.status.writer import Event, next_status, repair
from slipway.tenancy import Policy

M = TypeVar("M", bound=BaseModel)
Step = Callable[["Context", M], "float | None"]
Models = Callable[[M], list[tenancy.Use]]
UNPROVEN_RECHECK_SECONDS = 300.0  # an MLflow object Slipway did not make, until it is renamed or opted in
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
    events: list[Event] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)  # per object, across passes: caches only
    deferred: list[Callable[[], Any]] = field(default_factory=list)  # writes to the object itself
    # The namespace's allow-list, read at the start of each pass (inactive until then).
    tenancy: Policy = field(default_factory=lambda: Policy("", None))
    # How many objects wait for their first pass now (a sweep being applied); any thread.
    backlog: Callable[[], int] = lambda: 0

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

    def write(self, conditions: Iterable[Cond], **fields: Any) -> bool:
        """Stage the status fields (the kind's status model, by name) and conditions that differ
        from what is stored, and an Event per transition. True when something changed."""
        generation = self.body["metadata"].get("generation")
        after, change = next_status(self.status_model, self.status, generation, conditions, fields)
        if not change.patch:
            return False
        if "phase" in change.patch and after.get("phase"):
            metrics.TRANSITIONS.labels(self.kind, after["phase"]).inc()
        self.patch.update(change.patch)
        self.events += change.events
        self.body["status"] = after
        return True

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def child(self, index: str, name: str) -> dict[str, Any] | None:
        """An observed child from the cache (only objects labelled as Slipway's are cached)."""
        return self.cache.get(index, self.namespace, name)

    def ensure(
        self, index: str, desired: dict[str, Any], create_extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Create, update or keep one child (see ``children``); returns it as it now is."""
        observed = self.child(index, desired["metadata"]["name"])
        decision, obj = children.apply(self.kube, self.body, desired, observed, create_extra)
        if decision.action != "Keep":
            metrics.CHILD_ACTIONS.labels(decision.kind, decision.action).inc()
        assert obj is not None
        return obj

    def prune(self, index: str, wanted: Iterable[str], only: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """Delete this object's children in ``index`` that are not ``wanted`` (of those ``only`` accepts)."""
        owned = self.cache.owned_by(index, self.uid)
        observed = {o["metadata"]["name"]: o for o in owned if only is None or only(o)}
        for decision in children.stale(observed.values(), wanted, self.uid):
            children.delete(self.kube, decision, self.namespace, observed[decision.name])
            metrics.CHILD_ACTIONS.labels(decision.kind, "Delete").inc()


def flush(ctx: Context) -> None:
    """Send the staged status (conditional on the object not having changed since it was read:
    a conflict retries the pass with the newer object), then the Events, then own-metadata writes."""
    if ctx.patch:
        body = {"metadata": {"resourceVersion": ctx.body["metadata"]["resourceVersion"]}, "status": ctx.patch}
        written = kube.patch_status(ctx.kube, ctx.kind, ctx.namespace, ctx.name, body)
        ctx.cache.remember(ctx.key, written)
        ctx.body["metadata"]["resourceVersion"] = written["metadata"]["resourceVersion"]
        ctx.patch = {}
    for type_, reason, message in ctx.events:
        kube.post_event(ctx.kube, ctx.body, type_, reason, message)
    ctx.events = []
    for action in ctx.deferred:  # they change the object's resourceVersion: last
        action()
    ctx.deferred = []


def drop_legacy_finalizer(ctx: Context) -> None:
    """Objects made under earlier versions carry a finalizer nothing needs any more: remove it,
    so that deleting them never waits for the operator."""
    meta = ctx.body["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if LEGACY_FINALIZER in finalizers:
        kept = [f for f in finalizers if f != LEGACY_FINALIZER]
        patch = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
        ctx.cache.remember(ctx.key, kube.patch(ctx.kube, ctx.kind, ctx.namespace, ctx.name, patch))
        raise kopf.TemporaryError("removed the finalizer of an earlier Slipway version", delay=0)


def announce_generation(ctx: Context) -> None:
    """A new generation reads Reconciling (Ready=False) at that generation before the pass does
    any I/O: kstatus, Flux and ``helm --wait`` never take the last generation's Ready for this one.

    Not on the first pass of an object without any status while others wait for their first
    pass (a sweep being applied): it has no earlier Ready to be mistaken for, and that pass makes
    its first child without this extra write and Event. Once per object: its next pass announces
    before any I/O, unless the first one wrote a status."""
    if not new_generation(ctx.body):
        return
    if not ctx.body.get("status") and ctx.backlog() and not ctx.memory.get(UNANNOUNCED):
        ctx.memory[UNANNOUNCED] = True
        return
    generation = ctx.body["metadata"].get("generation")
    ctx.write(
        reconciling("NewGeneration", f"{ctx.kind} {ctx.namespace}/{ctx.name}: reconciling generation {generation}")
    )
    flush(ctx)


def run_pass(
    ctx: Context, spec_model: type[M], step: Step[M], models: Models[M], *, needs_mlflow: bool = True
) -> float | None:
    """The frame of every pass: timed and counted, the pass attempted, then its status and Events
    written. Returns when to run the pass again (seconds), or None to wait for a change.
    ``models`` names the MLflow models and experiments the spec uses (checked against the namespace's
    allow-list)."""
    metrics.OBJECTS.start(ctx.kind, ctx.namespace, ctx.name)
    with metrics.reconcile_timer(ctx.kind) as outcome:
        # A status edited into garbage is repaired before the pass reads it: what does not validate
        # is dropped (a Warning Event each), the rest, durable decisions included, is kept.
        kept, repaired = repair(ctx.status_model, ctx.status)
        if repaired.events:
            ctx.body["status"], ctx.events = kept, ctx.events + repaired.events
            ctx.patch.update(repaired.patch)
        requeue = attempt(ctx, spec_model, step, needs_mlflow=needs_mlflow, models=models)
        try:
            flush(ctx)
        except kube.Conflict:
            requeue = conflicted(ctx)
        except kube.Unavailable as exc:  # the status write itself: what is staged is made again next pass
            ctx.patch, ctx.events, ctx.deferred = {}, [], []
            requeue = unavailable(ctx, exc, stage_condition=False)
        if ctx.memory.get(RETRYING):
            outcome.result = "retry"
        else:
            ctx.memory.pop(CONFLICTS, None)
    metrics.OBJECTS.observe(ctx.kind, ctx.namespace, ctx.name, ctx.body.get("status"))
    return requeue


UNANNOUNCED = "unannounced"  # ctx.memory: a sweep's first pass made its first child unannounced
RETRIES = "retries"  # ctx.memory: consecutive passes the API server failed (backoff)
RETRYING = "retrying"  # ctx.memory: this pass ends in a retry (counted as result="retry")
REREAD = "reread"  # ctx.memory: the next pass reads its object from the API server, not the cache
CONFLICTS = "conflicts"  # ctx.memory: consecutive passes that ended in a 409
VISIBLE_AFTER = 3  # failed passes in a row before a condition says so (one is routine on a busy cluster)
BACKOFF_BASE, BACKOFF_CAP = 1.0, 300.0


def backoff(retries: int, retry_after: float | None = None, rng: Callable[[], float] = random.random) -> float:
    """Seconds before try ``retries + 1``: exponential from ``BACKOFF_BASE`` to ``BACKOFF_CAP`` with equal
    jitter (half fixed, half random, so that many objects failing at once do not retry at once), and
    never sooner than the ``Retry-After`` the API server asked for."""
    delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** max(0, retries - 1))
    jittered = delay / 2 + rng() * delay / 2
    return max(jittered, retry_after or 0.0)


def conflicted(ctx: Context) -> float:
    """A 409: the object or a child changed since the cache saw it. Run again at once, the object read
    from the API server; no condition, no Event (routine with two writers or a lagging watch). Conflicts
    in a row (a child's watch event still on its way) wait 0.1, 0.2 … up to 2 s, never spin."""
    conflicts = ctx.memory[CONFLICTS] = int(ctx.memory.get(CONFLICTS, 0)) + 1
    ctx.memory[REREAD] = True
    ctx.memory[RETRYING] = True
    ctx.patch, ctx.events, ctx.deferred = {}, [], []
    return 0.0 if conflicts == 1 else min(2.0, 0.05 * 2 ** (conflicts - 1))


def unavailable(ctx: Context, exc: kube.Unavailable, stage_condition: bool = True) -> float:
    """5xx, 429, a timeout: back off per object; after ``VISIBLE_AFTER`` in a row, say so in a condition
    (not when the status write is what failed: the condition could not be written either). A pass whose
    step already counted this failure is not counted twice."""
    if not ctx.memory.get(RETRYING):
        ctx.memory[RETRIES] = int(ctx.memory.get(RETRIES, 0)) + 1
    retries = int(ctx.memory.get(RETRIES, 1))
    ctx.memory[RETRYING] = True
    delay = backoff(retries, exc.retry_after)
    if stage_condition and retries >= VISIBLE_AFTER:
        ctx.write(reconciling("KubernetesUnavailable", f"{exc}; {retries} tries in a row, next in {delay:.0f}s"))
    return delay


def attempt(
    ctx: Context, spec_model: type[M], step: Step[M], *, needs_mlflow: bool = True, models: Models[M] | None = None
) -> float | None:
    """Run ``step`` with the spec parsed (an invalid one is Stalled with the field named), its models
    allowed in the namespace, and MLflow required if asked; failures become conditions a user can
    read, and a retry delay."""
    ctx.memory.pop(RETRYING, None)  # set again if this pass ends in a retry
    try:
        drop_legacy_finalizer(ctx)
        spec = parse_spec(spec_model, ctx.body)
        if models is not None:
            namespace = ctx.cache.get("namespaces", "", ctx.namespace)
            ctx.tenancy = tenancy.Policy.of(
                ctx.namespace,
                namespace,
                ctx.config.require_model_allowlist,
                ctx.config.allowed_gateways,
                ctx.config.adopt_mlflow_names,
            )
            ctx.tenancy.check(models(spec))
        if ctx.mlflow is None and needs_mlflow:
            ctx.write(stalled("MlflowNotConfigured", MLFLOW_NOT_CONFIGURED))
            return None
        announce_generation(ctx)
        requeue = step(ctx, spec)
        ctx.memory.pop(RETRIES, None)  # a clean pass resets the backoff
        return requeue
    except InvalidSpec as exc:
        ctx.write(stalled("InvalidSpec", str(exc)))
        return None
    except tenancy.NotAllowed as exc:  # woken by the namespace's annotation when an admin allows it
        ctx.write(stalled(exc.reason, str(exc)))
        return None
    except Unproven as exc:  # woken by the namespace's annotation too; MLflow sends no event: looked at again
        ctx.write(stalled(exc.reason, str(exc)))
        return UNPROVEN_RECHECK_SECONDS
    except kube.Conflict:
        return conflicted(ctx)
    except kube.Unavailable as exc:
        return unavailable(ctx, exc)
    except kube.Forbidden as exc:
        delay = float(exc.delay or kube.FORBIDDEN_RETRY_SECONDS)
        ctx.write(stalled("Forbidden", f"{exc}; tried again every {delay:.0f}s"))
        return delay
    except kopf.TemporaryError as exc:
        if exc.delay:  # delay 0: a step that only needs the next pass, not an outage
            ctx.write(reconciling("KubernetesUnavailable", f"{exc}; retrying"))
        return float(exc.delay or 0)
    except (children.OwnedByOther, children.ForeignWrite, MlflowError, kopf.PermanentError) as exc:
        reason, conditions, delay = _failure(exc)
        ctx.write(conditions(reason, f"{exc}; retrying" if conditions is reconciling else str(exc)))
        return delay


def _failure(exc: Exception) -> tuple[str, Callable[[str, str], list[Cond]], float]:
    """(reason, summary conditions, retry delay) for a failure a retry may or may not fix."""
    if isinstance(exc, children.OwnedByOther):
        return "OwnedByOther", stalled, 60.0
    if isinstance(exc, children.ForeignWrite):
        return "ForeignWriteRefused", stalled, 60.0
    if isinstance(exc, MlflowUnavailable):
        return "MlflowUnavailable", reconciling, 10.0
    if isinstance(exc, MlflowError):
        return "MlflowError", stalled, 60.0
    return "KubernetesError", stalled, 60.0
