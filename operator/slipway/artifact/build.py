"""ModelArtifact -> its quantize and validate Jobs."""

from __future__ import annotations

from typing import Any

from slipway.models.base import EnvVar
from slipway.names import MANAGED_BY, dns1123_name, label_value
from slipway.podspec import apply_pod_template, env_list
from slipway.workloads.common import EXIT_CONFIG, EXIT_MLFLOW_UNAVAILABLE

ARTIFACT_LABEL = "slipway.dev/modelartifact"  # the name as a label value (hashed past 63 characters)
STEP_LABEL = "slipway.dev/step"
DEFAULT_COMMANDS = {
    "quantize": ["python", "-m", "slipway.workloads.quantize"],
    "validate": ["python", "-m", "slipway.workloads.validate"],
}


# Every variable Slipway sets in a step's container, and when: the quantizer's and the evaluator's
# contract (docs/reference/programs/ is generated from it; a test holds it to the Jobs the pass
# builds). A variable of the same name in spec.validation.env wins.
STEP_ENV: dict[str, str] = {
    "MLFLOW_TRACKING_URI": "The MLflow address the pods use (the operator's, without credentials).",
    "MLFLOW_RUN_ID": "The step's MLflow run, made by Slipway before the Job: log to it.",
    "SLIPWAY_MODELARTIFACT": "The ModelArtifact's name.",
    "SLIPWAY_MODEL_URI": "The model to read: the source version (`models:/<name>/<version>`) to quantize, or the "
    "candidate version to evaluate (the quantized one, if any).",
}
QUANTIZE_ENV: dict[str, str] = {
    "SLIPWAY_QUANTIZATION_METHOD": "spec.quantization.method.",
}


def step_failure_policy(container: str) -> dict[str, Any]:
    """A step pod that could not reach MLflow (exit 75, after retrying for minutes) or was evicted
    is replaced without counting against backoffLimit: an MLflow outage delays the step, the
    activeDeadlineSeconds bounds it, and only failures of the step itself count. Bad
    configuration (exit 2) fails the Job at once."""
    return {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {
                "action": "Ignore",
                "onExitCodes": {"containerName": container, "operator": "In", "values": [EXIT_MLFLOW_UNAVAILABLE]},
            },
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": container, "operator": "In", "values": [EXIT_CONFIG]},
            },
        ]
    }


def job_name(artifact: str, step: str) -> str:
    return dns1123_name(artifact, step)


# What a quantize or validate pod asks for: it is scheduled where there is room, and its cost (its
# Job's time at these requests) counts in the version's lineage cost.
STEP_REQUESTS = {"cpu": "250m", "memory": "256Mi"}


def step_job(
    artifact: str,
    namespace: str,
    step: str,
    *,
    image: str,
    command: list[str] | None,
    args: list[str] | None,
    env: dict[str, str],
    extra_env: list[EnvVar] | None = None,
    deadline_seconds: int = 3600,
) -> dict[str, Any]:
    """A Job for one step (quantize or validate): Slipway's program unless the spec names its own."""
    labels = {**MANAGED_BY, ARTIFACT_LABEL: label_value(artifact), STEP_LABEL: step}
    container: dict[str, Any] = {
        "name": step,
        "image": image,
        "command": list(command or DEFAULT_COMMANDS[step]),
        "env": env_list(env, extra_env),
    }
    if args:
        container["args"] = list(args)
    container["resources"] = {"requests": dict(STEP_REQUESTS)}
    template = {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", "containers": [container]}}
    apply_pod_template(template, container, None)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(artifact, step), "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 2,
            "podFailurePolicy": step_failure_policy(step),
            "activeDeadlineSeconds": deadline_seconds,
            "template": template,
        },
    }
