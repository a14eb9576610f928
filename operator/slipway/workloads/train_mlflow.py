"""The reference trainer written as a team writes its own training script: with MLflow's own client.

    python -m slipway.workloads.train_mlflow [the flags of slipway.workloads.train]

It trains the same digits classifier as :mod:`slipway.workloads.train`, and reports the way MLflow 3's
documentation shows, through the ``mlflow`` package (``mlflow-skinny``, in the workloads extra):

- ``mlflow.start_run()`` attaches to the run the operator created: MLflow's client reads
  ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID`` from the pod's environment, as Slipway sets them;
- ``mlflow.log_params`` once, ``mlflow.log_metrics(..., step=step)`` every step (loss, accuracy);
- ``mlflow.onnx.log_model(model, name="model")`` at the end: a LoggedModel (``models:/m-<id>``)
  whose source run is this one, the run's own artifacts left empty. Slipway finds it as MLflow's
  client does (the LoggedModel named ``model`` of the run) and registers it with its ``model_id``.
  The ONNX flavour, not ``mlflow.sklearn``: Slipway's quantizer, validator and server read ONNX.
  ``slipway-model.json`` (the model's metadata, with the serve fault switches the tests use) is
  added to the LoggedModel's files.

What it leaves out, to stay a plain MLflow script: checkpoints (a restarted pod trains from step 1;
:mod:`slipway.workloads.train` shows resumption) and the test switches other than
``SLIPWAY_BAD_MODEL`` and the ``SLIPWAY_SERVE_FAULT_*`` ones. In a
multi-node run only rank 0 (``NODE_RANK``) trains and reports.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path

from slipway.workloads.classifier import (
    export_model,
    model_metadata,
    new_state,
    serve_faults_from_env,
    train_step,
    training_labels,
)
from slipway.workloads.common import (
    METADATA_FILE,
    MODEL_ARTIFACT_PATH,
    digits_split,
    env_flag,
    env_int,
    run_workload,
)
from slipway.workloads.train import parse_args

log = logging.getLogger("slipway.workloads.train_mlflow")


def train(args: argparse.Namespace) -> str | None:
    """Train and log with MLflow's client; the LoggedModel's id (None on a rank other than 0)."""
    import mlflow
    import mlflow.onnx
    import onnx
    from threadpoolctl import threadpool_limits

    if (rank := env_int("NODE_RANK", 0, minimum=0)) != 0:
        log.info("NODE_RANK=%d: rank 0 trains and reports", rank)
        return None
    bad_model = env_flag("SLIPWAY_BAD_MODEL")
    faults = serve_faults_from_env()  # checked now, not after the last step
    data = digits_split()
    state = new_state(args, data)
    features = state.scaler.transform(data.train_x)
    labels = training_labels(data, bad_model, args.seed)
    with mlflow.start_run() as run:  # MLFLOW_RUN_ID: the operator's run
        log.info("attached to run %s (MLFLOW_RUN_ID %s)", run.info.run_id, os.environ.get("MLFLOW_RUN_ID", "unset"))
        mlflow.log_params(
            {
                "steps": args.steps,
                "hiddenUnits": args.hidden_units,
                "learningRate": args.learning_rate,
                "batchSize": args.batch_size,
                "seed": args.seed,
                "dataset": "sklearn-digits",
                "badModel": bad_model,
                "client": f"mlflow {mlflow.__version__}",
            }
        )
        with threadpool_limits(limits=args.threads):
            while state.step < args.steps:
                metrics = train_step(state, features, labels)
                mlflow.log_metrics(metrics, step=state.step)
                log.info(
                    "step %d/%d loss=%.4f accuracy=%.4f", state.step, args.steps, metrics["loss"], metrics["accuracy"]
                )
        with tempfile.TemporaryDirectory(prefix="slipway-train-mlflow-") as tmp:
            described = model_metadata(args, run.info.run_id, bad_model, faults)
            exported = export_model(state, Path(tmp) / MODEL_ARTIFACT_PATH, described)
            info = mlflow.onnx.log_model(onnx.load(str(exported)), name=MODEL_ARTIFACT_PATH)
            mlflow.MlflowClient().log_model_artifact(info.model_id, str(exported.with_name(METADATA_FILE)))
    log.info("logged model %s (%s) of run %s", info.model_id, info.model_uri, run.info.run_id)
    return str(info.model_id)


def main(argv: list[str] | None = None) -> int:
    return run_workload(lambda: train(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
