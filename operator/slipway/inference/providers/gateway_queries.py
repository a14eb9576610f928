"""The PromQL of the ``gateway`` preset: each track's requests, errors and latency as the gateway
counts them for the track's Service, for model servers that export no metrics of their own.

Pure: no I/O here (the gateway source, :mod:`slipway.inference.providers.gateway`, sends it).

Every gateway names its per-backend series its own way: :data:`GATEWAYS` holds, per gateway
(``spec.rollout.analysis.gateway``), the request counter, the label holding the HTTP status, the
latency histogram and its unit, the label naming the backend, and how a backend Service of an
HTTPRoute is spelled in it. The track's Service is ``<deployment>-<track>``, the HTTPRoute is
named after the InferenceDeployment, both in its namespace.

Tenancy: every matcher is written here from the operator's values alone (the namespace, the
route's and the Service's names, all escaped), and only the series of whoever counts the requests
are read, never a counterfeit any scraped pod could export under the same name:

- Traefik's series carry the gateway's own scrape target, not the tenant's namespace, so
  :func:`slipway.promql.confine` cannot confine them: the operator's ``--traefik-selector``
  (its job and namespace, :data:`slipway.settings.TRAEFIK_SELECTOR` by default) selects them, as
  ``openCostSelector`` selects OpenCost's. The namespace is part of the backend's spelling, twice
  (the route's and the Service's namespace), anchored at both ends. Traefik joins names with
  dashes, so a route of another namespace can be spelled alike (namespace ``t`` with route
  ``a-x``, namespace ``t-a`` with route ``x``): :func:`colliding_namespaces` names the namespaces
  that could, and the analysis is then Inconclusive (never a verdict from their traffic).
- Istio's are read as the destination's sidecar reports them (``reporter="destination"``), scraped
  from the destination's own pods: the scrape's ``namespace`` label is the InferenceDeployment's,
  as is ``destination_service_namespace``; a pod of another namespace cannot export them.

A metric with a ``query`` of the user's own is still PromQL of the Prometheus source, confined as always.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from slipway.inference.build import track_service_name
from slipway.inference.model import AnalysisMetric
from slipway.inference.providers.prometheus_queries import BUILTIN_QUERIES, Preset, QueryError
from slipway.settings import TRAEFIK_SELECTOR


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
    # Matchers every series read carries (Istio: the destination's own report).
    fixed: str = ""
    # Whose series: True, the destination's pods' (their scrape's namespace label is the
    # deployment's); False, the gateway's own scrape target (the operator's selector).
    scraped_in_namespace: bool = False
    # The backend's spelling joins the namespace and the route's name with "-" (colliding_namespaces).
    dash_joined: bool = False


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
    dash_joined=True,
)

# Istio's standard metrics, as the destination's sidecar reports them (the ingress gateway reports
# as reporter="source", scraped from the gateway's namespace): the destination Service's name and
# namespace are labels of their own; durations in milliseconds.
ISTIO = GatewayMetrics(
    requests="istio_requests_total",
    code_label="response_code",
    latency="istio_request_duration_milliseconds",
    backend_label="destination_service_name",
    backend="{service}",
    namespace_label="destination_service_namespace",
    latency_unit=0.001,
    fixed='reporter="destination"',
    scraped_in_namespace=True,
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


def backend_selector(
    gateway: GatewayMetrics, namespace: str, deployment: str, track: str, own: str = TRAEFIK_SELECTOR
) -> str:
    """The label matchers (without braces) of the gateway's series of one track's Service; ``own``
    (checked label matchers, :func:`slipway.labelmatchers.check`) selects the gateway's own scrape
    target where its series are not scraped from the deployment's namespace."""
    spelled = gateway.backend.format(
        namespace=_escaped(namespace),
        route=_escaped(_normalized(deployment)),
        service=_escaped(track_service_name(deployment, track)),
    )
    scraped = f"namespace={_label_value(namespace)}" if gateway.scraped_in_namespace else own
    matchers = [scraped, gateway.fixed]
    if gateway.namespace_label is not None:
        matchers.append(f"{gateway.namespace_label}={_label_value(namespace)}")
    matchers.append(f"{gateway.backend_label}=~{_label_value(spelled)}")
    return ", ".join(m for m in matchers if m)


def colliding_namespaces(
    gateway: GatewayMetrics, namespace: str, deployment: str, namespaces: Iterable[str]
) -> list[str]:
    """The other namespaces of ``namespaces`` whose HTTPRoutes the gateway could spell as this
    deployment's backends. Traefik's spelling begins ``httproute-<ns>-<route>-gw-``: another
    namespace's begins alike when its name and a dash begin ``<ns>-<route>-gw-`` (``t`` and route
    ``a-x`` for ``t-a`` and route ``x``) or are begun by it (``t-x-gw-...``, whose route's name and
    Service's can then fill the rest)."""
    if not gateway.dash_joined:
        return []
    begins = f"{namespace}-{_normalized(deployment)}-gw-"
    found = set()
    for other in namespaces:
        for spelled in {other, _normalized(other)}:
            if other != namespace and (begins.startswith(f"{spelled}-") or f"{spelled}-".startswith(begins)):
                found.add(other)
    return sorted(found)


def collision_message(namespace: str, deployment: str, others: list[str]) -> str:
    """Why a gateway analysis of ``namespace``/``deployment`` is not judged, naming the fix."""
    named = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return (
        f"the gateway's series of {namespace}/{deployment} cannot be told from those of namespace {named}: Traefik "
        f"joins a route's namespace and name with '-', and an HTTPRoute there can be spelled "
        f"httproute-{namespace}-{_normalized(deployment)}-gw-... too, so no verdict is drawn from them; rename the "
        "InferenceDeployment or a namespace (no namespace's name and '-' may begin the other's spelling), or use "
        "a gateway that labels the namespace (istio)"
    )


def gateway_query(
    metric: AnalysisMetric,
    gateway: GatewayMetrics,
    namespace: str,
    deployment: str,
    track: str,
    window: str,
    own: str = TRAEFIK_SELECTOR,
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
    selector = backend_selector(gateway, namespace, deployment, track, own)
    query = BUILTIN_QUERIES[metric.name](preset, selector, window)
    if metric.name != "errorRate" and gateway.latency_unit != 1.0:
        return f"({query}) * {gateway.latency_unit:g}"
    return query
