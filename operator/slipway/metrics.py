"""Prometheus metrics of the operator itself, served on /metrics: counters of its work, and
per-object gauges (phase, readiness, canary weight, served versions, training progress) so that
"which deployment is rolling back now" is one query. Object labels are ``namespace`` and ``name``:
scrape with ``honorLabels: true`` (manifests/monitoring/servicemonitor.yaml) so the operator pod's
own namespace does not overwrite them."""

from __future__ import annotations

import platform
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slipway._version import __version__
from slipway.clock import parse_time
from slipway.reasons import ROLLBACK_REASONS


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


# Which build each replica runs, as Prometheus' own prometheus_build_info: join it to another series
# with `* on (pod) group_left (version) slipway_build_info`.
BUILD_INFO = Gauge(
    "slipway_build_info",
    "Always 1; the operator's version, Python's and kopf's as labels.",
    ["version", "python", "kopf"],
)
BUILD_INFO.labels(__version__, platform.python_version(), _installed("kopf")).set(1)

RECONCILES = Counter("slipway_reconcile_total", "Reconciliations by kind and result.", ["kind", "result"])
RECONCILE_SECONDS = Histogram("slipway_reconcile_duration_seconds", "Time spent in one reconciliation.", ["kind"])
TRANSITIONS = Counter("slipway_phase_transitions_total", "Phase transitions by kind and new phase.", ["kind", "phase"])
# The per-object metrics below are descriptions only (registry=None): their series are made at each scrape
# from what ObjectGauges keeps (see there).
PROMOTIONS = Counter("slipway_promotions_total", "Canaries promoted to stable.", ["namespace", "name"], registry=None)
ROLLBACKS = Counter(
    "slipway_rollbacks_total", "Canaries rolled back, by reason.", ["namespace", "name", "reason"], registry=None
)
GATE_RESULTS = Counter("slipway_gate_results_total", "Validation gate and analysis outcomes.", ["kind", "result"])
# One per HTTP request sent to MLflow or Prometheus (each retry too): at rest it stays still.
EXTERNAL_REQUESTS = Counter(
    "slipway_external_requests_total",
    "HTTP requests sent to external services, by service (mlflow, prometheus) and outcome (ok, error).",
    ["service", "outcome"],
)
# One per MLflow webhook delivery received (slipway.mlflowhook); only "woke" and "queued" led to a pass.
WEBHOOK_OUTCOMES = (
    "woke",
    "queued",
    "unfollowed",
    "ignored",
    "unsigned",
    "bad-signature",
    "stale",
    "replayed",
    "busy",
    "unrecorded",
    "malformed",
    "too-large",
    "standby",
    "rate-limited",
    "timeout",
    "evicted",
    "overloaded",
    "bad-request",
    "error",
)
WEBHOOK_DELIVERIES = Counter(
    "slipway_mlflow_webhook_deliveries_total",
    "MLflow webhook requests by outcome: woke (deployments following the alias woken), queued (woken once the "
    "event loop takes it), unfollowed (none follows it), ignored (another event), or why it was refused: unsigned, "
    "bad-signature, stale (its timestamp over 300 s from this replica's clock), replayed, busy, unrecorded (its "
    "id could not be recorded), malformed, too-large, standby, rate-limited, timeout (headers or body too slow), "
    "evicted (closed for a newer connection while still sending), overloaded, bad-request, error.",
    ["outcome"],
)
for _webhook_outcome in WEBHOOK_OUTCOMES:  # every series from 0, so that increase() sees the first one
    WEBHOOK_DELIVERIES.labels(outcome=_webhook_outcome)
WEBHOOK_CLOCK_SKEW = Gauge(
    "slipway_mlflow_webhook_clock_skew_seconds",
    "The last MLflow webhook delivery refused as stale: its timestamp minus this replica's clock (positive: "
    "MLflow's clock is ahead).",
)
WEBHOOK_CONNECTIONS = Gauge("slipway_mlflow_webhook_connections", "Connections open to the MLflow webhook endpoint.")
LEADER = Gauge("slipway_leader", "1 while this replica leads (holds the Lease and reconciles), 0 while it stands by.")
CHILD_ACTIONS = Counter(
    "slipway_child_actions_total", "Children created, updated or deleted, by kind and action.", ["kind", "action"]
)


# Each kind's phases, from its status model (Baking included), and its phase gauge: declared by the
# kind's package (declare_phases), so that this module names no kind.
PHASES: dict[str, tuple[str, ...]] = {}
PHASE: dict[str, Gauge] = {}
OBJECT = ["kind", "namespace", "name"]


def declare_phases(kind: str, phases: tuple[str, ...]) -> None:
    """A kind's phases: ``slipway_<kind>_phase`` has a series for each of them per object."""
    if kind not in PHASE:
        help_text = f"1 for the {kind}'s current phase, 0 for its other phases."
        PHASE[kind] = Gauge(f"slipway_{kind.lower()}_phase", help_text, ["namespace", "name", "phase"], registry=None)
    PHASES[kind] = phases


READY = Gauge(
    "slipway_object_ready",
    "1 while the object's Ready condition is True; reason: that condition's reason.",
    [*OBJECT, "reason"],
    registry=None,
)
STALLED = Gauge("slipway_object_stalled", "1 while the object's Stalled condition is True.", OBJECT, registry=None)
CANARY_WEIGHT = Gauge(
    "slipway_inferencedeployment_canary_weight",
    "The canary's real share of traffic (percent).",
    ["namespace", "name"],
    registry=None,
)
REQUESTED_WEIGHT = Gauge(
    "slipway_inferencedeployment_requested_weight",
    "The current step's weight (percent).",
    ["namespace", "name"],
    registry=None,
)
TRACK_INFO = Gauge(
    "slipway_inferencedeployment_track_info",
    "1 for the model version each track serves (track: stable or canary).",
    ["namespace", "name", "track", "model", "version"],
    registry=None,
)
LAST_ROLLBACK = Gauge(
    "slipway_inferencedeployment_last_rollback_timestamp_seconds",
    "When the last rollback happened, with its reason and the model version it pulled.",
    ["namespace", "name", "reason", "version"],
    registry=None,
)
# One gauge per unit of cost (status.<track>.cost), each in the price table's currency.
SERVING_COSTS: dict[str, Gauge] = {
    key: Gauge(
        f"slipway_inferencedeployment_serving_cost_{unit}",
        f"Each track's serving cost {words} at its last analysis, in the price table's currency.",
        ["namespace", "name", "track", "currency"],
        registry=None,
    )
    for key, unit, words in (
        ("perHour", "per_hour", "per hour (all its pods)"),
        ("per1kRequests", "per_1k_requests", "per 1,000 answered requests"),
        ("perMillionTokens", "per_million_tokens", "per million generated tokens"),
    )
}
TRAINING_COST = Gauge(
    "slipway_trainingrun_cost",
    "What the training run has cost so far, every attempt.",
    ["namespace", "name", "currency"],
    registry=None,
)
TRAINING_GPU_SECONDS = Gauge(
    "slipway_trainingrun_gpu_seconds",
    "GPU time the run's pods reserved, every attempt: GPUs times seconds.",
    ["namespace", "name"],
    registry=None,
)
TRAINING_STEP = Gauge(
    "slipway_trainingrun_step", "The training step last reported.", ["namespace", "name"], registry=None
)
TRAINING_PROGRESS = Gauge(
    "slipway_trainingrun_progress_ratio", "Step / totalSteps of the training run.", ["namespace", "name"], registry=None
)


# Every reason a rollback (or a reverted promotion or bake) can have (slipway.reasons, the rows marked
# rollback): each deployment's counters start at 0 for all of them, so increase() sees its
# first rollback (a series born at 1 shows no increase), and all of them are removed when it is deleted.
Row = tuple[Gauge | Counter, tuple[str, ...], float]
_LOCK = threading.Lock()
_KEEPERS: weakref.WeakSet[ObjectGauges] = weakref.WeakSet()
# The per-object counters' values other than 0, by (counter, labels).
_COUNTS: dict[tuple[Counter, tuple[str, ...]], float] = {}


class ObjectGauges:
    """The per-object series of each object, set from its status after every pass and removed when
    it is deleted (or when this replica stops leading); an InferenceDeployment's rollback and
    promotion counters read 0 from before its first pass. Kept as rows of plain values and turned
    into series at each scrape (:class:`PerObjectSeries`): a labelled series of prometheus_client
    costs about 750 bytes, and an InferenceDeployment has twenty (15 KB each, 150 MB at ten thousand)."""

    def __init__(self) -> None:
        self.lock = _LOCK
        self.series: dict[tuple[str, str, str], list[Row]] = {}
        self.started: set[tuple[str, str]] = set()  # InferenceDeployments whose counters read 0 until counted
        with _LOCK:
            _KEEPERS.add(self)

    def start(self, kind: str, namespace: str, name: str) -> None:
        """Before a pass: the object's counters exist (at 0 the first time), so the first
        rollback or promotion it counts is an increase a scrape can see."""
        if kind == "InferenceDeployment":
            with self.lock:
                self.started.add((namespace, name))

    def observe(self, kind: str, namespace: str, name: str, status: Mapping[str, Any] | None) -> None:
        wanted = object_series(kind, namespace, name, status or {})
        with self.lock:
            self.series[(kind, namespace, name)] = wanted

    def forget(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            self.series.pop((kind, namespace, name), None)
            if kind == "InferenceDeployment":
                self.started.discard((namespace, name))
                for key in [k for k in _COUNTS if k[0] in (ROLLBACKS, PROMOTIONS) and k[1][:2] == (namespace, name)]:
                    del _COUNTS[key]

    def clear(self) -> None:
        with self.lock:
            keys = list(self.series)
        for key in keys:
            self.forget(*key)


def count(counter: Counter, *labels: str) -> None:
    """One more on a per-object counter (ROLLBACKS, PROMOTIONS)."""
    with _LOCK:
        _COUNTS[(counter, labels)] = _COUNTS.get((counter, labels), 0.0) + 1


def per_object_metrics() -> list[Gauge | Counter]:
    gauges = [READY, STALLED, CANARY_WEIGHT, REQUESTED_WEIGHT, TRACK_INFO, LAST_ROLLBACK, *SERVING_COSTS.values()]
    training = [TRAINING_COST, TRAINING_GPU_SECONDS, TRAINING_STEP, TRAINING_PROGRESS]
    return [*PHASE.values(), *gauges, *training, ROLLBACKS, PROMOTIONS]


class PerObjectSeries(Collector):
    """The per-object metrics' series, made at each scrape from every :class:`ObjectGauges`' rows."""

    def describe(self) -> list[Metric]:
        return [_family(m) for m in per_object_metrics()]

    def collect(self) -> Iterator[Metric]:
        families = {id(m): _family(m) for m in per_object_metrics()}
        with _LOCK:
            rows = [row for keeper in list(_KEEPERS) for kept in keeper.series.values() for row in kept]
            started = {key for keeper in list(_KEEPERS) for key in keeper.started}
            counts = dict(_COUNTS)
        for metric, labels, value in rows:
            families[id(metric)].add_metric(labels, value)
        for namespace, name in sorted(started):
            for counter, labels in [(ROLLBACKS, (namespace, name, r)) for r in ROLLBACK_REASONS] + [
                (PROMOTIONS, (namespace, name))
            ]:
                families[id(counter)].add_metric(labels, counts.pop((counter, labels), 0.0))
        for (counter, labels), value in counts.items():
            families[id(counter)].add_metric(labels, value)
        yield from families.values()


def _family(metric: Gauge | Counter) -> GaugeMetricFamily | CounterMetricFamily:
    kind = CounterMetricFamily if isinstance(metric, Counter) else GaugeMetricFamily
    return kind(metric._name, metric._documentation, labels=list(metric._labelnames))


REGISTRY.register(PerObjectSeries())


def object_series(kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> list[Row]:
    """(gauge, labels, value) of every per-object series of one object (pure)."""
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready") or {}
    phase = status.get("phase")
    series: list[Row] = [(PHASE[kind], (namespace, name, p), 1.0 if p == phase else 0.0) for p in PHASES.get(kind, ())]
    if ready:
        series.append(
            (
                READY,
                (kind, namespace, name, str(ready.get("reason") or "")),
                1.0 if ready.get("status") == "True" else 0.0,
            )
        )
    series.append(
        (STALLED, (kind, namespace, name), 1.0 if (conditions.get("Stalled") or {}).get("status") == "True" else 0.0)
    )
    if kind == "InferenceDeployment":
        canary = status.get("canary") or {}
        series.append((CANARY_WEIGHT, (namespace, name), float(canary.get("weight") or 0)))
        series.append((REQUESTED_WEIGHT, (namespace, name), float(canary.get("requestedWeight") or 0)))
        rollback = status.get("lastRollback") or {}
        parsed = parse_time(rollback.get("time"))
        when = parsed.timestamp() if parsed else None
        if when is not None:
            # Clipped: a record an earlier release read back from a version's tag may hold its whole text.
            pulled = (namespace, name, str(rollback.get("reason") or "")[:64], str(rollback.get("modelVersion") or ""))
            series.append((LAST_ROLLBACK, pulled, when))
        for track in ("stable", "canary"):
            served = status.get(track) or {}
            if served.get("modelVersion"):
                labels = (namespace, name, track, str(served.get("modelName") or ""), str(served["modelVersion"]))
                series.append((TRACK_INFO, labels, 1.0))
            spent = served.get("cost") or {}
            for key, gauge in SERVING_COSTS.items():
                if isinstance(spent.get(key), int | float):
                    priced = (namespace, name, track, str(spent.get("currency") or ""))
                    series.append((gauge, priced, float(spent[key])))
    if kind == "TrainingRun":
        spent = status.get("cost") or {}
        if isinstance(spent.get("total"), int | float):
            series.append((TRAINING_COST, (namespace, name, str(spent.get("currency") or "")), float(spent["total"])))
        if isinstance(spent.get("gpuHours"), int | float):
            series.append((TRAINING_GPU_SECONDS, (namespace, name), round(float(spent["gpuHours"]) * 3600, 3)))
        progress = status.get("progress") or {}
        step, total = progress.get("step"), progress.get("totalSteps")
        if isinstance(step, int | float):
            series.append((TRAINING_STEP, (namespace, name), float(step)))
            if isinstance(total, int | float) and total > 0:
                series.append((TRAINING_PROGRESS, (namespace, name), min(1.0, float(step) / float(total))))
    return series


OBJECTS = ObjectGauges()


@contextmanager
def _outcome(counter: Counter, *labels: str) -> Iterator[None]:
    """Count the block under ``labels`` plus its outcome: ``ok``, or ``error`` if it raises."""
    try:
        yield
    except BaseException:
        counter.labels(*labels, "error").inc()
        raise
    counter.labels(*labels, "ok").inc()


class Outcome:
    """The result label of one reconciliation: ``ok`` unless set (``retry``) or the block raises (``error``)."""

    result = "ok"


@contextmanager
def reconcile_timer(kind: str) -> Iterator[Outcome]:
    """Count one reconciliation by its outcome and time it; an exception counts as an error."""
    start = time.monotonic()
    outcome = Outcome()
    try:
        yield outcome
    except BaseException:
        RECONCILES.labels(kind, "error").inc()
        raise
    else:
        RECONCILES.labels(kind, outcome.result).inc()
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.monotonic() - start)


@contextmanager
def external_request(service: str) -> Iterator[None]:
    """Count one HTTP request sent to ``service``: ``ok`` unless the block raises."""
    with _outcome(EXTERNAL_REQUESTS, service):
        yield


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve /metrics in a background thread."""
    start_http_server(port, addr=addr)
