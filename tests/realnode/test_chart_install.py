"""``helm install charts/slipway`` on the real node with the operator image ``make image`` built
(imported into containerd, no registry), in a namespace enforcing ``restricted``: both replicas
Running and Ready as UID 65532 on a read-only root filesystem, one of them holding the Lease, its
metrics served. The operator reaches the API server through the ``kubernetes`` Service (kube-proxy).
MLflow and Prometheus run as processes on the machine: each gets a Service whose endpoint is its
loopback address, reached through kube-proxy as the API server is."""

from __future__ import annotations

import contextlib
import secrets
import time

import pytest


@pytest.mark.realnode
def test_helm_install_runs_both_replicas_restricted_on_the_real_node(real_cluster):
    release = ns = f"slipway-real-{secrets.token_hex(2)}"
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    real_cluster.kube.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
    try:
        start = time.monotonic()
        real_cluster.install_operator(release, ns)
        pods = real_cluster.operator_pods(ns)
        rollout = time.monotonic() - start
        holder = real_cluster.assert_restricted_replicas(ns, pods)
        metrics = real_cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/{holder}:8080/proxy/metrics")
        assert "slipway_reconcile_total" in metrics.stdout, metrics.stdout[:500]
        print(f"real node: helm install to both replicas Ready in {rollout:.1f}s; leader {holder}")
    finally:
        with contextlib.suppress(AssertionError):
            real_cluster.helm("uninstall", release, "-n", ns, "--ignore-not-found", timeout=120)
        real_cluster.kube.delete(f"/api/v1/namespaces/{ns}")
