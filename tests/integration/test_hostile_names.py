"""Names users really give, on the local cluster: an InferenceDeployment named after a model
(``llama-3.1-8b``, ``7b-chat``) serves behind a Service of a valid name, and a 2-node TrainingRun
with a name past 63 characters gets its pods, a resolvable MASTER_ADDR and its phase."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.inference import build as idep
from slipway.mlflow import MlflowClient
from slipway.names import label_value
from slipway.training import build as tr
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, condition, inference_deployment, phase_in, wait_status

pytestmark = pytest.mark.cluster

IMAGE = "ghcr.io/slipway-dev/slipway:0.1.0"
# Kubernetes' own rules (k8s.io/apimachinery/pkg/util/validation), not the builders'.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# 70 characters, with dots: a multi-node name of 56+ characters broke MASTER_ADDR, past 63 every label.
LONG_RUN = "team-a.llama-3.1-8b.instruct-finetune-2024-06-01-lr-3e-4-seed-7-nodes2"


def is_label(value: str, pattern: re.Pattern[str] = DNS1123_LABEL) -> bool:
    return len(value) <= 63 and pattern.fullmatch(value) is not None


def test_inference_deployments_named_after_models_serve(kube_api, namespace, operator, trained, cluster):
    operator()
    model = f"llama-{namespace}"
    with MlflowClient(cluster.mlflow_url) as mlflow:
        mlflow.get_or_create_registered_model(model)
        version = mlflow.create_model_version(model, f"runs:/{trained}/model", trained).version
        mlflow.set_alias(model, "candidate", version)
    names = ["llama-3.1-8b", "7b-chat"]
    for name in names:
        apply_object(kube_api, namespace, inference_deployment(name, model))
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    for name in names:
        wait_status(
            kube_api,
            namespace,
            "InferenceDeployment",
            name,
            lambda o: phase_in("Promoted")(o) and condition(o, "Ready").get("status") == "True",
            120,
            "serving, Ready",
        )
        svc_name = idep.service_name(name)
        assert is_label(svc_name, DNS1035_LABEL) and svc_name != name
        svc = core.read_namespaced_service(svc_name, namespace)
        assert svc.spec.selector == {idep.DEPLOYMENT_LABEL: name}
        stable = apps.read_namespaced_deployment(idep.deployment_name(name, "stable"), namespace)
        assert is_label(stable.metadata.name)
        assert stable.status.ready_replicas == 1
        pods = core.list_namespaced_pod(namespace, label_selector=f"{idep.DEPLOYMENT_LABEL}={name}").items
        assert [p.metadata.annotations[idep.DEPLOYMENT_NAME_ANNOTATION] for p in pods] == [name]
        # The HPA scales the InferenceDeployment by its own name, through the scale subresource,
        # and finds it (its status.selector holds the label value, hashed past 63 characters).
        hpa = client.AutoscalingV2Api(kube_api).read_namespaced_horizontal_pod_autoscaler(name, namespace)
        assert (hpa.spec.scale_target_ref.kind, hpa.spec.scale_target_ref.name) == ("InferenceDeployment", name)

        def able_to_scale(name: str = name) -> bool:
            hpas = client.AutoscalingV2Api(kube_api)
            status = hpas.read_namespaced_horizontal_pod_autoscaler(name, namespace).status
            return any(c.type == "AbleToScale" and c.status == "True" for c in status.conditions or [])

        wait_for(able_to_scale, 60, f"the HPA of {name} able to scale it")
        # Requests through the Service's endpoints reach the model.
        with LoadDriver.for_service(kube_api, namespace, svc_name, rate=10, max_duration=60) as load:
            wait_for(lambda load=load: load.stats().responses >= 10, 30, f"10 answers from Service {svc_name}")
        stats = load.stats()
        assert stats.share(lambda code: code == 200) == 1.0, stats


def training_run(name: str, steps: int, step_seconds: float = 0.0) -> dict[str, Any]:
    return {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "digits-long-name"},
            "image": IMAGE,
            "command": ["python", "-m", "slipway.workloads.train"],
            "args": ["--steps", str(steps)],
            "env": [{"name": "SLIPWAY_STEP_SECONDS", "value": str(step_seconds)}],
            "nodes": 2,
            "runtime": "Job",  # the Indexed Job's names: <job>-<index> hostnames, the headless Service
        },
    }


def training_pods(kube_api, namespace: str, name: str) -> list[Any]:
    selector = f"{tr.RUN_LABEL}={label_value(name)}"
    return client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector=selector).items


def test_two_node_run_with_a_long_name_gets_pods_master_addr_and_phase(kube_api, namespace, operator):
    assert len(LONG_RUN) == 70
    operator()
    apply_object(kube_api, namespace, training_run(LONG_RUN, steps=4))
    job_name, service_name = tr.job_name(LONG_RUN), tr.service_name(LONG_RUN)
    assert is_label(f"{job_name}-1") and is_label(service_name, DNS1035_LABEL)
    pods = wait_for(lambda: (p := training_pods(kube_api, namespace, LONG_RUN)) and len(p) == 2 and p, 60, "2 pods")
    by_index = {p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(by_index) == ["0", "1"]
    master = tr.master_addr(LONG_RUN)
    assert master == f"{by_index['0'].spec.hostname}.{by_index['0'].spec.subdomain}"
    for index, pod in by_index.items():
        assert pod.spec.hostname == f"{job_name}-{index}"
        assert pod.spec.subdomain == service_name
        assert pod.metadata.annotations[tr.RUN_NAME_ANNOTATION] == LONG_RUN
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["MASTER_ADDR"] == master
    svc = client.CoreV1Api(kube_api).read_namespaced_service(service_name, namespace)
    assert svc.spec.cluster_ip == "None"
    assert svc.spec.selector.items() <= pods[0].metadata.labels.items()
    run = wait_status(kube_api, namespace, "TrainingRun", LONG_RUN, phase_in("Succeeded", "Failed"), 180, "finish")
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert condition(run, "Trained")["status"] == "True"


def test_a_run_with_a_long_name_sees_its_running_pods(kube_api, namespace, operator):
    operator()
    apply_object(kube_api, namespace, training_run(LONG_RUN, steps=30, step_seconds=1))

    # Rank 1 of the reference trainer exits at once; rank 0 trains for about 30 s. The run must see
    # its running pod through the pods' full-name annotation (its label value is hashed).
    def running_or_done(obj: dict[str, Any]) -> bool:
        running = condition(obj, "Ready").get("message", "").startswith(("1/2 pods running", "2/2 pods running"))
        return running or phase_in("Succeeded", "Failed")(obj)

    run = wait_status(kube_api, namespace, "TrainingRun", LONG_RUN, running_or_done, 90, "its pods seen running")
    assert run["status"]["phase"] == "Running", run["status"]
