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

from slipway.config import OperatorConfig
from slipway.inference.build import track_service_name
from slipway.inference.model import Analysis, AnalysisMetric
from slipway.inference.providers import Services, Target, analyse, source_of
from slipway.inference.providers.gateway_queries import (
    GATEWAYS,
    ISTIO,
    TRAEFIK,
    backend_selector,
    colliding_namespaces,
    gateway_query,
)
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
    backend = selector.removeprefix('job="gateway",namespace="", ')
    assert backend.count('"') == 2 and "}" not in backend.replace("{20}", "")


def test_istio_reads_the_destinations_own_report_scraped_in_its_namespace():
    selector = backend_selector(ISTIO, "acme", "digits", "canary")
    assert selector.startswith('namespace="acme", reporter="destination", destination_service_namespace="acme", ')
    assert re.fullmatch(regex_of(selector, "destination_service_name"), "digits-canary")
    assert not re.fullmatch(regex_of(selector, "destination_service_name"), "digits-canaryX")


def test_queries_read_the_gateways_counters_and_histograms():
    error = gateway_query(AnalysisMetric(name="errorRate", max=0.05), TRAEFIK, "acme", "digits", "canary", "30s")
    # Only Traefik's own scrape target: its job, without the namespace label a scraped pod's series carry.
    every, own = (
        "traefik_service_requests_total{",
        'traefik_service_requests_total{job="gateway",namespace="", service=~"',
    )
    assert 'code=~"5.."}' in error and error.count(every) == error.count(own) > 0, error
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


def test_traefik_series_are_read_from_the_operators_selector_only():
    own = 'job="traefik",namespace="traefik"'
    selector = backend_selector(TRAEFIK, "acme", "digits", "canary", own)
    assert selector.startswith(f"{own}, service=~")
    p95 = gateway_query(AnalysisMetric(name="latencyP95Seconds", max=1), TRAEFIK, "acme", "d", "canary", "30s", own)
    assert f"traefik_service_request_duration_seconds_bucket{{{own}, service=~" in p95
    # Istio's series are the destination's pods' own: the operator's Traefik selector is not theirs.
    assert own not in backend_selector(ISTIO, "acme", "digits", "canary", own)


def test_a_bad_traefik_selector_is_refused_naming_the_variable(monkeypatch):
    assert OperatorConfig().traefik_selector == 'job="gateway",namespace=""'
    monkeypatch.setenv("SLIPWAY_TRAEFIK_SELECTOR", ' job = "traefik" , namespace="traefik"')
    assert OperatorConfig().traefik_selector == 'job="traefik",namespace="traefik"'
    for bad in ('job="x"} or vector(1) or {a="b"', '__name__="up"', "job=traefik"):
        monkeypatch.setenv("SLIPWAY_TRAEFIK_SELECTOR", bad)
        with pytest.raises(ValueError, match="SLIPWAY_TRAEFIK_SELECTOR"):
            OperatorConfig()


@pytest.mark.parametrize(
    ("namespace", "deployment", "others", "colliding"),
    [
        ("t", "a-x", ["t-a", "t-b", "tt", "u", "t"], ["t-a"]),  # t-a's route x is spelled t-a-x as well
        ("t-a", "x", ["t", "t-ab", "a", "t-a-x-y"], ["t"]),  # t's route a-x: the same, the other way
        ("t", "x", ["t-x", "t-x-gw", "t-x-gw-a", "t-x-g", "t-xy"], ["t-x", "t-x-gw", "t-x-gw-a"]),  # "-gw-" filled in
        ("team", "digits", ["team-b", "other", "kube-system", "default"], []),
    ],
)
def test_namespaces_whose_routes_traefik_could_spell_alike_are_named(namespace, deployment, others, colliding):
    assert colliding_namespaces(TRAEFIK, namespace, deployment, others) == colliding
    assert colliding_namespaces(ISTIO, namespace, deployment, others) == []  # the namespace is a label of its own


def test_every_other_namespaces_route_traefik_spells_as_ours_is_caught():
    # Every namespace, route and Service name of two short words: wherever the victim's selector would
    # match another namespace's backend, that namespace is one colliding_namespaces names.
    words = ["t", "a", "x", "gw", "t-a", "a-x", "x-gw", "t-x", "gw-a", "a-canary", "x-canary"]
    matched, caught = 0, 0
    for victim_ns, route in (("t", "a-x"), ("t-a", "x"), ("t", "x")):
        canary = backend_selector(TRAEFIK, victim_ns, route, "canary")
        for ns in {w for w in words if w != victim_ns}:
            for other_route in words:
                for service in words:
                    if matches(canary, traefik_service(ns, other_route, service, 1)):
                        matched += 1
                        caught += ns in colliding_namespaces(TRAEFIK, victim_ns, route, [ns])
    assert matched > 0 and caught == matched, (matched, caught)


def test_a_colliding_namespace_makes_the_analysis_inconclusive_and_nothing_is_asked():
    client, asked = prometheus(0.0)
    settings = Analysis(preset="gateway", metrics=[AnalysisMetric(name="errorRate", max=0.05)])
    lent = Services(None, client, 5, namespaces=lambda: ["t", "t-a", "kube-system"])
    outcome = analyse(Target(settings, "t", "a-x", {"canary": "2", "stable": "1"}), lent, "now")
    assert outcome.verdict == "Inconclusive" and asked == []
    message = outcome.results[0].message
    assert "namespace t-a" in message and "httproute-t-a-x-gw-" in message and "rename" in message
    # Without it the same analysis is judged, from the operator's selector.
    lent = Services(OperatorConfig(traefik_selector='job="traefik"'), client, 5, namespaces=lambda: ["t"])
    assert analyse(Target(settings, "t", "a-x", {"canary": "2"}), lent, "now").verdict == "Passed"
    assert asked and all('{job="traefik", service=~"' in q for q in asked), asked
