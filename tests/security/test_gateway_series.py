"""The analysis preset ``gateway`` reads only the gateway's own series. A pod of another namespace
that Prometheus scrapes exports Traefik's counters and histogram under the victim canary's backend
name (all 500s, all slower than 10 s): the healthy canary is still promoted, and what Slipway
selects equals what Traefik itself counts. And while a namespace exists whose routes Traefik would
spell as the deployment's (namespace ``<ns>-a``, route ``digits``, for ``<ns>`` and ``a-digits``),
the analysis is Inconclusive, naming it: no verdict from traffic that may be another's.

The InferenceDeployment runs in GatewayAPI mode behind the cluster's gateway (Traefik, scraped
as the job ``gateway``, the operator's default ``--traefik-selector``)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.gateway import ensure_gateway, gateway
from localkube.testing import PYTHON, simple_pod
from localkube.wait import wait_for
from slipway.inference.model import AnalysisMetric
from slipway.inference.providers.gateway_queries import TRAEFIK, backend_selector, gateway_query
from slipway.prometheus import PrometheusClient
from slipway.settings import TRAEFIK_SELECTOR
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import Versions, apply_object, condition, get_object, report, wait_status
from slipway_testing import deployment as digits

pytestmark = pytest.mark.cluster

NAME = "a-digits"  # namespace <ns>-a with a route "digits" is spelled alike
FORGED = "traefik_service_requests_total"
# A pod exporting Traefik's series for the given backend names: 500s growing by 50 a second, and
# every request slower than 10 s; with the labels that would pass for Traefik's (job, no namespace).
FORGER = textwrap.dedent(
    """
    import os, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    started = time.monotonic()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self):
            n = int(1000 + 50 * (time.monotonic() - started))
            lines = []
            for service in sys.argv[1:]:
                own = f'job="gateway",namespace="",service="{service}"'
                lines.append(f'traefik_service_requests_total{{{own},code="500",method="POST",protocol="http"}} {n}')
                for le in ("0.1", "0.3", "1.2", "5.0"):
                    lines.append(f'traefik_service_request_duration_seconds_bucket{{{own},code="500",le="{le}"}} 0')
                lines.append(f'traefik_service_request_duration_seconds_bucket{{{own},code="500",le="+Inf"}} {n}')
                lines.append(f'traefik_service_request_duration_seconds_count{{{own},code="500"}} {n}')
                lines.append(f'traefik_service_request_duration_seconds_sum{{{own},code="500"}} {20 * n}')
            body = ("\\n".join(lines) + "\\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

    HTTPServer((os.environ["POD_IP"], 9100), Metrics).serve_forever()
    """
)


@pytest.fixture
def gateway_port(cluster) -> int:
    port = ensure_gateway(cluster.directory).gateway_port
    assert port
    return port


@pytest.fixture
def other_namespaces(kube_api) -> Iterator[list[str]]:
    """Namespaces the test creates beside its own (names it appends), deleted afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        try:
            client.CoreV1Api(kube_api).delete_namespace(name, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


def make_namespace(kube_api, made: list[str], name: str) -> str:
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    made.append(name)
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30, f"{name}'s default service account")
    return name


def prom(cluster, promql: str) -> list[dict]:
    answer = httpx.get(f"{cluster.prometheus_url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


def traefik_counts(cluster) -> dict[tuple[str, str], float]:
    """Traefik's own request counters, (service, code) -> count, read from its /metrics (the URL
    Prometheus scrapes as the job ``gateway``)."""
    targets = httpx.get(f"{cluster.prometheus_url}/api/v1/targets", params={"state": "active"}, timeout=10).json()
    [url] = [t["scrapeUrl"] for t in targets["data"]["activeTargets"] if t["labels"].get("job") == "gateway"]
    text = httpx.get(url, timeout=10).text
    found = re.findall(rf'^{FORGED}\{{code="(\d+)",[^}}]*service="([^"]+)"\}} ([0-9.e+]+)$', text, re.M)
    return {(service, code): float(value) for code, service, value in found}


def canary_names(cluster, namespace: str) -> list[str]:
    """The canary's backend names as Traefik spells them (its router's, read from the stable's
    series; the backendRef's index 0 to 2)."""
    spelled = f"httproute-{namespace}-{NAME}-gw-.*-svc-{namespace}-{NAME}-stable-.*"
    stable = f'{FORGED}{{job="gateway", service=~"{spelled}"}}'
    found = {r["metric"]["service"] for r in prom(cluster, stable)}
    assert found, "no series of the stable through the gateway"
    router = next(iter(found)).split("-svc-")[0]
    return [f"{router}-svc-{namespace}-{NAME}-canary-{i}@kubernetesgateway" for i in range(3)]


def test_counterfeit_gateway_series_change_no_verdict_and_a_colliding_namespace_holds_the_analysis(
    cluster, kube_api, namespace, operator, mlflow, trained, gateway_port, other_namespaces
):
    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "gateways", gateway("web", namespace, gateway_port)
    )
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    host = f"digits.{namespace}.test"
    metrics = ({"name": "errorRate", "max": 0.05}, {"name": "latencyP95Seconds", "max": 2.0})
    body = digits(versions.model, metrics, analysis={"preset": "gateway", "interval": "5s", "failureLimit": 1,
                                                     "metrics": list(metrics)})  # fmt: skip
    body["metadata"]["name"] = NAME
    body["spec"]["traffic"] = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}], "hostnames": [host]}
    body["spec"]["rollout"]["progressDeadlineSeconds"] = 120
    apply_object(kube_api, namespace, body)
    wait_status(kube_api, namespace, "InferenceDeployment", NAME, stable_is(v1), 180, "v1 serving")
    with LoadDriver.for_address("127.0.0.1", gateway_port, host=host, rate=20, max_duration=600) as load:
        wait_for(lambda: prom(cluster, f'{FORGED}{{job="gateway", service=~".*-svc-{namespace}-{NAME}-stable-.*"}}'),
                 60, "the stable's series of the gateway in Prometheus")  # fmt: skip
        forged = forge(cluster, kube_api, other_namespaces, namespace)
        v2 = versions.publish()
        promoted = wait_status(kube_api, namespace, "InferenceDeployment", NAME, stable_is(v2), 180,
                               "the healthy canary promoted beside the counterfeit series")  # fmt: skip
        stats = load.stop()
    compare_with_traefik(cluster, namespace, forged, promoted, stats.by_code)
    colliding_namespace_holds(cluster, kube_api, namespace, other_namespaces, versions, v2)


def stable_is(version: str):
    def check(obj: dict) -> bool:
        status = obj.get("status") or {}
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == version

    return check


def forge(cluster, kube_api, made: list[str], namespace: str) -> list[str]:
    """The counterfeit exporter, in a namespace of its own, scraped: the names it forges."""
    attacker = make_namespace(kube_api, made, "x" + namespace[1:])  # no dash-prefix of the victim's spelling
    names = canary_names(cluster, namespace)
    pod = simple_pod("forger", [PYTHON, "-c", FORGER, *names], restart_policy="Always",
                     env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}])  # fmt: skip
    pod["metadata"]["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": "9100"}
    client.CoreV1Api(kube_api).create_namespaced_pod(attacker, pod)  # type: ignore[arg-type]  # a manifest
    live = f'{FORGED}{{namespace="{attacker}", service="{names[1]}", code="500"}}'
    wait_for(lambda: prom(cluster, f"rate({live}[20s]) > 0"), 90, "Prometheus has the counterfeit, rising")
    return names


def compare_with_traefik(cluster, namespace: str, forged: list[str], promoted: dict, codes: dict) -> None:
    """What Slipway selects for the canary equals what Traefik counts for it; by name alone the
    counterfeit is in too."""
    ours = backend_selector(TRAEFIK, namespace, NAME, "canary", TRAEFIK_SELECTOR)
    by_name = backend_selector(TRAEFIK, namespace, NAME, "canary", "")

    def genuine() -> dict[str, float]:
        counts = traefik_counts(cluster)
        return {service: n for (service, _), n in counts.items() if service in forged}

    def selected(selector: str) -> float:
        return sum(float(r["value"][1]) for r in prom(cluster, f"sum({FORGED}{{{selector}}})"))

    # The load has stopped: once Prometheus scraped Traefik again, both say the same.
    wait_for(lambda: sum(genuine().values()) == selected(ours), 30, "Prometheus' count of Traefik's = Traefik's")
    traefik, slipway, named = sum(genuine().values()), selected(ours), selected(by_name)
    window = "20s"
    error = AnalysisMetric(name="errorRate", max=0.05)
    forged_error = PrometheusClient(cluster.prometheus_url).query_value(
        gateway_query(error, TRAEFIK, namespace, NAME, "canary", window, "")
    )
    canary_5xx = sum(n for (s, code), n in traefik_counts(cluster).items() if s in forged and code.startswith("5"))
    results = {r["metric"]: r for r in promoted["status"].get("analysis") or []}
    report(f"\ngateway series: canary promoted with a counterfeit exporter in another namespace; Traefik counted "
           f"{traefik:.0f} canary requests ({canary_5xx:.0f} 5xx), Slipway's selector {slipway:.0f}, by name alone "
           f"{named:.0f}; errorRate by name alone now {forged_error}; status.analysis "
           f"{ {m: (r['result'], r.get('value')) for m, r in results.items()} }; load codes {codes}")  # fmt: skip
    assert traefik > 0 and slipway == traefik, (traefik, slipway)  # the genuine count, exactly
    assert named > traefik + 1000, named  # the counterfeit was there to be counted
    assert forged_error is not None and forged_error > 0.5, forged_error  # and would have rolled it back
    assert canary_5xx == 0 and results["errorRate"]["value"] == 0.0, results  # the genuine error rate: none
    assert results["latencyP95Seconds"]["value"] < 2.0 and results["latencyP95Seconds"]["result"] == "Passed"
    assert not promoted["status"].get("lastRollback"), promoted["status"].get("lastRollback")


def colliding_namespace_holds(cluster, kube_api, namespace: str, made: list[str], versions, v2: str) -> None:
    """With namespace <ns>-a present, the next canary's gateway analysis is Inconclusive, naming it."""
    other = make_namespace(kube_api, made, f"{namespace}-a")
    v3 = versions.publish()
    held = wait_status(kube_api, namespace, "InferenceDeployment", NAME,
                       lambda o: condition(o, "Ready").get("reason") == "AnalysisInconclusive", 120,
                       "the canary's analysis Inconclusive for the colliding namespace")  # fmt: skip
    results = held["status"]["analysis"]
    status = get_object(kube_api, namespace, "InferenceDeployment", NAME)["status"]
    report(f"colliding namespace {other}: {len(results)} metrics {[r['result'] for r in results]}, queries sent "
           f"{sum(bool(r.get('query')) for r in results)}; phase {status['phase']}, stable "
           f"{status['stable']['modelVersion']}, lastRollback {status.get('lastRollback')}; "
           f"message: {results[0]['message']}")  # fmt: skip
    assert {r["result"] for r in results} == {"Inconclusive"} and not any(r.get("query") for r in results), results
    assert f"namespace {other}" in results[0]["message"] and "rename" in results[0]["message"]
    assert status["stable"]["modelVersion"] == v2 and status["canary"]["modelVersion"] == v3
    assert status["phase"] != "Promoted" and not status.get("lastRollback"), status
