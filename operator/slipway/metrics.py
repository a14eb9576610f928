"""Prometheus metrics of the operator itself, served on /metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECONCILES = Counter("slipway_reconcile_total", "Reconciliations by kind and result.", ["kind", "result"])
RECONCILE_SECONDS = Histogram("slipway_reconcile_duration_seconds", "Time spent in one reconciliation.", ["kind"])
TRANSITIONS = Counter("slipway_phase_transitions_total", "Phase transitions by kind and new phase.", ["kind", "phase"])
PROMOTIONS = Counter("slipway_promotions_total", "Canaries promoted to stable.", ["namespace"])
ROLLBACKS = Counter("slipway_rollbacks_total", "Canaries rolled back, by reason.", ["namespace", "reason"])
GATE_RESULTS = Counter("slipway_gate_results_total", "Validation gate and analysis outcomes.", ["kind", "result"])
# One per HTTP request sent to MLflow or Prometheus (each retry too): at rest it stays still.
EXTERNAL_REQUESTS = Counter(
    "slipway_external_requests_total",
    "HTTP requests sent to external services, by service (mlflow, prometheus) and outcome (ok, error).",
    ["service", "outcome"],
)
LEADER = Gauge("slipway_leader", "1 while this replica leads (holds the Lease and reconciles), 0 while it stands by.")
CHILD_ACTIONS = Counter(
    "slipway_child_actions_total", "Children created, updated or deleted, by kind and action.", ["kind", "action"]
)


@contextmanager
def _outcome(counter: Counter, *labels: str) -> Iterator[None]:
    """Count the block under ``labels`` plus its outcome: ``ok``, or ``error`` if it raises."""
    try:
        yield
    except BaseException:
        counter.labels(*labels, "error").inc()
        raise
    counter.labels(*labels, "ok").inc()


@contextmanager
def reconcile_timer(kind: str) -> Iterator[None]:
    """Count one reconciliation and time it; an exception counts as an error."""
    start = time.monotonic()
    try:
        with _outcome(RECONCILES, kind):
            yield
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
