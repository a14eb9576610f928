"""Install Slipway on a cluster the way a user would: ``kubectl apply -k`` of an overlay of manifests/.

The overlay only points the operator at this cluster's MLflow and Prometheus. The
operator then runs as a pod under its ServiceAccount and ClusterRole: the node
agent gives it a projected token, so it uses in-cluster config and RBAC exactly
as in a real cluster.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from localkube.state import ClusterInfo

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".cache" / "controlplane" / "kubectl"
NAMESPACE = "slipway-system"
OPERATOR = "slipway-operator"


def kubectl(
    cluster: ClusterInfo, *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the kubectl built with the control plane against ``cluster``."""
    if not KUBECTL.exists():
        raise FileNotFoundError(f"{KUBECTL} is missing: run `make controlplane`")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([str(KUBECTL), *args], env=env, check=check, capture_output=True, text=True, timeout=timeout)


PRICES = {"currency": "USD", "gpuHour": {"default": 2.5}, "cpuHour": 0.04, "memoryGiBHour": 0.005}


def write_overlay(cluster: ClusterInfo) -> Path:
    """A kustomize overlay of manifests/ with this cluster's MLflow and Prometheus addresses."""
    overlay = cluster.directory / "slipway-overlay"
    overlay.mkdir(parents=True, exist_ok=True)
    # A price table (README, What it costs) in a ConfigMap mounted where the Helm chart mounts
    # it: with it the cost gauges have data. (Not a host path: the pod's /tmp is an emptyDir.)
    (overlay / "prices.yaml").write_text(yaml.safe_dump(PRICES, sort_keys=False))
    env = [
        {"name": "SLIPWAY_MLFLOW_URL", "value": cluster.mlflow_url or ""},
        {"name": "SLIPWAY_PROMETHEUS_URL", "value": cluster.prometheus_url or ""},
        {"name": "SLIPWAY_PRICES_FILE", "value": "/etc/slipway/prices.yaml"},
    ]
    container = {
        "name": "operator",
        "env": env,
        "volumeMounts": [{"name": "prices", "mountPath": "/etc/slipway", "readOnly": True}],
    }
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OPERATOR, "namespace": NAMESPACE},
        "spec": {
            "template": {
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "prices", "configMap": {"name": f"{OPERATOR}-prices"}}],
                }
            }
        },
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "manifests", overlay)],
        "configMapGenerator": [
            {"name": f"{OPERATOR}-prices", "namespace": NAMESPACE, "files": ["prices.yaml"]},
        ],
        "patches": [{"patch": yaml.safe_dump(patch)}],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return overlay


def deploy_operator(cluster: ClusterInfo, timeout: float = 180) -> None:
    """``kubectl apply -k`` the overlay in one pass, as README says, then wait for the operator."""
    overlay = write_overlay(cluster)
    applied = kubectl(cluster, "apply", "-k", str(overlay), check=False)
    if applied.returncode != 0:
        raise RuntimeError(f"kubectl apply -k {overlay} failed in one pass: {applied.stderr.strip()}")
    kubectl(
        cluster,
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        f"deployment/{OPERATOR}",
        f"--timeout={int(timeout)}s",
        timeout=timeout + 10,
    )


def operator_pod(cluster: ClusterInfo) -> str | None:
    """The name of the running operator pod, if any."""
    out = kubectl(
        cluster,
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/component=operator",
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    )
    names = out.stdout.split()
    return names[0] if names else None


def wait_operator_replaced(cluster: ClusterInfo, old: str, timeout: float = 120) -> str:
    """After ``old`` was deleted: the name of its replacement once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = operator_pod(cluster)
        if pod and pod != old:
            return pod
        time.sleep(0.5)  # polling the API within a deadline
    raise TimeoutError(f"no new operator pod replaced {old} within {timeout}s")


def admit_team(api: Any, namespace: str, models: str) -> None:
    """What a cluster admin does for a team before it applies anything under the operator of
    manifests/ (multi-tenant mode): allow its MLflow models and experiments (globs), and enforce the
    restricted Pod Security Standard on its namespace."""
    from kubernetes import client

    team = {"metadata": {"annotations": {"slipway.dev/allowed-models": models},
                         "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}  # fmt: skip
    client.CoreV1Api(api).patch_namespace(namespace, team)
