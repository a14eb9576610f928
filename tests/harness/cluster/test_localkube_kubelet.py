"""The node agents' kubelet API, used as a Kubernetes user uses it: ``kubectl logs`` (tail,
since, timestamps, previous, follow, init containers) and ``kubectl top`` through
metrics-server; and it answers only clients with a certificate it accepts."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from localkube.cluster import CONTROLPLANE
from localkube.state import ClusterInfo
from localkube.testing import pod_phase, simple_pod
from localkube.wait import wait_for

pytestmark = pytest.mark.cluster

KUBECTL = CONTROLPLANE.parent / "kubectl"


def kubectl(cluster: ClusterInfo, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBECTL), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_kubectl_logs_tail_since_timestamps_and_stderr(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str
) -> None:
    script = "for i in 1 2 3; do echo out $i; done; echo err line >&2; sleep 3; echo late"
    client.CoreV1Api(kube_api).create_namespaced_pod(namespace, simple_pod("talker", ["sh", "-c", script]))
    pod_phase(kube_api, namespace, "talker", ("Succeeded",))

    full = kubectl(cluster, "-n", namespace, "logs", "talker")
    assert full.returncode == 0, full.stderr
    lines = full.stdout.splitlines()
    # stdout and stderr are separate pipes (as in a CRI runtime): ordered within each stream.
    assert [x for x in lines if x.startswith("out")] == ["out 1", "out 2", "out 3"]
    assert "err line" in lines[:4] and lines[4] == "late"
    assert kubectl(cluster, "-n", namespace, "logs", "talker", "--tail=2").stdout.splitlines() == [lines[3], "late"]
    stamped = kubectl(cluster, "-n", namespace, "logs", "talker", "--timestamps").stdout.splitlines()
    stamp, _, text = stamped[-1].partition(" ")
    assert text == "late" and stamp.endswith("Z") and len(stamp) == len("2026-01-01T00:00:00.000000000Z")
    # --since-time between the burst and the line written 3 s later selects only that line.
    first = kubectl(cluster, "-n", namespace, "logs", "talker", "--timestamps").stdout.split(" ", 1)[0]
    late_only = kubectl(cluster, "-n", namespace, "logs", "talker", f"--since-time={_plus(first, 1.5)}")
    assert late_only.stdout.splitlines() == ["late"], late_only.stdout

    missing = kubectl(cluster, "-n", namespace, "logs", "talker", "-c", "nosuch")
    assert missing.returncode != 0 and "nosuch" in missing.stderr


def _plus(rfc3339: str, seconds: float) -> str:
    from localkube.nodeagent.logs import parse_time, stamp

    return stamp(parse_time(rfc3339) + seconds)


def test_kubectl_logs_follow_streams_until_the_container_exits(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str
) -> None:
    script = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done"
    client.CoreV1Api(kube_api).create_namespaced_pod(namespace, simple_pod("ticker", ["sh", "-c", script]))
    pod_phase(kube_api, namespace, "ticker", ("Running",))
    started = time.monotonic()
    follow = subprocess.Popen(
        [str(KUBECTL), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace, "logs", "-f", "ticker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    arrivals = []
    for line in follow.stdout:
        arrivals.append((line.strip(), time.monotonic() - started))
    assert follow.wait(timeout=30) == 0
    assert [text for text, _ in arrivals][-3:] == ["tick 4", "tick 5", "tick 6"]
    # Lines arrived as they were written, not all at the end.
    assert arrivals[-1][1] - arrivals[-3][1] >= 1.0, arrivals


def test_kubectl_logs_previous_shows_the_instance_before_a_restart(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str
) -> None:
    script = "if [ -f /data/ran ]; then echo second run; sleep 300; else touch /data/ran; echo first run; exit 1; fi"
    pod = simple_pod("restarter", ["sh", "-c", script], restart_policy="Always")
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, pod)

    def second_run() -> bool:
        s = core.read_namespaced_pod("restarter", namespace).status.container_statuses or []
        return bool(s and s[0].restart_count == 1 and s[0].state.running)

    wait_for(second_run, 60, "the container's second run")
    wait_for(lambda: "second run" in kubectl(cluster, "-n", namespace, "logs", "restarter").stdout, 15, "its log")
    assert kubectl(cluster, "-n", namespace, "logs", "restarter").stdout == "second run\n"
    assert kubectl(cluster, "-n", namespace, "logs", "restarter", "--previous").stdout == "first run\n"


def test_kubectl_top_reads_cpu_and_memory_of_a_busy_pod(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str
) -> None:
    """A busy loop and an idle pod side by side: the metrics tell them apart. A bound in absolute
    millicores would measure the machine's load (a busy CI machine gives the loop a quarter of a
    core), so the busy pod is compared with the idle one."""
    burn = "import time\nend = time.time() + 600\nx = 0\nwhile time.time() < end:\n    x += 1\n"
    idle = "import time\ntime.sleep(600)\n"
    core = client.CoreV1Api(kube_api)
    for name, script in (("burner", burn), ("sleeper", idle)):
        core.create_namespaced_pod(
            namespace, simple_pod(name, ["python", "-c", script], resources={"requests": {"cpu": "100m"}})
        )
        pod_phase(kube_api, namespace, name, ("Running",))

    def metrics(pod: str) -> dict[str, object] | None:
        out = kubectl(cluster, "get", "--raw", f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{pod}")
        return json.loads(out.stdout) if out.returncode == 0 else None

    def usage(pod: str) -> dict[str, str]:
        sample = wait_for(lambda: metrics(pod), 90, f"metrics.k8s.io to report pod {pod}")
        return sample["containers"][0]["usage"]  # type: ignore[index]

    busy, calm = usage("burner"), usage("sleeper")
    # A busy loop: at least 50m, and over five times an idle interpreter's share.
    assert _millicores(busy["cpu"]) >= max(50.0, 5 * _millicores(calm["cpu"])), (busy, calm)
    assert _bytes(busy["memory"]) >= 5 * 2**20, busy
    top = kubectl(cluster, "top", "pod", "-n", namespace, "burner", "--no-headers")
    assert top.returncode == 0, top.stderr
    name, cpu, memory = top.stdout.split()
    assert name == "burner" and cpu.endswith("m") and int(cpu[:-1]) >= 50 and memory.endswith("Mi")
    nodes = kubectl(cluster, "top", "node", "--no-headers")
    assert nodes.returncode == 0 and "slipway-local" in nodes.stdout, nodes.stderr


def _millicores(q: str) -> float:
    if q.endswith("n"):
        return int(q[:-1]) / 1e6
    if q.endswith("u"):
        return int(q[:-1]) / 1e3
    if q.endswith("m"):
        return int(q[:-1])
    return float(q) * 1000


def _bytes(q: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if q.endswith(suffix):
            return int(q[: -len(suffix)]) * factor
    return int(q)


def test_kubelet_api_answers_only_certificates_it_accepts(cluster: ClusterInfo, kube_api: client.ApiClient) -> None:
    node = client.CoreV1Api(kube_api).read_node("slipway-local")
    port = node.status.daemon_endpoints.kubelet_endpoint.port
    assert port > 0
    pki = Path(cluster.pki)
    url = f"https://127.0.0.1:{port}/metrics/resource"
    ca = ssl.create_default_context(cafile=str(pki / "ca.crt"))

    # No client certificate: the TLS handshake is refused.
    with pytest.raises((ssl.SSLError, httpx.HTTPError, ConnectionError, socket.error)):
        httpx.get(url, verify=ca, timeout=5).raise_for_status()
    # A cluster certificate of an identity without access (Prometheus): 403.
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / "prometheus.crt", pki / "prometheus.key")
    assert httpx.get(url, verify=ctx, timeout=5).status_code == 403
    # metrics-server's: the node's resource metrics.
    ok = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ok.load_cert_chain(pki / "metrics-server.crt", pki / "metrics-server.key")
    body = httpx.get(url, verify=ok, timeout=5)
    assert body.status_code == 200 and "node_cpu_usage_seconds_total" in body.text
