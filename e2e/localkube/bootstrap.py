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
from typing import Any

import yaml

from localkube.kube import Kube
from localkube.wait import wait_for

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


def aggregated_api_server(user: str) -> list[tuple[str, dict[str, object]]]:
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
        out += aggregated_api_server(user)
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


CRD_BASE = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def apply_crds(
    kube: Kube, docs: list[dict[str, Any]], field_manager: str = "localkube", timeout: float = 60
) -> list[str]:
    """Server-side apply CustomResourceDefinitions (forced, one field manager): safe when several
    clients apply the same CRDs at once (test workers, benchmarks), where a read-then-replace
    answers 409. Waits until each is Established and its kinds answer a list; returns the names."""
    names = []
    for doc in docs:
        name = doc["metadata"]["name"]
        kube.request("PATCH", f"{CRD_BASE}/{name}", json.dumps(doc), query={"fieldManager": field_manager,
                     "force": "true"}, content_type="application/apply-patch+yaml", timeout=120)  # fmt: skip
        names.append(name)

    def established() -> bool:
        for name in names:
            status = kube.get(f"{CRD_BASE}/{name}").get("status") or {}
            if not any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or []):
                return False
        return True

    wait_for(established, timeout, f"the CRDs {', '.join(names)} to be established")

    def served() -> bool:  # Established comes before the storage answers ("storage is (re)initializing")
        for doc in docs:
            spec = doc["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("served", True))
            try:
                kube.get(f"/apis/{spec['group']}/{version}/{spec['names']['plural']}", limit=1)
            except Exception:
                return False
        return True

    wait_for(served, timeout, "the new kinds to be listable")
    return names


def apply_gateway_api_crds(kube: Kube, version: str = GATEWAY_API_VERSION) -> list[str]:
    """Apply the standard-channel Gateway API CRDs; return their names."""
    docs = [
        doc
        for file in sorted(gateway_api_crd_dir(version).glob("*.yaml"))
        for doc in yaml.safe_load_all(file.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]
    return apply_crds(kube, docs)
