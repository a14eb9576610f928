"""What GPU clusters need of a pod, from spec.podTemplate and spec.resources: a RuntimeClass,
topology spread, a larger /dev/shm, extended resources beside GPUs and native sidecars; each in the
serving revision (a change is canaried) without moving the revision of a spec that leaves it unset;
none of them in a TrainingRun's work key; bad values refused with the field named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slipway.inference import build
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.revision import revision
from slipway.models.base import describe_errors
from slipway.podspec import mlflow_containers, with_credentials
from slipway.training import build as trainbuild
from slipway.training.adopt import work_of
from slipway.training.model import TrainingRunSpec

BASE: dict[str, Any] = {"model": {"name": "digits", "alias": "candidate"}, "image": "server:1"}
GPU_FIELDS: dict[str, Any] = {
    "runtimeClassName": "nvidia",
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    ],
    "shmSize": "8Gi",
    "sidecars": [{"name": "log-shipper", "image": "fluent-bit:3", "args": ["-c", "/etc/fb.conf"]}],
}


def serving(**fields: Any) -> dict[str, Any]:
    spec = InferenceDeploymentSpec.model_validate({**BASE, **fields})
    body = build.deployment(
        "digits", "ns", spec, "canary", "3", "models:/digits/3", "http://mlflow:5000", None, "digits", "w:1"
    )
    return body["spec"]["template"]


def rev(**fields: Any) -> str:
    return revision(InferenceDeploymentSpec.model_validate({**BASE, **fields}), "3", "models:/digits/3", None)


def test_the_fields_reach_the_serving_pod() -> None:
    template = serving(podTemplate=GPU_FIELDS, resources={"gpus": 2, "extendedResources": {"rdma/hca": 1}})
    pod = template["spec"]
    server = pod["containers"][0]
    assert pod["runtimeClassName"] == "nvidia"
    [spread] = pod["topologySpreadConstraints"]
    # Without a labelSelector, the pods counted are this Deployment's own.
    assert spread["labelSelector"]["matchLabels"] == {
        k: v for k, v in template["metadata"]["labels"].items() if k.startswith(("slipway.dev/", "app.kubernetes"))
    }
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["maxSkew"] == 1
    assert {"name": "slipway-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "slipway-shm", "mountPath": "/dev/shm"} in server["volumeMounts"]
    assert server["resources"]["limits"] == {"nvidia.com/gpu": "2", "rdma/hca": "1"}
    assert server["resources"]["requests"] == {"rdma/hca": "1"}
    [sidecar] = pod["initContainers"]
    assert sidecar["name"] == "log-shipper" and sidecar["restartPolicy"] == "Always"
    # Restricted like every container Slipway builds.
    assert sidecar["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_a_sidecar_runs_before_the_fetch_container_and_gets_no_mlflow_credentials() -> None:
    template = serving(podTemplate={"sidecars": GPU_FIELDS["sidecars"]}, modelLoad={})
    names = [c["name"] for c in template["spec"]["initContainers"]]
    assert names == ["log-shipper", "fetch-model"]
    body = with_credentials({"kind": "Deployment", "spec": {"template": template}}, "mlflow-creds")
    [(_, talking)] = mlflow_containers(body)
    assert [c["name"] for c in talking] == ["fetch-model"]
    sidecar = template["spec"]["initContainers"][0]
    assert "envFrom" not in sidecar, "a sidecar never gets MLflow's credentials"
    # Without modelLoad, the server talks to MLflow: still not the sidecar.
    plain = serving(podTemplate={"sidecars": GPU_FIELDS["sidecars"]})
    [(_, talking)] = mlflow_containers({"kind": "Deployment", "spec": {"template": plain}})
    assert [c["name"] for c in talking] == ["server"]


def test_shared_memory_defaults_for_gpu_pods_and_can_be_turned_off_or_replaced() -> None:
    def shm(template: dict[str, Any]) -> list[dict[str, Any]]:
        return [v for v in template["spec"].get("volumes", []) if v["name"] == "slipway-shm"]

    assert shm(serving()) == []  # no GPU: the runtime's 64 MiB, as before
    assert shm(serving(resources={"gpus": 1}))[0]["emptyDir"]["sizeLimit"] == "1Gi"
    assert shm(serving(resources={"gpus": 1}, podTemplate={"shmSize": "0"})) == []
    own = {"volumes": [{"name": "mine", "emptyDir": {"medium": "Memory"}}],
           "volumeMounts": [{"name": "mine", "mountPath": "/dev/shm"}]}  # fmt: skip
    template = serving(resources={"gpus": 1}, podTemplate=own)
    assert (
        shm(template) == []
        and [m["mountPath"] for m in template["spec"]["containers"][0]["volumeMounts"]].count("/dev/shm") == 1
    )


def test_the_training_pod_gets_them_and_its_work_key_does_not_move() -> None:
    base = {"model": {"name": "digits"}, "image": "trainer:1", "resources": {"gpus": 1}}
    plain, placed = (
        TrainingRunSpec.model_validate(base),
        TrainingRunSpec.model_validate(
            {**base, "podTemplate": GPU_FIELDS, "resources": {"gpus": 1, "extendedResources": {"rdma/hca": 1}}}
        ),
    )
    pod = trainbuild.job("run", "ns", placed, "http://mlflow:5000")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["initContainers"][0]["restartPolicy"] == "Always"
    assert pod["containers"][0]["resources"]["limits"]["rdma/hca"] == "1"
    assert {"name": "slipway-shm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
    assert work_of("ns", "run", plain) == work_of("ns", "run", placed)  # moved, not new work: checkpoints resume


# Revisions of specs that leave the new fields unset, as the operator served them before the
# fields existed (computed with the code of 9e5543f): they must not move, or an upgrade would
# canary every InferenceDeployment again.
SERVED_BEFORE = [
    ({}, "29a3670621"),
    (
        {"resources": {"cpu": "2", "memory": "4Gi"},
         "podTemplate": {"labels": {"a": "b"}, "securityContext": {"runAsUser": 1000},
                         "tolerations": [{"key": "gpu", "operator": "Exists"}]}},
        "7fbc1263ba",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "served"), SERVED_BEFORE)
def test_a_spec_without_the_new_fields_keeps_the_revision_it_had(fields: dict[str, Any], served: str) -> None:
    assert rev(**fields) == served


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("runtimeClassName", "runc"),
        (
            "topologySpreadConstraints",
            [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}],
        ),
        ("shmSize", "2Gi"),
        ("sidecars", [{"name": "proxy", "image": "envoy:1"}]),
    ],
)
def test_each_pod_field_is_in_the_revision(field: str, value: Any) -> None:
    assert rev(podTemplate={field: value}) != rev(podTemplate={})


def test_extended_resources_are_in_the_revision() -> None:
    assert rev(resources={"extendedResources": {"rdma/hca": 1}}) != rev()


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"podTemplate": {"runtimeClassName": "NVIDIA runtime"}}, "spec.podTemplate.runtimeClassName"),
        (
            {
                "podTemplate": {
                    "topologySpreadConstraints": [
                        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
                    ]
                }
            },
            "maxSkew",
        ),
        (
            {"podTemplate": {"topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}},
            "topologyKey",
        ),
        ({"podTemplate": {"shmSize": "lots"}}, "spec.podTemplate.shmSize"),
        ({"podTemplate": {"sidecars": [{"name": "server", "image": "x"}]}}, "other than server"),
        ({"podTemplate": {"sidecars": [{"name": "log"}]}}, "and an image"),
        ({"podTemplate": {"sidecars": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}}, "unique"),
        ({"resources": {"extendedResources": {"rdma": 1}}}, "with a domain"),
        ({"resources": {"extendedResources": {"kubernetes.io/batteries": 1}}}, "kubernetes.io"),
        ({"resources": {"extendedResources": {"nvidia.com/gpu": 1}}}, "counted by gpus"),
        ({"resources": {"extendedResources": {"rdma/hca": 0}}}, "spec.resources.extendedResources.rdma/hca"),
    ],
)
def test_a_bad_value_is_refused_naming_the_field(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        InferenceDeploymentSpec.model_validate({**BASE, **fields})
    message = "; ".join(describe_errors(refused.value.errors()))
    assert words in message, message
