"""InferenceDeployments: versions of a model, the test's `digits`, its tracks."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from localkube.wait import wait_for
from slipway_testing.cluster import GROUP, VERSION, get_object, patch_object, phase_in, wait_status

ERRORS = {"name": "errorRate", "max": 0.05}
SERVE = ["python", "-m", "slipway.workloads.serve"]
IMAGE = "ghcr.io/slipway-dev/slipway:0.1.0"  # the workloads image, as the samples name it


class Versions:
    """Versions of ``model`` registered from the run ``run_id`` (the ``trained`` fixture's)."""

    def __init__(self, mlflow: Any, model: str, run_id: str) -> None:
        self.mlflow, self.model, self.run_id = mlflow, model, run_id
        mlflow.get_or_create_registered_model(model)

    def publish(self, **faults: str) -> str:
        """Register a version (with fault tags that travel with it) and move `candidate` to it."""
        tags = {f"slipway.dev/fault-{k}": v for k, v in faults.items()}
        version = self.mlflow.create_model_version(self.model, f"runs:/{self.run_id}/model", self.run_id, tags)
        self.mlflow.set_alias(self.model, "candidate", version.version)
        return str(version.version)

    def alias(self, name: str) -> str | None:
        found = self.mlflow.get_version_by_alias(self.model, name)
        return found.version if found else None

    def alias_becomes(self, name: str, version: str, timeout: float = 30) -> None:
        """Alias moves follow the decision on record (status first, then MLflow): wait for it."""
        wait_for(lambda: self.alias(name) == version, timeout, f"alias {name} of {self.model} -> {version}")


def inference_deployment(
    name: str,
    model: str | dict[str, Any],
    replicas: int | None = 1,
    image: str = IMAGE,
    command: list[str] = SERVE,
    **spec: Any,
) -> dict[str, Any]:
    """The InferenceDeployment ``name``: the reference server (``command`` in ``image``) serving
    ``model``'s `candidate`, or the model reference given (``{"artifactRef": ...}``, another alias);
    ``replicas`` pods (no autoscaling field with None: the operator's default); ``spec`` adds fields
    or replaces these."""
    reference = {"name": model, "alias": "candidate"} if isinstance(model, str) else model
    fields: dict[str, Any] = {"model": reference, "image": image, "command": list(command)}
    if replicas is not None:
        fields["autoscaling"] = {"minReplicas": replicas, "maxReplicas": replicas}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {**fields, **spec},
    }


def deployment(model: str, metrics: tuple[dict[str, Any], ...] = (ERRORS,), **rollout: Any) -> dict[str, Any]:
    """The InferenceDeployment `digits` of ``model``'s `candidate`: 2 replicas, canary 25% then 50%,
    analysis every 5 s (``metrics``), 40 s progress deadline, surge 1; ``rollout`` overrides."""
    analysis = {"interval": "5s", "failureLimit": 1, "metrics": list(metrics)}
    steps = [{"weight": 25, "pause": "5s"}, {"weight": 50, "pause": "5s"}]
    defaults = {"steps": steps, "interval": "5s", "progressDeadlineSeconds": 40, "maxSurgeReplicas": 1}
    return inference_deployment("digits", model, replicas=2, rollout={**defaults, "analysis": analysis, **rollout})


def serving(api: client.ApiClient, namespace: str, version: str, timeout: float = 120) -> dict[str, Any]:
    """Wait until `digits` is Promoted with ``version`` stable."""

    def check(o: dict[str, Any]) -> bool:
        status = o.get("status") or {}
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == version

    return wait_status(api, namespace, "InferenceDeployment", "digits", check, timeout, f"version {version} promoted")


def wait_phase(api: client.ApiClient, namespace: str, phases: list[str], timeout: float, what: str,
               watch: Any = None) -> dict[str, Any]:  # fmt: skip
    """Wait until `digits` is in one of ``phases``; ``watch.sample()`` (if given) at every look."""

    def check(obj: dict[str, Any]) -> bool:
        if watch is not None:
            watch.sample()
        return phase_in(*phases)(obj)

    return wait_status(api, namespace, "InferenceDeployment", "digits", check, timeout, what)


def patch_spec(api: client.ApiClient, namespace: str, spec: dict[str, Any],
               annotations: dict[str, str] | None = None) -> None:  # fmt: skip
    """A merge patch of `digits`' spec (and annotations)."""
    body: dict[str, Any] = {"spec": spec, **({"metadata": {"annotations": annotations}} if annotations else {})}
    patch_object(api, namespace, "InferenceDeployment", "digits", body)


def pods_of(api: client.ApiClient, namespace: str, track: str) -> list[Any]:
    """The pods of a track (``stable``, ``canary``) not being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"slipway.dev/track={track}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def status_of(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    return get_object(api, namespace, "InferenceDeployment", "digits").get("status") or {}


PREEMPTING = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
              "metadata": {"name": "slipway-inference-preempting"}, "value": 1000000,
              "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False}  # fmt: skip
"""A PriorityClass serving may preempt training with, as an admin would opt in."""
