"""Prometheus' HTTP API over httpx: instant queries, and the canary analysis that asks them.

The only module that talks to Prometheus; :mod:`slipway.analysis` builds the queries and judges
the answers without I/O. Every query sent counts in
``slipway_external_requests_total{service="prometheus"}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import httpx

from slipway import analysis, metrics
from slipway.models.inferencedeployment import Analysis, AnalysisMetric


class PrometheusError(Exception):
    """Prometheus answered, but refused the query (e.g. bad PromQL)."""


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not be reached or answered 5xx; a retry may succeed."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


class PrometheusClient:
    """A small client of ``/api/v1/query``."""

    def __init__(self, base_url: str, timeout: float = 10.0, http: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = http or httpx.Client(timeout=timeout)

    def query(self, promql: str) -> list[Sample]:
        """Evaluate an instant query; NaN samples (e.g. 0/0 rates) are dropped as no data."""
        with metrics.external_request("prometheus"):
            return self._query(promql)

    def _query(self, promql: str) -> list[Sample]:
        try:
            resp = self._http.get(f"{self.base_url}/api/v1/query", params={"query": promql})
        except httpx.HTTPError as exc:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} unreachable: {exc}") from exc
        if resp.status_code >= 500:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} answered {resp.status_code}")
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        if resp.status_code >= 400 or body.get("status") != "success":
            raise PrometheusError(f"query {promql!r} refused: {body.get('error', resp.text[:200])}")
        data = body["data"]
        if data["resultType"] == "scalar":
            samples = [Sample({}, float(data["result"][1]))]
        else:
            samples = [Sample(r["metric"], float(r["value"][1])) for r in data["result"]]
        return [s for s in samples if not math.isnan(s.value)]

    def query_value(self, promql: str) -> float | None:
        """The single value of an instant query, or None when it has no data.

        A query that answers several series is refused: an analysis compares one number per
        track, so the query must aggregate (e.g. ``sum(...)``).
        """
        samples = self.query(promql)
        if len(samples) > 1:
            labels = ", ".join(str(s.labels) for s in samples[:3]) + (", …" if len(samples) > 3 else "")
            raise PrometheusError(
                f"query {promql!r} answered {len(samples)} series ({labels}); aggregate it to one, e.g. sum(...)"
            )
        return samples[0].value if samples else None

    def close(self) -> None:
        self._http.close()


class _Probe:
    """Measures metrics on one Prometheus; once it is found unreachable, asks no more."""

    def __init__(self, client: PrometheusClient) -> None:
        self.client = client
        self.unavailable: str | None = None

    def measure(self, query: str) -> analysis.Measurement:
        if self.unavailable is not None:
            return analysis.Measurement(query, error=self.unavailable)
        try:
            return analysis.Measurement(query, value=self.client.query_value(query))
        except PrometheusUnavailable as exc:
            self.unavailable = f"{exc} (monitoring down: the step waits, it neither promotes nor rolls back)"
            return analysis.Measurement(query, error=self.unavailable)
        except PrometheusError as exc:
            return analysis.Measurement(query, error=f"{exc}; fix the metric's query in spec.rollout.analysis.metrics")


def run_analysis(
    client: PrometheusClient,
    settings: Analysis,
    namespace: str,
    deployment: str,
    now: datetime | str,
    versions: Mapping[str, str] | None = None,
) -> analysis.AnalysisOutcome:
    """Query the canary (and the stable where a metric compares with it) and judge every metric.

    ``settings`` is ``spec.rollout.analysis``; ``versions`` (track -> model version) narrows each
    track to the pods of that version.
    """
    metric_rules = list(settings.metrics) or list(analysis.DEFAULT_METRICS)
    window = analysis.analysis_window(settings.interval)
    probe = _Probe(client)

    def measure(metric: AnalysisMetric, track: str) -> analysis.Measurement:
        try:
            version = (versions or {}).get(track)
            query = analysis.resolve_query(metric, settings.preset, track, namespace, deployment, window, version)
        except analysis.QueryError as exc:
            return analysis.Measurement(metric.query or "", error=str(exc))
        return probe.measure(query)

    canary = [measure(m, analysis.CANARY_TRACK) for m in metric_rules]
    stable = [measure(m, analysis.STABLE_TRACK) if m.max_relative_to_stable is not None else None for m in metric_rules]
    results = analysis.evaluate(metric_rules, canary, stable, settings.no_data, analysis.timestamp(now))
    return analysis.AnalysisOutcome(tuple(results), prometheus_unavailable=probe.unavailable is not None)


NO_PROMETHEUS = "no Prometheus: set spec.rollout.analysis.prometheus.address or the operator's --prometheus-url"


def analyse_canary(
    default: PrometheusClient | None,
    settings: Analysis,
    namespace: str,
    deployment: str,
    now: datetime,
    versions: Mapping[str, str],
    timeout: float,
) -> analysis.AnalysisOutcome:
    """:func:`run_analysis` against the spec's Prometheus (``analysis.prometheus.address``) or the
    operator's default; Inconclusive, naming the fix, when there is neither."""
    client = PrometheusClient(settings.prometheus.address, timeout=timeout) if settings.prometheus else default
    if client is None:
        return analysis.not_measured([m.name for m in settings.metrics], now, NO_PROMETHEUS)
    try:
        return run_analysis(client, settings, namespace, deployment, now, versions)
    finally:
        if client is not default:
            client.close()
