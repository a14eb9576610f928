"""OpenCost's per-node prices as a price source (README, What it costs): with ``openCost: true`` in
the price file, a TrainingRun's pods are priced by what OpenCost says their node costs, read from
the cluster's real Prometheus, not by the table.

OpenCost itself is stood in for by an exporter in this process serving its three series
(``node_gpu_hourly_cost``, ``node_cpu_hourly_cost``, ``node_ram_hourly_cost``, with OpenCost's
labels) for the cluster's nodes; Prometheus scrapes it under a job of its own, removed again at
the end so that no other test sees OpenCost series."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import yaml
from kubernetes import client

from localkube import prometheus
from localkube.testing import PYTHON, simple_pod
from localkube.wait import wait_for
from slipway import opencost
from slipway.cost import reserved_by
from slipway.prices import Prices
from slipway.prometheus import PrometheusClient
from slipway.status.conditions import parse_time
from slipway_testing import apply_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster

# What OpenCost says a node's resources cost an hour: per GPU, per vCPU, per GiB. The table's differ.
OPENCOST = {"node_gpu_hourly_cost": 7.5, "node_cpu_hourly_cost": 0.3, "node_ram_hourly_cost": 0.07}
PRICE_FILE = """\
currency: USD
gpuHour: {default: 2.0, NVIDIA-A100-SXM4-80GB: 3.6}
cpuHour: 0.05
memoryGiBHour: 0.01
openCost: true
"""
JOB = "opencost"


def exposition(nodes: list[str]) -> bytes:
    """OpenCost's gauges in the Prometheus text format, with the labels OpenCost gives them."""
    lines = []
    for name, price in OPENCOST.items():
        lines += [f"# HELP {name} hourly cost (the test's OpenCost)", f"# TYPE {name} gauge"]
        for node in nodes:
            labels = (f'instance="{node}",node="{node}",instance_type="a2-ultragpu-4g",region="local",'
                      f'provider_id="localkube://{node}"')  # fmt: skip
            lines.append(f"{name}{{{labels}}} {price}")
    return ("\n".join(lines) + "\n").encode()


def query(url: str, promql: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


@pytest.fixture
def opencost_series(cluster, kube_api) -> Iterator[list[str]]:
    """An OpenCost stand-in serving prices for every node of the cluster, scraped by the cluster's
    Prometheus (job ``opencost``, honor_labels, every second) until the test ends; the nodes."""
    assert cluster.prometheus_url, "the cluster runs no Prometheus"
    nodes = sorted(n.metadata.name for n in client.CoreV1Api(kube_api).list_node().items)
    served = {"body": exposition(nodes)}

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = served["body"]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    thread = threading.Thread(target=server.serve_forever, name="opencost-exporter", daemon=True)
    thread.start()
    config = cluster.directory / "prometheus" / "prometheus.yml"
    job = {"job_name": JOB, "honor_labels": True, "scrape_interval": "1s", "scrape_timeout": "1s",
           "static_configs": [{"targets": [f"127.0.0.1:{server.server_address[1]}"]}]}  # fmt: skip
    prometheus.add_scrape_job(config, cluster.prometheus_url, job)
    try:
        wanted = {(name, node) for name in OPENCOST for node in nodes}

        def scraped() -> bool:
            found = query(cluster.prometheus_url, opencost.QUERY)
            return wanted <= {(r["metric"].get("__name__"), r["metric"].get("node")) for r in found}

        wait_for(scraped, 60, f"Prometheus has OpenCost's series for {', '.join(nodes)}", interval=0.5)
        yield nodes
    finally:
        # Series a scrape no longer has are marked stale at once; a removed job's are not (they would
        # answer queries for 5 minutes more): first the exporter serves none, then the job goes.
        served["body"] = b""
        try:
            wait_for(lambda: not query(cluster.prometheus_url, opencost.QUERY), 60, "OpenCost's series gone (stale)")
        finally:
            prometheus.remove_scrape_job(config, cluster.prometheus_url, JOB)
            server.shutdown()
            server.server_close()


def test_a_runs_cost_is_priced_by_opencosts_node_prices(
    kube_api, namespace, operator, tmp_path, monkeypatch, node_gpus, opencost_series
):
    prices_path = tmp_path / "prices.yaml"
    prices_path.write_text(PRICE_FILE)
    monkeypatch.setenv("SLIPWAY_PRICES_FILE", str(prices_path))
    opencost.forget()  # the operator runs in this process: no read of another test's Prometheus is kept
    operator()
    core = client.CoreV1Api(kube_api)
    body = training_run("priced", steps=6, env={"SLIPWAY_STEP_SECONDS": "1"},
                        resources={"gpus": 2, "cpu": "250m", "memory": "512Mi"})  # fmt: skip
    apply_object(kube_api, namespace, body)
    run = wait_status(kube_api, namespace, "TrainingRun", "priced",
                      lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"), 240,
                      "the run finished")  # fmt: skip
    status = run["status"]
    assert status["phase"] == "Succeeded", status
    spent = status["cost"]
    pods = core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name=priced-train").items
    by_name = {p.metadata.name: kube_api.sanitize_for_serialization(p) for p in pods}
    # The recomputation: each attempt's recorded times, what its pod reserved (read from the pod
    # itself), at OpenCost's prices for the node it ran on; and, to tell them apart, at the table's.
    table = Prices.parse(yaml.safe_load(PRICE_FILE))
    product = core.read_node(opencost_series[0]).metadata.labels.get("nvidia.com/gpu.product")
    total = at_table = 0.0
    lines = []
    for attempt in spent["attempts"]:
        pod = by_name[attempt["pod"]]
        node = pod["spec"]["nodeName"]
        assert attempt["node"] == node and node in opencost_series, (attempt, opencost_series)
        held = reserved_by(pod, product)
        start, end = parse_time(attempt["startTime"]), parse_time(attempt.get("endTime")) or datetime.now(UTC)
        hours = (end - start).total_seconds() / 3600
        hourly = (held.gpus * OPENCOST["node_gpu_hourly_cost"] + held.cpus * OPENCOST["node_cpu_hourly_cost"]
                  + held.memory_gib * OPENCOST["node_ram_hourly_cost"])  # fmt: skip
        total, at_table = total + hours * hourly, at_table + hours * table.hourly(held)
        lines.append(f"{attempt['pod']} on {node}: {hours * 3600:.0f} s at {hourly:.4f}/h (the table's "
                     f"{table.hourly(held):.4f}/h)")  # fmt: skip
    report(f"\nOpenCost prices a run: status {spent['total']:.6f} {spent['currency']}, recomputed at OpenCost's "
           f"prices {total:.6f}, at the table's {at_table:.6f}; {'; '.join(lines)}")  # fmt: skip
    assert spent["attempts"] and total > 0
    assert spent["total"] == pytest.approx(total, rel=0.01), (spent, total)
    assert abs(at_table - total) > 0.1 * total  # the table's prices would not pass the check above
    assert spent["currency"] == "USD" and "message" not in spent, spent


# A tenant's pod that exports OpenCost's series itself, a million an hour for every node, with the
# labels that would pass for OpenCost's (job, and no namespace or pod).
FORGER = textwrap.dedent(
    """
    import os, sys, threading
    from prometheus_client import Gauge, start_http_server
    for name in ("node_gpu_hourly_cost", "node_cpu_hourly_cost", "node_ram_hourly_cost"):
        gauge = Gauge(name, "forged", ["node", "job", "namespace", "pod", "instance"])
        for node in sys.argv[1:]:
            gauge.labels(node, "opencost", "", "", node).set(1e6)
    start_http_server(9100, addr=os.environ["POD_IP"])
    threading.Event().wait()
    """
)


def test_a_pod_exporting_opencosts_series_itself_changes_no_price(cluster, kube_api, namespace, opencost_series):
    core = client.CoreV1Api(kube_api)
    pod = simple_pod("pricer", [PYTHON, "-c", FORGER, *opencost_series], restart_policy="Always",
                     env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}])  # fmt: skip
    pod["metadata"]["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": "9100"}
    core.create_namespaced_pod(namespace, pod)
    forged = f'node_gpu_hourly_cost{{namespace="{namespace}", pod="pricer"}}'
    wait_for(lambda: query(cluster.prometheus_url, forged), 60, f"Prometheus has {forged}", interval=0.5)
    # The attack is live: selected by name alone, as before, the forged price wins for the pod's node.
    by_name = 'max by (__name__, node) ({__name__=~"node_gpu_hourly_cost|node_cpu_hourly_cost|node_ram_hourly_cost"})'
    dearest = {float(r["value"][1]) for r in query(cluster.prometheus_url, by_name)}
    assert 1e6 in dearest, dearest
    opencost.forget()
    prices = opencost.with_node_prices(
        Prices.parse(yaml.safe_load(PRICE_FILE)), PrometheusClient(cluster.prometheus_url), 10
    )
    nodes = prices.nodes
    report(f"\nOpenCost prices with a forging pod in {namespace}: by name alone {sorted(dearest)}; Slipway reads "
           f"{ {n: p.gpu_hour for n, p in nodes.items()} }")  # fmt: skip
    assert not prices.open_cost_note, prices.open_cost_note
    assert set(nodes) == set(opencost_series)
    for node, price in nodes.items():  # OpenCost's prices, every one: none changed
        assert (price.gpu_hour, price.cpu_hour, price.memory_gib_hour) == (7.5, 0.3, 0.07), (node, price)
