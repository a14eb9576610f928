"""What the API server refuses before the operator ever sees it, for a namespace editor: oversized
labels and annotations in a pod template, an alias MLflow reserves as promoteAlias."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from slipway_testing import deployment, report

pytestmark = pytest.mark.cluster


def refused_at_admission(tenant, namespace: str, body: dict) -> str:
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(
            "slipway.dev", "v1alpha1", namespace, "inferencedeployments", body
        )
    assert refused.value.status == 422, refused.value.body
    return str(refused.value.body)


@pytest.mark.parametrize(
    ("pod_template", "field"),
    [
        ({"labels": {"team": "x" * 65536}}, "spec.podTemplate.labels.team"),
        ({"labels": {"team": "not a label value!"}}, "spec.podTemplate.labels.team"),
        ({"labels": {f"k{i}": "v" for i in range(33)}}, "spec.podTemplate.labels"),
        ({"annotations": {"note": "x" * 65536}}, "spec.podTemplate.annotations.note"),
        ({"nodeSelector": {"gpu": "y" * 65536}}, "spec.podTemplate.nodeSelector.gpu"),
    ],
)
def test_oversized_pod_template_metadata_is_refused(slipway_crds, namespace, tenant, pod_template, field):
    body = deployment("digits")
    body["spec"]["podTemplate"] = pod_template
    assert field in refused_at_admission(tenant, namespace, body)


@pytest.mark.parametrize("alias", ["latest", "v2"])
def test_an_alias_mlflow_reserves_is_refused_as_promote_alias(slipway_crds, namespace, tenant, alias):
    body = deployment("digits")
    body["spec"]["rollout"]["promoteAlias"] = alias
    message = refused_at_admission(tenant, namespace, body)
    assert "spec.rollout.promoteAlias" in message and "latest" in message


@pytest.mark.parametrize(
    "hostname",
    ["*", "Example.com", "evil.com/../admin", "a..example.com", "a_b.example.com", "api.*.example.com",
     "x" * 64 + ".io", "example.com:443", "example.com\nHost: internal"],
)  # fmt: skip
def test_a_route_hostname_that_is_not_a_dns_name_is_refused(slipway_crds, namespace, tenant, hostname):
    body = deployment("digits")
    body["spec"]["traffic"] = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}], "hostnames": [hostname]}
    assert "spec.traffic.hostnames[0]" in refused_at_admission(tenant, namespace, body)


def test_a_route_of_more_than_16_hostnames_is_refused(slipway_crds, namespace, tenant):
    body = deployment("digits")
    hostnames = [f"h{i}.example.com" for i in range(17)]
    body["spec"]["traffic"] = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}], "hostnames": hostnames}
    assert "spec.traffic.hostnames" in refused_at_admission(tenant, namespace, body)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"podTemplate": {"runtimeClassName": "NVIDIA runtime"}}, "spec.podTemplate.runtimeClassName"),
        ({"podTemplate": {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                                          "whenUnsatisfiable": "DoNotSchedule"}]}},
         "spec.podTemplate.topologySpreadConstraints[0].maxSkew"),
        ({"podTemplate": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                          "whenUnsatisfiable": "Sometimes"}]}},
         "spec.podTemplate.topologySpreadConstraints[0].whenUnsatisfiable"),
        ({"podTemplate": {"shmSize": "lots"}}, "spec.podTemplate.shmSize"),
        ({"podTemplate": {"sidecars": [{"name": "server", "image": "envoy:1"}]}}, "other than server"),
        ({"podTemplate": {"sidecars": [{"name": "proxy"}]}}, "spec.podTemplate.sidecars[0].image: Required value"),
        ({"podTemplate": {"sidecars": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}},
         "spec.podTemplate.sidecars[1]: Duplicate value"),
        ({"resources": {"extendedResources": {"rdma": 1}}}, "with a domain"),
        ({"resources": {"extendedResources": {"kubernetes.io/batteries": 1}}}, "kubernetes.io domains"),
        ({"resources": {"extendedResources": {"nvidia.com/gpu": 2}}}, "counted by gpus"),
        ({"resources": {"extendedResources": {"rdma/hca": 0}}}, "spec.resources.extendedResources.rdma/hca"),
    ],
)  # fmt: skip
def test_a_gpu_pod_field_with_a_bad_value_is_refused_naming_it(slipway_crds, namespace, tenant, fields, words):
    body = deployment("digits")
    for key, value in fields.items():
        body["spec"][key] = {**body["spec"].get(key, {}), **value}
    message = refused_at_admission(tenant, namespace, body)
    report(f"\n{next(iter(fields))}: {message[message.find('spec.') :][:300]}")
    assert words in message, message


@pytest.mark.parametrize(
    ("autoscaling", "words"),
    [
        ({"minReplicas": 0, "maxReplicas": 2}, "0 needs mode External"),
        ({"mode": "External", "maxReplicas": 2, "metrics": [{"type": "Cpu", "targetAverageUtilization": 70}]},
         "with mode External the autoscaler"),
        ({"mode": "Keda", "maxReplicas": 2}, "spec.autoscaling.mode"),
    ],
)  # fmt: skip
def test_an_autoscaling_mode_with_a_bad_value_is_refused_naming_it(slipway_crds, namespace, tenant, autoscaling, words):
    body = deployment("digits")
    body["spec"]["autoscaling"] = autoscaling
    message = refused_at_admission(tenant, namespace, body)
    report(f"\nautoscaling: {message[message.find('spec.') :][:300]}")
    assert words in message, message
