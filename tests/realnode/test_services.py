"""Services on the real node go through kube-proxy (iptables): a pod reaches another pod by its
Service's ClusterIP across the CNI bridge, and a restricted pod reaches the API server through the
``kubernetes`` Service, whose endpoint is the API server's loopback address."""

from __future__ import annotations

import secrets

import pytest

from localkube.wait import wait_for

OPERATOR_IMAGE = "localhost/slipway-operator:0.1.0"  # imported into containerd from dist/
SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def pod(name: str, command: list[str], labels: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": OPERATOR_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "securityContext": SECURITY,
                }
            ],  # fmt: skip
        },
    }


FETCH = """import ssl, sys, urllib.request
ctx = ssl._create_unverified_context()
print(urllib.request.urlopen(sys.argv[1], timeout=3, context=ctx).read().decode().strip())"""


@pytest.mark.realnode
def test_pod_reaches_a_service_and_the_api_server_through_kube_proxy(real_cluster):
    kube = real_cluster.kube
    ns = f"realnode-svc-{secrets.token_hex(3)}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    kube.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
    try:
        # The server answers /hostname with its pod's name (http.server reads /etc, writes nothing).
        serve = ["python", "-m", "http.server", "8080", "-d", "/etc"]
        kube.create(f"/api/v1/namespaces/{ns}/pods", pod("web", serve, {"app": "web"}))
        kube.create(f"/api/v1/namespaces/{ns}/pods", pod("client", ["sleep", "3600"]))
        svc = kube.create(f"/api/v1/namespaces/{ns}/services", {"metadata": {"name": "web"}, "spec": {
            "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})  # fmt: skip
        url = f"http://{svc['spec']['clusterIP']}/hostname"

        def fetch(target: str) -> str | None:
            done = real_cluster.kubectl("-n", ns, "exec", "client", "--", "python", "-c", FETCH, target, check=False)
            return done.stdout.strip() if done.returncode == 0 else None

        # Until the pods run and kube-proxy programmed the endpoint, the request fails: waited on.
        assert wait_for(lambda: fetch(url), 120, f"{url} answering the client pod through kube-proxy") == "web"

        def pod_ip(name: str) -> str | None:
            return (kube.get(f"/api/v1/namespaces/{ns}/pods/{name}").get("status") or {}).get("podIP")

        # The kubelet posts a pod's address with its status, which can come after the pod already serves.
        web_ip = wait_for(lambda: pod_ip("web"), 60, "pod web's status.podIP")
        client_ip = wait_for(lambda: pod_ip("client"), 60, "pod client's status.podIP")
        assert web_ip != client_ip  # two network namespaces, two addresses on the bridge
        # The API server, from inside a pod: the kubernetes Service (10.0.0.1) to its loopback endpoint.
        assert fetch("https://10.0.0.1/livez") == "ok"
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}")
