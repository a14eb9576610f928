"""The gateway source: the built-in metrics of the preset ``gateway``, each track's requests,
errors and latency read from the gateway's own series in Prometheus (GatewayAPI mode), for model
servers that export no metrics (``mlflow models serve``, MLServer, Triton, in-house servers).

It asks the same Prometheus as the Prometheus source (the spec's allowed address, else the
operator's); the queries are built by :mod:`slipway.inference.providers.gateway_queries` (pure), per the
gateway named by ``spec.rollout.analysis.gateway``, reading only the series of the gateway's own
scrape target (the operator's ``--traefik-selector``). Where another namespace could name its
HTTPRoutes so that the gateway spells them as this deployment's (Traefik joins names with dashes),
nothing is asked: every metric is Inconclusive, naming the namespaces and the fix.

The gateway's series count a track's Service, not one model version: after a promotion the
canary's Service counts the next canary, whose first analysis window can still hold the end of
the previous one (the window is the analysis interval, at least 20s).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from slipway.inference.analysis import Provider
from slipway.inference.model import AnalysisMetric
from slipway.inference.providers.base import Opened, Services, Target
from slipway.inference.providers.gateway_queries import (
    GATEWAYS,
    colliding_namespaces,
    collision_message,
    gateway_query,
)
from slipway.inference.providers.prometheus import PrometheusProvider, PrometheusSource
from slipway.prometheus import PrometheusClient
from slipway.settings import TRAEFIK_SELECTOR

PRESET = "gateway"


class GatewayProvider(PrometheusProvider):
    """The Prometheus provider with the gateway's queries for the built-in metrics."""

    def __init__(self, client: PrometheusClient, target: Target, own: str = TRAEFIK_SELECTOR) -> None:
        super().__init__(client, target)
        self.own = own  # label matchers of the gateway's own scrape target

    def query(self, metric: AnalysisMetric, track: str) -> str:
        t = self.target
        gateway = GATEWAYS[t.settings.gateway or "traefik"]
        return gateway_query(metric, gateway, t.namespace, t.deployment, track, self.window, self.own)


class GatewaySource(PrometheusSource):
    """The row ``gateway`` of :data:`slipway.inference.providers.PROVIDERS`."""

    name = "gateway"
    metrics: frozenset[str] = frozenset()
    presets = frozenset({PRESET})

    def provider(self, client: PrometheusClient, target: Target) -> PrometheusProvider:
        return GatewayProvider(client, target)

    @contextmanager
    def open(self, target: Target, services: Services) -> Iterator[Opened]:
        """The Prometheus source's providers, reading the series of the operator's gateway scrape
        target; why not when another namespace's routes could be spelled as this deployment's
        (``services.namespaces``: the cluster's namespaces, None when not known)."""
        gateway = GATEWAYS[target.settings.gateway or "traefik"]
        namespaces = services.namespaces() if services.namespaces is not None else ()
        others = colliding_namespaces(gateway, target.namespace, target.deployment, namespaces)
        if others:
            yield collision_message(target.namespace, target.deployment, others)
            return
        own = services.config.traefik_selector if services.config is not None else TRAEFIK_SELECTOR
        with super().open(target, services) as opened:
            if isinstance(opened, str):
                yield opened
                return

            def made() -> Provider:
                provider = opened()
                assert isinstance(provider, GatewayProvider)
                provider.own = own
                return provider

            yield made
