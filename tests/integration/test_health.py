"""Health that tells the truth to kstatus (Flux, ``helm --wait``) and to kubectl: every status
version a watcher sees is read at once, so a new generation's first status must already say
Reconciling at that generation, before the pass did any I/O (no MLflow run yet)."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

import pytest
from kubernetes import client, watch

from localkube.cluster import CONTROLPLANE
from slipway_testing import GROUP, VERSION, apply_object, condition, wait_status

pytestmark = pytest.mark.cluster

TRAIN = ["python", "-m", "slipway.workloads.train"]


class StatusHistory:
    """Every version of one object's status, in the order the API server made them (a watch)."""

    def __init__(self, kube_api: client.ApiClient, namespace: str, plural: str, name: str) -> None:
        self.versions: list[dict[str, Any]] = []
        self._watch = watch.Watch()
        self._api = client.CustomObjectsApi(kube_api)
        self._args = (GROUP, VERSION, namespace, plural)
        self._selector = f"metadata.name={name}"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        listed = self._api.list_namespaced_custom_object(*self._args, field_selector=self._selector)
        self._ready.set()
        stream = self._watch.stream(self._api.list_namespaced_custom_object, *self._args,
                                    field_selector=self._selector, timeout_seconds=300,
                                    resource_version=listed["metadata"]["resourceVersion"])  # fmt: skip
        for event in stream:
            self.versions.append(event["object"])

    def __enter__(self) -> StatusHistory:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._watch.stop()

    def first_at(self, generation: int) -> dict[str, Any]:
        """The first version whose status was computed for ``generation``."""
        return next(v for v in self.versions if (v.get("status") or {}).get("observedGeneration") == generation)


def test_each_new_generation_reads_reconciling_before_any_io_and_kubectl_shows_the_reason(
    kube_api, namespace, operator, cluster
):
    operator()
    body = {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "health"},
        "spec": {
            "model": {"name": f"digits-{namespace}"},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": TRAIN,
            "args": ["--steps", "200", "--checkpoint-every", "5"],
        },  # fmt: skip
    }
    with StatusHistory(kube_api, namespace, "trainingruns", "health") as history:
        apply_object(kube_api, namespace, body)
        wait_status(kube_api, namespace, "TrainingRun", "health",
                    lambda o: (o.get("status") or {}).get("phase") == "Running", 120, "training")  # fmt: skip
        client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainingruns", "health", {"spec": {"suspend": True}}
        )
        wait_status(kube_api, namespace, "TrainingRun", "health",
                    lambda o: (o.get("status") or {}).get("phase") == "Suspended"
                    and o["status"].get("observedGeneration") == o["metadata"]["generation"],
                    60, "suspended at generation 2")  # fmt: skip
    for generation in (1, 2):
        first = history.first_at(generation)
        ready, reconciling = condition(first, "Ready"), condition(first, "Reconciling")
        assert (ready["status"], reconciling["status"], reconciling["reason"]) == ("False", "True", "NewGeneration")
        assert reconciling["observedGeneration"] == generation
    # Generation 1 was announced before the pass created the MLflow run or the Job.
    assert not history.first_at(1)["status"].get("mlflow")
    table = subprocess.run(
        [str(CONTROLPLANE.parent / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace, "get", "tr"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.splitlines()  # fmt: skip
    header, row = table[0].split(), table[1].split()
    assert "REASON" in header, table
    assert row[header.index("REASON")] == condition(history.versions[-1], "Ready")["reason"], table
