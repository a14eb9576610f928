"""Deletes never wait for the operator: no finalizer on Slipway's objects, children go by their
ownerReferences, and the finalizer earlier versions added is removed."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.wait import wait_for
from slipway_testing import apply_object, get_object, wait_status

pytestmark = pytest.mark.cluster

LEGACY = "slipway.dev/finalizer"


def training_run(name: str, **metadata: object) -> dict:
    return {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": name, **metadata},
        "spec": {
            "model": {"name": f"digits-{name}"},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": ["python", "-m", "slipway.workloads.train"],
            "args": ["--steps", "200"],
            "env": [{"name": "SLIPWAY_STEP_SECONDS", "value": "0.5"}],
            "checkpoint": {"size": "1Gi"},
        },
    }


def jobs_left(kube_api, namespace: str) -> list[str]:
    """Jobs not being deleted (a deleted Job may wait for its pods' termination)."""
    jobs = client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
    return [j.metadata.name for j in jobs if not j.metadata.deletion_timestamp]


def gone(read) -> bool:  # type: ignore[no-untyped-def]
    try:
        read()
    except ApiException as exc:
        return exc.status == 404
    return False


def test_a_run_deletes_with_the_operator_away_and_its_children_go_with_it(kube_api, operator, namespace):
    op = operator()
    apply_object(kube_api, namespace, training_run("r1"))
    wait_status(kube_api, namespace, "TrainingRun", "r1", lambda o: (o.get("status") or {}).get("phase") == "Running",
                120, "running")  # fmt: skip
    run = get_object(kube_api, namespace, "TrainingRun", "r1")
    assert not run["metadata"].get("finalizers"), "Slipway's objects carry no finalizer"
    op.stop()  # the operator is away: an upgrade, an outage, scaled to 0
    custom = client.CustomObjectsApi(kube_api)
    custom.delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns", "r1")
    wait_for(lambda: gone(lambda: get_object(kube_api, namespace, "TrainingRun", "r1")), 30, "the run deleted")
    wait_for(lambda: not jobs_left(kube_api, namespace), 60, "its Job deleted with it (ownerReferences, no operator)")


def test_a_namespace_deletes_with_the_operator_away(kube_api, operator, namespace):
    op = operator()
    apply_object(kube_api, namespace, training_run("r2"))
    wait_status(kube_api, namespace, "TrainingRun", "r2", lambda o: (o.get("status") or {}).get("phase") == "Running",
                120, "running")  # fmt: skip
    op.stop()
    core = client.CoreV1Api(kube_api)
    core.delete_namespace(namespace)
    wait_for(lambda: gone(lambda: core.read_namespace(namespace)), 120, f"namespace {namespace} deleted")


def test_the_finalizer_of_an_earlier_version_is_removed(kube_api, operator, namespace):
    apply_object(kube_api, namespace, training_run("old", finalizers=[LEGACY]))
    operator()
    wait_for(lambda: LEGACY not in (get_object(kube_api, namespace, "TrainingRun", "old")["metadata"].get("finalizers")
                                    or []), 60, "the legacy finalizer removed")  # fmt: skip
    custom = client.CustomObjectsApi(kube_api)
    custom.delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "trainingruns", "old")
    wait_for(lambda: gone(lambda: get_object(kube_api, namespace, "TrainingRun", "old")), 60, "the run deleted")
    wait_for(lambda: not jobs_left(kube_api, namespace), 60, "its Job deleted with it (ownerReferences)")
