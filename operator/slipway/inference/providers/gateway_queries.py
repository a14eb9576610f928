"""The PromQL of the ``gateway`` preset: each track's requests, errors and latency as the gateway
counts them for the track's Service, for model servers that export no metrics of their own.

Pure: no I/O here (the gateway source, :mod:`slipway.inference.providers.gateway`, sends it).

Every gateway names its per-backend series its own way: :data:`GATEWAYS` holds, per gateway
(``spec.rollout.analysis.gateway``), the request counter, the label holding the HTTP status, the
latency histogram and its unit, the label naming the backend, and how a backend Service of an
HTTPRoute is spelled in it. The track's Service is ``<deployment>-<track>``, the HTTPRoute is
named after the InferenceDeployment, both in its namespace.

Tenancy: the gateway's series carry the gateway's own namespace (its pod's), not the tenant's, so
:func:`slipway.promql.confine` cannot confine them. Instead every matcher is written here from
the operator's values alone (the namespace, the route's and the Service's names, all escaped):
the namespace is part of the spelling of the backend (Traefik: twice, as the route's and the
Service's namespace, anchored at both ends) or a label of its own (Istio). A metric with a
``query`` of the user's own is still PromQL of the Prometheus source, confined as always.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slipway.inference.build import track_service_name
from slipway.inference.model import AnalysisMetric
from slipway.inference.providers.prometheus_queries import BUILTIN_QUERIES, Preset, QueryError


@dataclass(frozen=True)
class GatewayMetrics:
    """How one gateway names its per-backend series."""

    requests: str  # counter of requests, per backend and status code
    code_label: str  # the label holding the HTTP status code
    latency: str  # histogram of request durations (without _bucket)
    backend_label: str  # the label naming the backend
    # A regular expression (RE2, fully anchored by Prometheus) of the backend's spelling in
    # backend_label; {namespace}, {route} and {service} are filled in, escaped.
    backend: str
    namespace_label: str | None = None  # a label holding the backend Service's namespace, if the gateway has one
    latency_unit: float = 1.0  # seconds per unit of the latency histogram


# Traefik v3's Kubernetes Gateway provider names an HTTPRoute's backend service
# httproute-<ns>-<route>-gw-<gateway ns>-<gateway>-ep-<entryPoint>-<rule>-<hash: 20 hex>-svc-<ns>-<service>-<index>
# (the router's name, the backendRef's namespace, name and index), with @kubernetesgateway. Series
# need --metrics.prometheus (service labels are on by default).
TRAEFIK = GatewayMetrics(
    requests="traefik_service_requests_total",
    code_label="code",
    latency="traefik_service_request_duration_seconds",
    backend_label="service",
    backend="httproute-{namespace}-{route}-gw-[a-z0-9-]+-ep-[A-Za-z0-9-]+-[0-9]+-[0-9a-f]{{20}}"
    "-svc-{namespace}-{service}-[0-9]+@kubernetesgateway",
)

# Istio's standard metrics (the ingress gateway reports as reporter="source"): the destination
# Service's name and namespace are labels of their own; durations in milliseconds.
ISTIO = GatewayMetrics(
    requests="istio_requests_total",
    code_label="response_code",
    latency="istio_request_duration_milliseconds",
    backend_label="destination_service_name",
    backend="{service}",
    namespace_label="destination_service_namespace",
    latency_unit=0.001,
)

GATEWAYS: dict[str, GatewayMetrics] = {"traefik": TRAEFIK, "istio": ISTIO}

# The built-in metrics a gateway measures; the others (tokens, cost) need the server's own metrics.
GATEWAY_METRICS = ("errorRate", "latencyP95Seconds", "latencyP99Seconds")


def _label_value(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _escaped(value: str) -> str:
    """``value`` as a literal in a regular expression (letters, digits and dashes as they are)."""
    return "".join(c if c.isalnum() or c == "-" else re.escape(c) for c in value)


def _normalized(name: str) -> str:
    """A name as Traefik normalizes it into a router's name: every run of other characters than
    letters and digits one ``-``."""
    return "-".join(part for part in re.split(r"[^0-9A-Za-z]+", name) if part)


def backend_selector(gateway: GatewayMetrics, namespace: str, deployment: str, track: str) -> str:
    """The label matchers (without braces) of the gateway's series of one track's Service."""
    spelled = gateway.backend.format(
        namespace=_escaped(namespace),
        route=_escaped(_normalized(deployment)),
        service=_escaped(track_service_name(deployment, track)),
    )
    selector = f"{gateway.backend_label}=~{_label_value(spelled)}"
    if gateway.namespace_label is not None:
        selector = f"{gateway.namespace_label}={_label_value(namespace)}, {selector}"
    return selector


def gateway_query(
    metric: AnalysisMetric, gateway: GatewayMetrics, namespace: str, deployment: str, track: str, window: str
) -> str:
    """The PromQL of built-in ``metric`` for one track, from the gateway's series."""
    if metric.name not in GATEWAY_METRICS:
        raise QueryError(
            f"metric {metric.name}: the gateway preset measures {', '.join(GATEWAY_METRICS)} only; "
            "give it a query over the server's own metrics"
        )
    preset = Preset(
        requests=gateway.requests,
        failed_requests=f'{gateway.code_label}=~"5.."',
        accepted_requests=f'{gateway.code_label}=~"2.."',
        latency=gateway.latency,
        ttft="",
        tpot=(),
    )
    query = BUILTIN_QUERIES[metric.name](preset, backend_selector(gateway, namespace, deployment, track), window)
    if metric.name != "errorRate" and gateway.latency_unit != 1.0:
        return f"({query}) * {gateway.latency_unit:g}"
    return query
