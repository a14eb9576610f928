"""The attack suite: a namespace editor (bound only to the built-in ``edit`` role in its namespace,
through a client certificate of its own) attacks the operator running on the local cluster. Every
test asserts that nothing escaped: no write by the operator outside the namespace (from the API
server's audit log), nothing of another team's touched."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import yaml
from kubernetes import client

from localkube.audit import audited_kubeconfig
from localkube.kube import Kube, api_client
from localkube.wait import wait_for
from slipway_testing import ROOT

# MLflow sends no events: in tests the operator looks at aliases and training progress every 2 s.
os.environ.setdefault("SLIPWAY_ALIAS_POLL_SECONDS", "2")
os.environ.setdefault("SLIPWAY_PROGRESS_POLL_SECONDS", "2")


@dataclass
class Tenant:
    """A namespace editor: its user name and an API client with only its rights."""

    user: str
    api: client.ApiClient


@pytest.fixture
def tenant(cluster, kube_api, namespace):
    """The editor of the test's namespace (``edit``, with Slipway's kinds aggregated into it by
    manifests/userroles.yaml, as `kubectl apply -k manifests/` installs them)."""
    kube = Kube(cluster.kubeconfig)
    for role in yaml.safe_load_all((ROOT / "manifests" / "userroles.yaml").read_text()):
        kube.ensure("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    rbac = client.RbacAuthorizationV1Api(kube_api)

    def aggregated() -> bool:  # the controller-manager aggregates the rules into edit: asynchronously
        rules = rbac.read_cluster_role("edit").rules or []
        return any("slipway.dev" in (rule.api_groups or []) for rule in rules)

    wait_for(aggregated, 30, "Slipway's kinds aggregated into the edit ClusterRole")
    user = f"editor-{namespace}"
    binding = {
        "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    api = api_client(audited_kubeconfig(cluster, user, admin=False))
    tenant_objects = client.CustomObjectsApi(api)

    def bound() -> bool:  # the API server's authorizer sees a new RoleBinding through a watch: a moment later
        tenant_objects.list_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "inferencedeployments")
        return True

    wait_for(bound, 30, f"{user} allowed by its RoleBinding")
    yield Tenant(user, api)
    api.close()
