"""The local cluster's inference gateway (``localkube.gie``): Envoy and its translator route an
HTTPRoute's weights to InferencePools, and within each pool through the pool's endpoint picker
(GIE v1.5.0's EPP, ``make gie``, run by the node agent as its image), as Slipway's
InferenceDeployment in InferencePool traffic mode will lay them out: per track a pool, its EPP
(Service, Deployment, ServiceAccount bound to a ClusterRole) and the model server's pods
(the reference server in its OpenAI-compatible mode), one HTTPRoute over both pools.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from kubernetes import client

from localkube.gie import InferenceGateway, gateway
from localkube.kube import Kube
from localkube.state import ClusterInfo
from localkube.testing import PYTHON, deployment_available
from localkube.wait import wait_for
from slipway.mlflow.uris import run_artifact_uri

pytestmark = pytest.mark.cluster

NAME = "llm"
TRACKS = ("stable", "canary")
PORT = 8000  # the model server's
EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
# The EPP's arguments as the operator will write them: GIE's defaults but for the ports named, and
# tracing off (no collector here); secure serving stays on (GIE's default: the gateway speaks TLS).
EPP_ARGS = ["--grpc-port", "9002", "--grpc-health-port", "9003", "--metrics-port", "9090", "--tracing=false"]
POOLS = "/apis/inference.networking.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture
def epp_role(cluster: ClusterInfo, namespace: str) -> Iterator[str]:
    """The EPP's ClusterRole (cluster-scoped: one per test namespace), removed after the test."""
    kube = Kube(cluster.kubeconfig)
    name = f"{namespace}-epp"
    read = ["get", "list", "watch"]
    kube.create(f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": read},
        {"apiGroups": ["inference.networking.x-k8s.io"],
         "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": read},
    ]})  # fmt: skip
    yield name
    kube.delete(f"{RBAC}/clusterroles/{name}")


def track_objects(ns: str, track: str, role: str, model: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """What the operator will make for one track: the pool, its EPP and (here by hand) the model
    server's Deployment of 2 pods."""
    pool, epp = f"{NAME}-{track}", f"{NAME}-{track}-epp"
    selector = {"slipway.dev/deployment": NAME, "slipway.dev/track": track}
    picker = {"slipway.dev/endpoint-picker": pool}
    server_env = [{"name": k, "value": v} for k, v in model.items()] + [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PORT", "value": str(PORT)},
        {"name": "SLIPWAY_SERVE_API", "value": "openai"},
        {"name": "SLIPWAY_MODEL_NAME", "value": NAME},
        {"name": "SLIPWAY_MAX_NUM_SEQS", "value": "2"},
    ]
    server = {
        "name": "server",
        "image": "slipway-workloads",
        "command": [PYTHON, "-m", "slipway.workloads.serve"],
        "env": server_env,
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 1},
    }
    epp_container = {"name": "epp", "image": EPP_IMAGE,
                     "args": ["--pool-name", pool, "--pool-namespace", ns, *EPP_ARGS],
                     "readinessProbe": {"tcpSocket": {"port": 9002}, "periodSeconds": 1}}  # fmt: skip
    return [
        (f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": epp}}),
        (f"{RBAC}/namespaces/{ns}/rolebindings", {
            "metadata": {"name": epp},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": epp, "namespace": ns}]}),
        (f"/api/v1/namespaces/{ns}/services", {"metadata": {"name": epp}, "spec": {
            "selector": picker, "ports": [{"name": "grpc-ext-proc", "port": 9002, "targetPort": 9002}]}}),
        (f"/apis/apps/v1/namespaces/{ns}/deployments", {"metadata": {"name": epp}, "spec": {
            "replicas": 1, "selector": {"matchLabels": picker},
            "template": {"metadata": {"labels": picker},
                         "spec": {"serviceAccountName": epp, "containers": [epp_container]}}}}),
        (f"{POOLS}/namespaces/{ns}/inferencepools", {"apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool", "metadata": {"name": pool}, "spec": {
                "selector": {"matchLabels": selector}, "targetPorts": [{"number": PORT}],
                "endpointPickerRef": {"name": epp, "port": {"number": 9002}, "failureMode": "FailClose"}}}),
        (f"/apis/apps/v1/namespaces/{ns}/deployments", {"metadata": {"name": pool}, "spec": {
            "replicas": 2, "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": {"containers": [server]}}}}),
    ]  # fmt: skip


def http_route(ns: str, canary_weight: int) -> dict[str, Any]:
    refs = [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": f"{NAME}-{track}", "weight": weight}
        for track, weight in (("stable", 100 - canary_weight), ("canary", canary_weight))
    ]
    # Its own hostname: every test's Gateway of the class shares the gateway's one listener.
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": NAME},
            "spec": {"parentRefs": [{"name": "inference"}], "hostnames": [host(ns)],
                     "rules": [{"backendRefs": refs}]}}  # fmt: skip


def host(ns: str) -> str:
    return f"{ns}.inference.test"


def complete(http: httpx.Client, url: str, timeout: float = 10) -> str:
    """One completion through ``url``; the address that answered it (Envoy's upstream header)."""
    body = {"model": NAME, "prompt": f"digits {uuid.uuid4().hex}", "max_tokens": 1}
    got = http.post(f"{url}/v1/completions", json=body, timeout=timeout)
    got.raise_for_status()
    return got.headers["x-localkube-upstream"]


def pod_ips(api: client.ApiClient, ns: str) -> dict[str, str]:
    """The model servers' ``ip:port`` -> ``track/pod``."""
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"slipway.dev/deployment={NAME}").items
    return {f"{p.status.pod_ip}:{PORT}": f"{p.metadata.labels['slipway.dev/track']}/{p.metadata.name}" for p in pods}


def hold(address: str, requests: int) -> list[socket.socket]:
    """``requests`` long streaming completions sent straight to one server and left unread: they
    take its sequence slots and queue behind them until their sockets are closed."""
    host, port = address.split(":")
    held = []
    for _ in range(requests):
        body = json.dumps({"model": NAME, "prompt": "hold", "max_tokens": 4096, "stream": True}).encode()
        conn = socket.create_connection((host, int(port)), timeout=10)
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)  # fmt: skip
        held.append(conn)
    return held


def waiting(address: str) -> float:
    text = httpx.get(f"http://{address}/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:num_requests_waiting{"))


def test_weights_split_between_pools_and_the_picker_avoids_a_queue(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str, inference_gateway: InferenceGateway,
    epp_role: str, trained: str,
) -> None:  # fmt: skip
    kube = Kube(cluster.kubeconfig)
    model = {"SLIPWAY_MODEL_URI": run_artifact_uri(trained, "model"), "MLFLOW_TRACKING_URI": str(cluster.mlflow_url)}
    for track in TRACKS:
        for path, obj in track_objects(namespace, track, epp_role, model):
            kube.create(path, obj)
    kube.create(f"/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/gateways",
                gateway("inference", namespace, inference_gateway.port))  # fmt: skip
    kube.create(f"/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/httproutes", http_route(namespace, 10))
    for track in TRACKS:
        deployment_available(kube_api, namespace, f"{NAME}-{track}-epp", timeout=60)
        deployment_available(kube_api, namespace, f"{NAME}-{track}", timeout=120)
    servers = pod_ips(kube_api, namespace)
    url = inference_gateway.url

    with httpx.Client(headers={"Host": host(namespace)}) as http:
        # Every pod reached once through its pool's EPP before counting (the EPPs see the pods).
        seen: set[str] = set()
        wait_for(lambda: seen.add(servers[complete(http, url)]) or len(seen) == 4, 90, f"all 4 pods served: {seen}")

        with ThreadPoolExecutor(8) as pool:
            answered = Counter(servers[a] for a in pool.map(lambda _: complete(http, url), range(1000)))
        canary = sum(n for who, n in answered.items() if who.startswith("canary/"))
        print(f"1000 requests at 90/10: {dict(answered)}; canary {canary / 10:.1f}%")
        assert 70 <= canary <= 130, f"canary served {canary} of 1000 at weight 10: {dict(answered)}"

        # One stable pod queues: 2 requests generate, 6 wait; its EPP sends the pool's requests to the other.
        busy = sorted(a for a, who in servers.items() if who.startswith("stable/"))[0]
        held = hold(busy, 8)
        try:
            wait_for(lambda: waiting(busy) >= 5, 30, f"requests waiting at {servers[busy]}")
            wait_for(lambda: complete(http, url, timeout=2) != busy, 10, "a request past the queue")  # EPP scraped it

            def one(_: int) -> str:
                try:
                    return servers[complete(http, url, timeout=5)]
                except httpx.TimeoutException:  # stuck in the queue
                    return servers[busy]

            with ThreadPoolExecutor(4) as pool:
                outcomes = Counter(pool.map(one, range(300)))
        finally:
            for conn in held:
                conn.close()
    stable = {who: n for who, n in outcomes.items() if who.startswith("stable/")}
    avoided = 1 - stable.get(servers[busy], 0) / sum(stable.values())
    print(f"300 requests with {servers[busy]} queueing: {dict(outcomes)}; the stable pool's other pod {avoided:.1%}")
    assert avoided >= 0.9, f"the queueing pod {servers[busy]} still got {stable}"
