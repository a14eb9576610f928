"""``localkube up --gateway-api``: the standard Gateway API CRDs come from the Go module cache."""

from __future__ import annotations

import pytest
from kubernetes import client

from localkube.bootstrap import apply_gateway_api_crds
from localkube.kube import Kube
from localkube.state import ClusterInfo
from localkube.wait import wait_for

pytestmark = pytest.mark.cluster


def test_gateway_api_crds_are_served(cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str) -> None:
    names = apply_gateway_api_crds(Kube(cluster.kubeconfig))

    assert "httproutes.gateway.networking.k8s.io" in names
    ext = client.ApiextensionsV1Api(kube_api)

    def established() -> bool:
        crd = ext.read_custom_resource_definition("gateways.gateway.networking.k8s.io")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, 30, "the Gateway CRD to be Established")
    gateway = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "web"},
        "spec": {"gatewayClassName": "example", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
    }
    custom = client.CustomObjectsApi(kube_api)
    created = wait_for(
        lambda: custom.create_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "gateways", gateway
        ),
        15,
        "the Gateway resource to be served",
    )
    assert created["spec"]["listeners"][0]["port"] == 80
