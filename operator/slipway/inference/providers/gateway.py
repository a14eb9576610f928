"""The gateway source: the built-in metrics of the preset ``gateway``, each track's requests,
errors and latency read from the gateway's own series in Prometheus (GatewayAPI mode), for model
servers that export no metrics (``mlflow models serve``, MLServer, Triton, in-house servers).

It asks the same Prometheus as the Prometheus source (the spec's allowed address, else the
operator's); the queries are built by :mod:`slipway.inference.providers.gateway_queries` (pure), per the
gateway named by ``spec.rollout.analysis.gateway``.

The gateway's series count a track's Service, not one model version: after a promotion the
canary's Service counts the next canary, whose first analysis window can still hold the end of
the previous one (the window is the analysis interval, at least 20s).
"""

from __future__ import annotations

from slipway.inference.model import AnalysisMetric
from slipway.inference.providers.base import Target
from slipway.inference.providers.gateway_queries import GATEWAYS, gateway_query
from slipway.inference.providers.prometheus import PrometheusProvider, PrometheusSource
from slipway.prometheus import PrometheusClient

PRESET = "gateway"


class GatewayProvider(PrometheusProvider):
    """The Prometheus provider with the gateway's queries for the built-in metrics."""

    def query(self, metric: AnalysisMetric, track: str) -> str:
        t = self.target
        gateway = GATEWAYS[t.settings.gateway or "traefik"]
        return gateway_query(metric, gateway, t.namespace, t.deployment, track, self.window)


class GatewaySource(PrometheusSource):
    """The row ``gateway`` of :data:`slipway.inference.providers.PROVIDERS`."""

    name = "gateway"
    metrics: frozenset[str] = frozenset()
    presets = frozenset({PRESET})

    def provider(self, client: PrometheusClient, target: Target) -> PrometheusProvider:
        return GatewayProvider(client, target)
