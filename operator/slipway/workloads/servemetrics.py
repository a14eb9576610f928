"""The reference server's Prometheus metrics (listed in :mod:`slipway.workloads.serve`)."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# Predictions take well under a millisecond: Prometheus' default buckets (from 5 ms) would put
# every request in the first bucket, and histogram_quantile could not tell a 3x slower canary.
LATENCY_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
TOKEN_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


class ServingMetrics:
    """The server's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        disable_created_metrics()  # `*_created` series only double what Prometheus scrapes
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "slipway_requests", "Predict requests by HTTP status code.", ["code"], registry=self.registry
        )
        # Every series from the first scrape on, at 0: an error ratio taken between a pod's first
        # 5xx and its first 2xx would otherwise read 5xx / 5xx = 1.
        for code in ("200", "400", "500", "503"):
            self.requests.labels(code)
        self.duration = Histogram(
            "slipway_request_duration_seconds",
            "Predict request duration.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.time_to_first_token = Histogram(
            "slipway_time_to_first_token_seconds",
            "Time from a predict request's arrival to its first prediction (simulated streaming).",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.time_per_output_token = Histogram(
            "slipway_time_per_output_token_seconds",
            "Inference time per prediction of a request (simulated streaming).",
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("slipway_requests_in_flight", "Predict requests being served.", registry=self.registry)
        self.model_info = Gauge("slipway_model_info", "The model served.", ["version", "uri"], registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
