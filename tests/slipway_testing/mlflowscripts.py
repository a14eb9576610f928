"""Scripts that MLflow's own client runs (in ``.cache/mlflow-venv``, or the virtualenv of the release
under test), in a subprocess: its pins conflict with the Kubernetes client's."""

from __future__ import annotations

# Logs a model three ways in the experiment argv[2] of the server argv[1]: MLflow 2-style (the
# model's files in the run's artifacts), MLflow 3's documented way (a LoggedModel, the run's
# artifacts empty), and a run with no model. Prints their ids and the client's version as JSON.
LOG = """
import json, sys, tempfile
import mlflow, mlflow.sklearn
from sklearn.linear_model import LogisticRegression
mlflow.set_tracking_uri(sys.argv[1]); mlflow.set_experiment(sys.argv[2])
model = LogisticRegression().fit([[0.0], [1.0], [2.0], [3.0]], [0, 0, 1, 1])
out = {"mlflow": mlflow.__version__}
with mlflow.start_run() as run:  # MLflow 2-style: the model's files in the run's artifacts
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.sklearn.save_model(model, tmp + "/model")
        mlflow.log_artifacts(tmp + "/model", artifact_path="model")
    out["run_artifact"] = run.info.run_id
with mlflow.start_run() as run:  # MLflow 3's documentation: a LoggedModel, the run's artifacts empty
    out["model_id"] = mlflow.sklearn.log_model(model, name="model").model_id
    out["logged"] = run.info.run_id
with mlflow.start_run() as run:
    mlflow.log_metric("accuracy", 0.9)
    out["empty"] = run.info.run_id
print(json.dumps(out))
"""
