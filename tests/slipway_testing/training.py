"""TrainingRuns and ModelArtifacts of the reference trainer, and a run trained into MLflow directly."""

from __future__ import annotations

import os
from typing import Any

from slipway_testing.cluster import GROUP, VERSION

TRAIN = ["python", "-m", "slipway.workloads.train"]


def training_run(
    name: str,
    steps: int = 6,
    env: dict[str, str] | list[dict[str, Any]] | None = None,
    model: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A TrainingRun of the reference trainer, checkpointing every 2 steps (model ``digits-NAME``
    unless named); ``env`` as name/value pairs or as EnvVar entries (valueFrom, ...)."""
    entries = [{"name": k, "value": v} for k, v in env.items()] if isinstance(env, dict) else list(env or [])
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": model or f"digits-{name}"},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": TRAIN,
            "args": ["--steps", str(steps), "--checkpoint-every", "2"],
            "env": entries,
            **spec,
        },
    }


def train_run(mlflow_url: str, experiment: str, steps: int = 6, bad: bool = False) -> str:
    """Train the reference model into a new MLflow run (as a local process); return the run id."""
    import subprocess
    import sys

    from slipway.mlflow import MlflowClient

    with MlflowClient(mlflow_url) as mlflow:
        run_id = mlflow.create_run(mlflow.get_or_create_experiment(experiment), "train").run_id
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_url, "MLFLOW_RUN_ID": run_id}
    if bad:
        env["SLIPWAY_BAD_MODEL"] = "1"
    subprocess.run(
        [sys.executable, "-m", "slipway.workloads.train", "--steps", str(steps)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return run_id


def model_artifact(name: str, model: str, source: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelArtifact",
        "metadata": {"name": name},
        "spec": {"model": {"name": model}, "source": source, **spec},
    }
