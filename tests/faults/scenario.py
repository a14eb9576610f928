"""The lifecycle the faults are injected into: TrainingRuns of the reference trainer whose
ModelArtifacts move MLflow's `candidate` alias, and an InferenceDeployment that follows it."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from kubernetes import client

from slipway_e2e.loadgen import LoadDriver
from slipway_testing import (
    ROOT,
    Versions,
    apply_object,
    condition,
    deployment,
    get_object,
    phase_in,
    read_or_none,
    wait_status,
)


def training(name: str, model: str, steps: int = 8, checkpoint_every: int = 2, **env: str) -> dict[str, Any]:
    """samples/trainingrun-digits.yaml as ``name``, training ``model`` for ``steps`` steps."""
    body = yaml.safe_load((ROOT / "samples" / "trainingrun-digits.yaml").read_text())
    body = copy.deepcopy(body)
    body["metadata"] = {"name": name}
    body["spec"]["model"]["name"] = model
    body["spec"]["mlflow"]["experiment"] = model
    body["spec"]["args"] = ["--steps", str(steps), "--checkpoint-every", str(checkpoint_every)]
    body["spec"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return body


def serving(model: str) -> dict[str, Any]:
    """An InferenceDeployment `digits` of ``model``'s `candidate`: 2 replicas, canary 25% then 50%,
    analysis every 5 s (error rate, latency relative to stable)."""
    return deployment(model)


def phase(kube_api: client.ApiClient, namespace: str, kind: str, name: str) -> str:
    """The object's phase: ``new`` before its first status, ``-`` while it does not exist."""
    obj = read_or_none(get_object, kube_api, namespace, kind, name)
    if obj is None:
        return "-"
    return str((obj.get("status") or {}).get("phase") or "new")


def progress(obj: dict[str, Any]) -> int:
    """The last training step a TrainingRun reports."""
    return int(((obj.get("status") or {}).get("progress") or {}).get("step") or 0)


def validated(obj: dict[str, Any]) -> bool:
    return condition(obj, "Ready").get("status") == "True"


def promoted(version: str) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == version

    return check


def wait_artifact(kube_api: client.ApiClient, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    return wait_status(kube_api, namespace, "ModelArtifact", name, validated, timeout, "validated (Ready)")


class Clock:
    """Seconds since a moment, for the figures."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start


@contextmanager
def faulty_canary_analysed(
    kube_api: client.ApiClient, namespace: str, mlflow: Any, run_id: str
) -> Iterator[tuple[Versions, str, str, LoadDriver]]:
    """``digits`` serving v1 under 20 requests/s, then v2 (30% errors) published and its canary being
    analysed: (versions, v1, v2, the load) while the block runs."""
    versions = Versions(mlflow, f"digits-{namespace}", run_id)
    v1 = versions.publish()
    apply_object(kube_api, namespace, serving(versions.model))
    wait_status(kube_api, namespace, "InferenceDeployment", "digits", promoted(v1), 120, f"{v1} serving")
    with LoadDriver.for_service(kube_api, namespace, "digits", rate=20, max_duration=600) as load:
        v2 = versions.publish(errorRate="0.3")
        wait_status(kube_api, namespace, "InferenceDeployment", "digits", phase_in("Analyzing"), 120,
                    "the faulty canary analysed")  # fmt: skip
        yield versions, v1, v2, load
