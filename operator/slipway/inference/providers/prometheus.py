"""The Prometheus source: every built-in metric of the presets ``slipway`` and ``vllm``, and every
metric with a ``query`` (PromQL).

It asks the spec's Prometheus (``spec.rollout.analysis.prometheus.address``, only if the operator
allows that address: :func:`slipway.prometheus.address_refusal`) or the operator's own
(``--prometheus-url``). The queries are built by :mod:`slipway.inference.providers.prometheus_queries`
(pure) and sent by :class:`slipway.prometheus.PrometheusClient`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from slipway.config import OperatorConfig
from slipway.inference.analysis import Measurement
from slipway.inference.model import Analysis, AnalysisMetric
from slipway.inference.providers.base import Opened, Services, Target
from slipway.inference.providers.prometheus_queries import PRESETS, QueryError, analysis_window, resolve_query
from slipway.prometheus import PrometheusClient, PrometheusError, PrometheusUnavailable, address_refusal

NO_PROMETHEUS = "no Prometheus: set spec.rollout.analysis.prometheus.address or the operator's --prometheus-url"


class PrometheusProvider:
    """The analysis provider (:class:`slipway.inference.analysis.Provider`) of one Prometheus: a metric's
    PromQL for one track (built-in per preset, or the user's query with its placeholders filled),
    narrowed to the track's revision, else its model version. Once Prometheus is found
    unreachable, it asks no more."""

    def __init__(self, client: PrometheusClient, target: Target) -> None:
        self.client, self.target = client, target
        self.window = analysis_window(target.settings.interval)
        self.unavailable: str | None = None

    def query(self, metric: AnalysisMetric, track: str) -> str:
        """The PromQL of ``metric`` for ``track``; QueryError names what is wrong with it."""
        t = self.target
        return resolve_query(
            metric,
            t.settings.preset,
            track,
            t.namespace,
            t.deployment,
            self.window,
            t.versions.get(track),
            t.revisions.get(track),
        )

    def measure(self, metric: AnalysisMetric, track: str) -> Measurement:
        try:
            query = self.query(metric, track)
        except QueryError as exc:
            return Measurement(metric.query or "", error=str(exc))
        if self.unavailable is not None:
            return Measurement(query, error=self.unavailable)
        try:
            return Measurement(query, value=self.client.query_value(query))
        except PrometheusUnavailable as exc:
            self.unavailable = f"{exc} (monitoring down: the step waits, it neither promotes nor rolls back)"
            return Measurement(query, error=self.unavailable)
        except PrometheusError as exc:
            return Measurement(query, error=f"{exc}; fix the metric's query in spec.rollout.analysis.metrics")


class PrometheusSource:
    """The row ``prometheus`` of :data:`slipway.inference.providers.PROVIDERS`."""

    name = "prometheus"
    metrics: frozenset[str] = frozenset()  # its built-ins are answered by preset
    presets = frozenset(PRESETS)

    def provider(self, client: PrometheusClient, target: Target) -> PrometheusProvider:
        """A provider of this source for one analysis of ``target``, asking ``client``."""
        return PrometheusProvider(client, target)

    def refusal(self, settings: Analysis, config: OperatorConfig) -> str | None:
        return address_refusal(settings.prometheus.address, config) if settings.prometheus is not None else None

    @contextmanager
    def open(self, target: Target, services: Services) -> Iterator[Opened]:
        """Providers over the spec's Prometheus (a client of its own, closed after the analysis) or
        the operator's; why not, naming the fix, when there is neither or the address is refused
        (checked when ``services`` carries the operator's settings)."""
        settings = target.settings
        address = settings.prometheus.address if settings.prometheus is not None else None
        refusal = self.refusal(settings, services.config) if services.config is not None else None
        if refusal is not None:
            yield refusal
            return
        tls = services.config.prometheus_tls if services.config is not None else None  # as for the operator's own
        client = PrometheusClient(address, services.timeout, tls=tls) if address is not None else services.prometheus
        if client is None:
            yield NO_PROMETHEUS
            return
        try:
            yield lambda: self.provider(client, target)
        finally:
            if client is not services.prometheus:
                client.close()
