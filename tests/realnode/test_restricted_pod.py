"""A pod of the locally built operator image on the real node, in a namespace enforcing the
``restricted`` Pod Security Standard: the kubelet and runc enforce what the spec asks (UID 65532,
a read-only root filesystem), the pod has its own network namespace on the bridge, and ``kubectl
logs``, ``kubectl exec`` and ``kubectl top`` reach the container through the API server and the kubelet."""

from __future__ import annotations

import ipaddress
import json
import secrets
import time

import pytest
from kubernetes.client.exceptions import ApiException

from localkube.realnode import POD_SUBNET
from localkube.wait import wait_for

OPERATOR_IMAGE = "localhost/slipway-operator:0.1.0"
# The container says who it is and what writing / does, then waits to be exec'd into.
PROBE = """
import os, time
print("uid", os.getuid(), "gid", os.getgid(), flush=True)
try:
    open("/written-by-the-pod", "w")
    print("write / succeeded", flush=True)
except OSError as e:
    print("write / refused: errno", e.errno, e.strerror, flush=True)
time.sleep(3600)
"""


def restricted_namespace(real_cluster, prefix: str) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    real_cluster.kube.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}})
    return name


def probe_pod(name: str, run_as_user: int = 65532) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": run_as_user != 0,
                "runAsUser": run_as_user,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },  # fmt: skip
            "containers": [
                {
                    "name": "probe",
                    "image": OPERATOR_IMAGE,
                    "imagePullPolicy": "IfNotPresent",  # imported into containerd from dist/: no registry
                    "command": ["python", "-c", PROBE],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },  # fmt: skip
                }
            ],
        },
    }


@pytest.mark.realnode
def test_restricted_pod_of_the_operator_image_on_the_real_node(real_cluster):
    started = time.monotonic()
    kube = real_cluster.kube
    ns = restricted_namespace(real_cluster, "realnode")
    try:
        kube.create(f"/api/v1/namespaces/{ns}/pods", probe_pod("probe"))

        def running() -> dict | None:
            pod = kube.get(f"/api/v1/namespaces/{ns}/pods/probe")
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if statuses and statuses[0].get("state", {}).get("terminated"):
                raise AssertionError(f"the probe container ended: {json.dumps(statuses[0])}")
            return pod if statuses and statuses[0].get("ready") else None

        pod = wait_for(running, 120, f"pod {ns}/probe Running and ready on the real node")
        node = kube.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
        # A container of containerd, on a node whose kubelet says so: not a process of the node agent.
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://"), node["status"]
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"), pod["status"]
        # Its own network namespace: an address of the bridge's subnet, not the machine's.
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(POD_SUBNET), pod["status"]

        # kubectl logs: the API server asks the kubelet, which reads the container's log.
        def logged() -> str | None:
            out = real_cluster.kubectl("-n", ns, "logs", "probe").stdout
            return out if "write /" in out else None

        logs = wait_for(logged, 30, "the probe's log")
        assert "uid 65532 gid 65532" in logs, logs
        assert "write / refused: errno 30 Read-only file system" in logs, logs

        # kubectl exec: a second process in the same container, with the same identity and limits.
        assert real_cluster.kubectl("-n", ns, "exec", "probe", "--", "id", "-u").stdout.strip() == "65532"
        write = real_cluster.kubectl("-n", ns, "exec", "probe", "--", "python", "-c", "open('/etc/x', 'w')",
                                     check=False)  # fmt: skip
        assert write.returncode != 0 and "Read-only file system" in write.stderr, (write.returncode, write.stderr)
        status = real_cluster.kubectl("-n", ns, "exec", "probe", "--", "python", "-c",
                                      "print(open('/proc/self/status').read())").stdout  # fmt: skip
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["CapEff"].strip() == "0000000000000000", fields["CapEff"]  # every capability dropped
        assert fields["Seccomp"].strip() == "2", fields["Seccomp"]  # RuntimeDefault: a seccomp filter
        assert fields["NoNewPrivs"].strip() == "1", fields["NoNewPrivs"]

        # kubectl top: metrics-server reads the kubelet's resource metrics (containerd's cgroup stats).
        def top() -> str | None:
            done = real_cluster.kubectl("-n", ns, "top", "pod", "probe", "--no-headers", check=False)
            return done.stdout if done.returncode == 0 and done.stdout.startswith("probe ") else None

        usage = wait_for(top, 90, f"kubectl top pod {ns}/probe to show its usage").split()
        assert usage[1].endswith("m") and usage[2].endswith("Mi"), usage
        print(f"real node: restricted pod ready, logs, exec and top checked in {time.monotonic() - started:.1f}s"
              + (f" (cluster up {real_cluster.up_seconds:.1f}s)" if real_cluster.up_seconds else ""))  # fmt: skip
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}")


@pytest.mark.realnode
def test_root_pod_refused_by_the_restricted_namespace(real_cluster):
    """The attack: a tenant asks for root in a namespace enforcing ``restricted``; the API server
    refuses the pod, naming the field, and nothing reaches the node."""
    kube = real_cluster.kube
    ns = restricted_namespace(real_cluster, "realnode-root")
    try:
        with pytest.raises(ApiException) as refused:
            kube.create(f"/api/v1/namespaces/{ns}/pods", probe_pod("root", run_as_user=0))
        assert refused.value.status == 403, refused.value
        message = json.loads(refused.value.body)["message"]
        assert 'violates PodSecurity "restricted:latest"' in message, message
        assert "runAsNonRoot" in message and "runAsUser=0" in message, message
        assert kube.get_or_none(f"/api/v1/namespaces/{ns}/pods/root") is None
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}")
