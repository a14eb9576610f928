"""The operator lists and watches only what is its own: every list and watch of pods and of the kinds
it makes carries the label selector ``app.kubernetes.io/managed-by=slipway`` (the API server's own
audit log says so), and Services, Deployments and patches of them that are not Slipway's (300 of each
in CI, 1,000 by hand), in the very namespace it watches, cost it no more CPU than the same time idle."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from urllib.parse import unquote

import pytest
from kubernetes import client

from localkube.audit import audited_kubeconfig, requests_by
from localkube.wait import wait_for
from slipway.watches import MANAGED_SELECTOR
from slipway_testing import OperatorReplica, report

pytestmark = pytest.mark.cluster

# 300 of each in CI (the control plane is shared with other tests); the README's figure is from 1,000
# (SLIPWAY_UNRELATED_OBJECTS=1000).
UNRELATED = int(os.environ.get("SLIPWAY_UNRELATED_OBJECTS", "300"))
SELECTED = {"pods", "jobs", "persistentvolumeclaims", "services", "deployments", "horizontalpodautoscalers",
            "httproutes"}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115 - one read
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_quiet(pid: int, timeout: float = 60, span: float = 0.5) -> None:
    """Until the process used less than 0.02 CPU-s for ``span`` seconds."""
    last = {"cpu": cpu_seconds(pid), "since": time.monotonic()}

    def quiet() -> bool:
        cpu, now = cpu_seconds(pid), time.monotonic()
        if cpu - last["cpu"] >= 0.02:  # busy: the quiet span starts again
            last.update(cpu=cpu, since=now)
            return False
        return now - last["since"] >= span

    wait_for(quiet, timeout, f"process {pid} quiet", interval=0.1)


def unrelated_service(i: int) -> client.V1Service:
    return client.V1Service(
        metadata=client.V1ObjectMeta(name=f"other-{i}", labels={"app": "other"}),
        spec=client.V1ServiceSpec(cluster_ip="None", selector={"app": "other"}, ports=[client.V1ServicePort(port=80)]),
    )


def unrelated_deployment(i: int) -> client.V1Deployment:
    labels = {"app": f"other-{i}"}
    container = client.V1Container(name="c", image="example.invalid/other:1")
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=f"other-{i}", labels={"app": "other"}),
        spec=client.V1DeploymentSpec(
            replicas=0,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels), spec=client.V1PodSpec(containers=[container])
            ),  # fmt: skip
        ),
    )


def test_objects_that_are_not_slipways_never_reach_the_operator(cluster, kube_api, slipway_crds, namespace, tmp_path):
    since = datetime.now(UTC)
    user = "slipway-watch-scope"
    replica = OperatorReplica("scope", cluster, namespace, tmp_path, standalone=True,
                              kubeconfig=audited_kubeconfig(cluster, user))  # fmt: skip
    try:
        wait_for(lambda: replica.metric("slipway_leader") == 1, 60, "the operator up")
        wait_for(lambda: "watch" in {r.verb for r in requests_by(cluster, user, since)}, 30, "its watches open")
        wait_quiet(pid := replica.proc.pid)  # its start-up work done: what follows is what it does at rest

        core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
        burst_start, burst_cpu = time.monotonic(), cpu_seconds(pid)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: core.create_namespaced_service(namespace, unrelated_service(i)), range(UNRELATED)))
            list(pool.map(lambda i: apps.create_namespaced_deployment(namespace, unrelated_deployment(i)),
                          range(UNRELATED)))  # fmt: skip
            patch = {"metadata": {"annotations": {"touched": "yes"}}}
            list(pool.map(lambda i: apps.patch_namespaced_deployment(f"other-{i}", namespace, patch), range(UNRELATED)))
        wait_quiet(pid)  # whatever the watches still deliver, handled
        burst = cpu_seconds(pid) - burst_cpu
        took = time.monotonic() - burst_start
        # The same operator idle for as long: the noise floor.
        idle_cpu, idle_start = cpu_seconds(pid), time.monotonic()
        wait_for(lambda: time.monotonic() - idle_start >= took, took + 10, "the idle window", interval=0.2)
        idle = cpu_seconds(pid) - idle_cpu
        report(f"\n{UNRELATED} Services + {UNRELATED} Deployments + {UNRELATED} patches not Slipway's in the "
                       f"watched namespace ({took:.1f}s): the operator used {burst:.2f} CPU-s; idle for as long: "
                       f"{idle:.2f} CPU-s")  # fmt: skip

        lists = [r for r in requests_by(cluster, user, since) if r.verb in ("list", "watch") and r.resource in SELECTED]
        unselected = sorted({f"{r.verb} {r.resource}" for r in lists if f"labelSelector={MANAGED_SELECTOR}"
                             not in unquote(r.uri)})  # fmt: skip
        assert {r.resource for r in lists} >= SELECTED - {"httproutes"}  # httproutes: only with Gateway API CRDs
        assert unselected == []
        assert burst - idle < 0.5, f"{burst:.2f} CPU-s for objects that are not Slipway's, {idle:.2f} idle"
        assert replica.metric("slipway_reconcile_total") in (0, None)
    finally:
        replica.stop()
