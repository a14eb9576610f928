"""A TrainingRun whose pods could not be created (its PriorityClass does not exist) has its MLflow run,
RUNNING; its namespace is deleted while the operator is down, so no delete handler could end that run.
Applied again from the same YAML into a namespace of the same name, with the operator started and the
PriorityClass there now, it goes on in that run: one run with its work key, none left RUNNING once it
trained. Counted in MLflow."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, tag_filter
from slipway.training.adopt import work_of
from slipway.training.model import TrainingRunSpec
from slipway_testing import apply_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster


def runs_of(mlflow: MlflowClient, experiment: str, work: str) -> list[Any]:
    return mlflow.search_runs(
        [mlflow.get_or_create_experiment(experiment)], filter=tag_filter("slipway.dev/work", work)
    )


def finished(o: dict[str, Any]) -> bool:
    return (o.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def test_a_run_left_running_by_a_namespace_deleted_while_the_operator_was_down_is_adopted(
    kube_api, namespace, operator, mlflow
):
    core, scheduling = client.CoreV1Api(kube_api), client.SchedulingV1Api(kube_api)
    priority_class = f"later-{namespace}"[:63]
    model = f"digits-{namespace}"
    body = training_run("digits", steps=2, model=model, priorityClassName=priority_class)
    work = work_of(namespace, "digits", TrainingRunSpec.model_validate(body["spec"]))
    op = operator()
    apply_object(kube_api, namespace, body)

    def refused(o: dict[str, Any]) -> bool:  # its run made, its Job released, its pods refused (FailedCreate)
        status = o.get("status") or {}
        return bool((status.get("mlflow") or {}).get("runId")) and "FailedCreate" in str(status.get("conditions"))

    first = wait_status(kube_api, namespace, "TrainingRun", "digits", refused, 60, "its pods refused")
    first_run = first["status"]["mlflow"]["runId"]
    assert mlflow.get_run(first_run).status == "RUNNING"

    op.stop()  # no delete handler can run: the namespace goes with everything in it
    core.delete_namespace(namespace)

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
            return False
        except ApiException as exc:
            return exc.status == 404

    wait_for(gone, 120, f"namespace {namespace} deleted")
    assert mlflow.get_run(first_run).status == "RUNNING"  # what the operator must not leave so
    meta = client.V1ObjectMeta(name=namespace, labels={"localkube.slipway.dev/test": "true"})
    core.create_namespace(client.V1Namespace(metadata=meta))
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), 30, "the default service account")
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=priority_class),
                                                            value=100))  # fmt: skip
    try:
        operator()
        again = apply_object(kube_api, namespace, body)
        done = wait_status(kube_api, namespace, "TrainingRun", "digits", finished, 180, "trained")
    finally:
        scheduling.delete_priority_class(priority_class)
    runs = runs_of(mlflow, model, work)
    running = [r.run_id for r in runs if r.status == "RUNNING"]
    shown = done["status"]["mlflow"]["runId"]
    report(f"stale run {first_run}: re-applied TrainingRun {again['metadata']['uid']} trained in {shown}; "
           f"runs with its work key {len(runs)}, RUNNING {len(running)}")  # fmt: skip
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["mlflow"]["runId"] == first_run  # adopted, not a second run
    assert [r.run_id for r in runs] == [first_run] and running == []
    assert mlflow.get_run(first_run).status == "FINISHED"
