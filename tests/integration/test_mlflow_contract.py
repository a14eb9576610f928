"""What Slipway needs of MLflow, against one MLflow server and its own client: a model logged the
MLflow 2 way (run artifacts) and the MLflow 3 way (a LoggedModel), found, digested and registered by
Slipway (with the ``model_id`` field for a LoggedModel), then downloaded and loaded by MLflow's own
client; a run with no model found empty.

On the shared cluster this runs against the pinned server (``.cache/mlflow-venv``). ``make
test-mlflow-contract`` runs it, with tests/integration/test_mlflow_client.py, against each MLflow
release Slipway supports, each server started from its own virtualenv: SLIPWAY_TEST_MLFLOW_URL names
the server and SLIPWAY_TEST_MLFLOW_PYTHON the client of the same release."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from slipway.mlflow import MlflowClient
from slipway.mlflow.sources import ModelSources
from slipway_testing import ROOT
from slipway_testing.mlflowscripts import LOG

READ = """
import json, sys
import mlflow, mlflow.pyfunc
mlflow.set_tracking_uri(sys.argv[1])
out = {}
for uri, dest in json.loads(sys.argv[2]).items():
    local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=dest)
    out[uri] = {"dir": local, "prediction": [int(p) for p in mlflow.pyfunc.load_model(uri).predict([[0.0], [3.0]])]}
print(json.dumps(out))
"""


@pytest.fixture
def mlflow_python() -> Path:
    """The Python of MLflow's own client, of the same release as the server."""
    python = Path(os.environ.get("SLIPWAY_TEST_MLFLOW_PYTHON") or ROOT / ".cache" / "mlflow-venv" / "bin" / "python")
    if not python.exists():
        pytest.fail(f"{python} is missing: run `make mlflow-env`")
    return python


def client_says(python: Path, script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_models_mlflows_client_logs_are_found_registered_and_read_back(
    mlflow: MlflowClient, mlflow_python: Path, tmp_path: Path
) -> None:
    url = mlflow.tracking_uri
    logged = client_says(mlflow_python, LOG, url, f"contract-{uuid.uuid4().hex[:8]}")
    sources = ModelSources(url)
    with sources:
        two = sources.run_model(mlflow.get_run(logged["run_artifact"]), "model")
        three = sources.run_model(mlflow.get_run(logged["logged"]), "model")
        assert sources.run_model(mlflow.get_run(logged["empty"]), "model") is None
        assert two is not None and (two.uri, two.model_id) == (f"runs:/{logged['run_artifact']}/model", None)
        assert three is not None and (three.uri, three.model_id) == (
            f"models:/{logged['model_id']}",
            logged["model_id"],
        )
        trees = {found.uri: sources.file_tree(found.uri) for found in (two, three)}
    name = f"contract-{uuid.uuid4().hex[:8]}"
    mlflow.get_or_create_registered_model(name)
    versions = [mlflow.create_model_version(name, f.uri, f.run_id, model_id=f.model_id) for f in (two, three)]
    assert [v.source for v in versions] == [two.uri, three.uri]
    read = client_says(mlflow_python, READ, url, json.dumps({v.uri: str(tmp_path / v.version) for v in versions}))
    for version, found in zip(versions, (two, three), strict=True):
        local = Path(read[version.uri]["dir"])
        files = [p for p in local.rglob("*") if p.is_file() and p.name != "registered_model_meta"]
        assert read[version.uri]["prediction"] == [0, 1], version.uri
        assert trees[found.uri].files == len(files) >= 3 and trees[found.uri].digest, (version.uri, files)
        assert trees[found.uri].size_bytes == sum(p.stat().st_size for p in files)
    print(f"\nMLflow {logged['mlflow']}: run artifact and LoggedModel registered and read back")
