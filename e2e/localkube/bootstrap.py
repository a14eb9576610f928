"""Objects every local cluster starts with: RBAC for localkube's own clients, the
default StorageClass ``local``, the registration of metrics-server (``metrics.k8s.io``) and
the custom metrics adapter (``custom.metrics.k8s.io``),
and (on request) the Gateway API CRDs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import yaml

from localkube.kube import Kube

PROVISIONER_USER = "localkube:provisioner"
PROMETHEUS_USER = "localkube:prometheus"
METRICS_SERVER_USER = "system:metrics-server"
METRICS_ADAPTER_USER = "system:custom-metrics-adapter"
PROVISIONER_NAME = "slipway.dev/local"
STORAGE_CLASS = "local"
GATEWAY_API_VERSION = "v1.6.1"  # what the gateway (Traefik v3.7) is built against

RBAC = "/apis/rbac.authorization.k8s.io/v1"


def cluster_role(name: str, user: str, rules: list[dict[str, object]]) -> list[tuple[str, dict[str, object]]]:
    role: dict[str, object] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }
    binding: dict[str, object] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return [(f"{RBAC}/clusterroles", role), (f"{RBAC}/clusterrolebindings", binding)]


def _aggregated_api_server(user: str) -> list[tuple[str, dict[str, object]]]:
    """What an aggregated API server needs to authenticate and authorize its callers."""
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    delegator = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"}
    reader = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "extension-apiserver-authentication-reader",
    }
    name = user.replace("system:", "")
    return [
        (
            f"{RBAC}/clusterrolebindings",
            {"metadata": {"name": f"{name}:system:auth-delegator"}, "roleRef": delegator, "subjects": subject},
        ),
        (
            f"{RBAC}/namespaces/kube-system/rolebindings",
            {
                "metadata": {"name": f"{name}-auth-reader", "namespace": "kube-system"},
                "roleRef": reader,
                "subjects": subject,
            },
        ),
    ]


def objects() -> list[tuple[str, dict[str, object]]]:
    """(collection path, object) pairs created right after the API server is ready."""
    read = ["get", "list", "watch"]
    out = cluster_role(
        PROVISIONER_USER,
        PROVISIONER_USER,
        [
            {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": [*read, "create", "delete"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": read},
            {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": read},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    )
    out += cluster_role(
        PROMETHEUS_USER,
        PROMETHEUS_USER,
        [
            {"apiGroups": [""], "resources": ["pods", "services", "endpoints", "nodes"], "verbs": read},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
    )
    # metrics-server, as its upstream manifest grants it; the custom metrics adapter lists pods.
    out += cluster_role(
        METRICS_SERVER_USER,
        METRICS_SERVER_USER,
        [
            {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": read},
        ],
    )
    out += cluster_role(
        METRICS_ADAPTER_USER,
        METRICS_ADAPTER_USER,
        [{"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": read}],
    )
    for user in (METRICS_SERVER_USER, METRICS_ADAPTER_USER):
        out += _aggregated_api_server(user)
    aggregate = {f"rbac.authorization.k8s.io/aggregate-to-{r}": "true" for r in ("admin", "edit", "view")}
    out.append(
        (
            f"{RBAC}/clusterroles",
            {
                "metadata": {"name": "system:aggregated-metrics-reader", "labels": aggregate},
                "rules": [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": read}],
            },
        )
    )
    out.append(
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": STORAGE_CLASS,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": PROVISIONER_NAME,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
            },
        )
    )
    return out


def apply(kube: Kube) -> None:
    """Create the bootstrap objects (idempotent)."""
    for path, obj in objects():
        kube.ensure(path, obj)


def register_aggregated_api(kube: Kube, service: str, port: int, ca_pem: str, group: str, versions: list[str]) -> None:
    """A selector-less Service ``kube-system/<service>`` whose endpoint is a local process on
    ``port``, and an APIService per version of ``group`` that sends the group's requests to it."""
    ports = [{"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}]
    kube.ensure(
        "/api/v1/namespaces/kube-system/services",
        {"metadata": {"name": service, "namespace": "kube-system"}, "spec": {"ports": ports}},
    )
    subsets = [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]
    path = f"/api/v1/namespaces/kube-system/endpoints/{service}"
    if kube.get_or_none(path) is None:
        kube.create(
            "/api/v1/namespaces/kube-system/endpoints",
            {"metadata": {"name": service, "namespace": "kube-system"}, "subsets": subsets},
        )
    else:
        kube.patch(path, {"subsets": subsets}, kind="merge")
    for version in versions:
        kube.ensure(
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{group}"},
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                    "service": {"name": service, "namespace": "kube-system", "port": 443},
                    "caBundle": base64.b64encode(ca_pem.encode()).decode(),
                },
            },
        )


def gateway_api_crd_dir(version: str = GATEWAY_API_VERSION) -> Path:
    """Download ``sigs.k8s.io/gateway-api@version`` with ``go mod download``; return its standard CRDs."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/gateway-api@{version}"],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod"),
        cwd="/",
    ).stdout
    crds = Path(json.loads(out)["Dir"]) / "config" / "crd" / "standard"
    if not crds.is_dir():
        raise FileNotFoundError(f"{crds} not found in the gateway-api module")
    return crds


def apply_gateway_api_crds(kube: Kube, version: str = GATEWAY_API_VERSION) -> list[str]:
    """Create (or replace) the standard-channel Gateway API CRDs; return their names."""
    names = []
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for file in sorted(gateway_api_crd_dir(version).glob("*.yaml")):
        for doc in yaml.safe_load_all(file.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            current = kube.get_or_none(f"{path}/{doc['metadata']['name']}")
            if current is None:
                kube.create(path, doc)
            else:
                doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                kube.request("PUT", f"{path}/{doc['metadata']['name']}", doc)
            names.append(doc["metadata"]["name"])
    return names
