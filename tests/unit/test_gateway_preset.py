"""The analysis preset ``gateway``: each track's requests, errors and latency from the gateway's own
series. The backend label's spelling per gateway (Traefik's names as its Kubernetes Gateway provider
writes them), its confinement to the InferenceDeployment's namespace and Services, the metrics it
cannot measure, and the queries the real analysis sends through the registry."""

from __future__ import annotations

import json
import re
import typing

import httpx
import pytest

from slipway.inference.build import track_service_name
from slipway.inference.model import Analysis, AnalysisMetric
from slipway.inference.providers import Services, Target, analyse, source_of
from slipway.inference.providers.gateway_queries import GATEWAYS, ISTIO, TRAEFIK, backend_selector, gateway_query
from slipway.inference.providers.prometheus_queries import QueryError
from slipway.prometheus import PrometheusClient

HASH = "f9cab25143929d32ce91"  # 10 bytes of a SHA-256, as Traefik prints them (%.10x)


def traefik_service(namespace: str, route: str, service: str, index: int, gw_ns: str = "infra") -> str:
    """The service label Traefik v3.7's Gateway provider gives a backendRef of an HTTPRoute's rule 0
    (makeRouterName, then loadService), on the entryPoint web of Gateway ``gw_ns``/web."""
    router = f"httproute-{namespace}-{route}-gw-{gw_ns}-web-ep-web-0-{HASH}"
    return f"{router}-svc-{namespace}-{service}-{index}@kubernetesgateway"


def regex_of(selector: str, label: str) -> str:
    """The regular expression a selector matches ``label`` with (unescaped as PromQL reads it)."""
    found = re.search(label + r'=~"((?:[^"\\]|\\.)*)"', selector)
    assert found is not None, selector
    return json.loads(f'"{found.group(1)}"')


def matches(selector: str, value: str) -> bool:
    """Whether Prometheus would select ``value`` (its =~ is anchored at both ends)."""
    return re.fullmatch(regex_of(selector, "service"), value) is not None


def test_traefik_selects_each_tracks_service_of_the_route_and_nothing_else():
    canary = backend_selector(TRAEFIK, "acme", "digits", "canary")
    stable = backend_selector(TRAEFIK, "acme", "digits", "stable")
    assert matches(canary, traefik_service("acme", "digits", "digits-canary", 1))
    assert matches(stable, traefik_service("acme", "digits", "digits-stable", 0))
    assert not matches(canary, traefik_service("acme", "digits", "digits-stable", 0))
    assert not matches(canary, traefik_service("acme", "digits", "digits-canary", 1)[:-1])  # a suffix cut off
    # The weighted service over both backends, another namespace's route of the same name, another route.
    assert not matches(canary, f"httproute-acme-digits-gw-infra-web-ep-web-0-{HASH}-wrr@kubernetesgateway")
    assert not matches(canary, traefik_service("team-b", "digits", "digits-canary", 1))
    assert not matches(canary, traefik_service("acme", "other", "digits-canary", 1))


def test_traefik_selects_the_label_a_running_traefik_wrote():
    # Seen on the local cluster's Traefik v3.7.13 (a Gateway web in the route's namespace, entryPoint web).
    ns = "t-test-mlflow-models-serve-is-canaried-and-d21b84"
    seen = f"httproute-{ns}-scorer-gw-{ns}-web-ep-web-0-f9cab25143929d32ce91-svc-{ns}-scorer-canary-1@kubernetesgateway"
    assert matches(backend_selector(TRAEFIK, ns, "scorer", "canary"), seen)
    assert not matches(backend_selector(TRAEFIK, ns, "scorer", "stable"), seen)


def test_traefik_selector_cannot_be_met_by_another_namespaces_route_or_service_names():
    # A tenant in team-b names its route and Service so that acme's spelling appears inside its own:
    # the match is anchored at both ends, on the route's namespace and the Service's.
    canary = backend_selector(TRAEFIK, "acme", "digits", "canary")
    for forged in (
        traefik_service("team-b", "x", "svc-acme-digits-canary", 1),
        traefik_service("team-b", "httproute-acme-digits", "digits-canary", 1),
        traefik_service("team-b", "digits", "x-svc-acme-digits-canary", 1),
        "x" + traefik_service("acme", "digits", "digits-canary", 1),
    ):
        assert not matches(canary, forged), forged


def test_names_are_escaped_and_spelled_as_traefik_spells_them():
    # A dotted InferenceDeployment name: Traefik normalizes the route's name in the router's (dots
    # become dashes); the Service's name is the builder's DNS-1035 name. A dot in the regex is literal.
    selector, service = backend_selector(TRAEFIK, "acme", "m.v2", "canary"), track_service_name("m.v2", "canary")
    assert matches(selector, traefik_service("acme", "m-v2", service, 1))
    assert not matches(selector, traefik_service("acme", "mXv2", service, 1))
    # No character of the operator's values can end the string or the matcher list.
    assert selector.count('"') == 2 and "}" not in selector.replace("{20}", "")


def test_istio_confines_by_its_destination_namespace_label():
    selector = backend_selector(ISTIO, "acme", "digits", "canary")
    assert selector.startswith('destination_service_namespace="acme", ')
    assert re.fullmatch(regex_of(selector, "destination_service_name"), "digits-canary")
    assert not re.fullmatch(regex_of(selector, "destination_service_name"), "digits-canaryX")


def test_queries_read_the_gateways_counters_and_histograms():
    error = gateway_query(AnalysisMetric(name="errorRate", max=0.05), TRAEFIK, "acme", "digits", "canary", "30s")
    assert 'traefik_service_requests_total{service=~"' in error and 'code=~"5.."}' in error
    assert "namespace=" not in error  # the gateway's series carry the gateway's namespace, not the tenant's
    p95 = gateway_query(AnalysisMetric(name="latencyP95Seconds", max=1), TRAEFIK, "acme", "digits", "canary", "30s")
    assert p95.startswith("histogram_quantile(0.95, sum by (le) (rate(traefik_service_request_duration_seconds_bucket")
    ms = gateway_query(AnalysisMetric(name="latencyP99Seconds", max=1), ISTIO, "acme", "digits", "stable", "30s")
    assert "istio_request_duration_milliseconds_bucket" in ms and ms.endswith(") * 0.001")
    assert 'response_code=~"5.."' in gateway_query(
        AnalysisMetric(name="errorRate", max=1), ISTIO, "a", "d", "canary", "30s"
    )


@pytest.mark.parametrize("name", ["ttftP95Seconds", "tpotP95Seconds", "costPer1kRequests"])
def test_metrics_a_gateway_cannot_measure_say_so_and_name_the_fix(name):
    with pytest.raises(QueryError, match=f"metric {name}: the gateway preset measures errorRate, .* give it a query"):
        gateway_query(AnalysisMetric(name=name, max=1), TRAEFIK, "acme", "digits", "canary", "30s")


def test_the_apis_gateway_names_are_the_tables_rows():
    field = Analysis.model_fields["gateway"].annotation  # Literal[...] | None: unset means traefik
    (names,) = [typing.get_args(arg) for arg in typing.get_args(field) if arg is not type(None)]
    assert set(names) == set(GATEWAYS) and "traefik" in GATEWAYS


def prometheus(value: float | None) -> tuple[PrometheusClient, list[str]]:
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params["query"])
        result = [] if value is None else [{"metric": {}, "value": [0, json.dumps(value)]}]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})

    return PrometheusClient("http://prom:9090", http=httpx.Client(transport=httpx.MockTransport(handle))), asked


def test_the_gateway_preset_is_measured_by_the_gateway_source_and_a_users_query_stays_confined():
    builtin, own = AnalysisMetric(name="errorRate", max=0.05), AnalysisMetric(name="x", max=1, query="sum(up)")
    assert source_of(builtin, "gateway") == "gateway" and source_of(own, "gateway") == "prometheus"
    client, asked = prometheus(0.5)
    settings = Analysis(preset="gateway", metrics=[builtin, own])
    outcome = analyse(
        Target(settings, "acme", "digits", {"canary": "2", "stable": "1"}), Services(None, client, 5), "now"
    )
    assert outcome.verdict == "Failed" and outcome.metric == "errorRate"  # 50% of the canary's requests failed
    assert "traefik_service_requests_total" in asked[0] and "digits-canary" in asked[0]
    assert asked[-1] == 'sum(up{namespace="acme"})'


def test_with_no_gateway_series_the_analysis_is_inconclusive_never_passed():
    client, _ = prometheus(None)
    settings = Analysis(preset="gateway", metrics=[AnalysisMetric(name="errorRate", max=0.05)])
    assert analyse(Target(settings, "acme", "digits"), Services(None, client, 5), "now").verdict == "Inconclusive"
