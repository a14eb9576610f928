"""MLflow 3 logged models as sources: the pure parts (the digest over a model's files, the answer's
reading, the search filter, the state of a source with no files)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from slipway.artifact import state as states
from slipway.mlflow import LoggedModel, ModelVersion
from slipway.mlflow.filters import logged_model_filter
from slipway.mlflow.logged_models import newest
from slipway.mlflow.sources import looked_for, tree_digest

ANSWER = {
    "model": {
        "info": {
            "model_id": "m-8170f57c0d2149969c38e49e91e88fdc",
            "experiment_id": "27",
            "name": "model",
            "creation_timestamp_ms": 1796429301568,
            "artifact_uri": "mlflow-artifacts:/27/models/m-8170f57c0d2149969c38e49e91e88fdc/artifacts",
            "status": "LOGGED_MODEL_READY",
            "model_type": "",
            "source_run_id": "62d80f3e43684c16930fae9dfdef80cf",
            "tags": [{"key": "mlflow.user", "value": "root"}],
        },
        "data": {},
    }
}


def test_a_logged_model_is_read_from_mlflows_answer():
    model = LoggedModel.from_json(ANSWER["model"])
    assert model.uri == "models:/m-8170f57c0d2149969c38e49e91e88fdc"
    assert (model.experiment_id, model.name, model.source_run_id) == ("27", "model", "62d80f3e43684c16930fae9dfdef80cf")
    assert model.artifact_uri.endswith("/models/m-8170f57c0d2149969c38e49e91e88fdc/artifacts")
    assert model.tags == {"mlflow.user": "root"}


def test_of_several_logged_models_of_one_name_the_last_logged_is_registered():
    older = LoggedModel("m-b", "1", "model", "a", creation_timestamp_ms=1)
    later = LoggedModel("m-a", "1", "model", "a", creation_timestamp_ms=2)
    assert newest([older, later]) is later and newest([later, older]) is later
    assert newest([]) is None


def test_the_search_filter_names_the_model_and_its_source_run_and_refuses_quotes():
    assert logged_model_filter("model", "abc") == "name = 'model' AND source_run_id = 'abc'"
    with pytest.raises(ValueError, match="single quote"):
        logged_model_filter("model' OR name != '", "abc")


def test_a_version_remembers_the_logged_model_it_was_registered_from():
    version = ModelVersion.from_json({"name": "m", "version": "1", "source": "models:/m-1", "model_id": "m-1"})
    assert version.model_id == "m-1"
    assert ModelVersion.from_json({"name": "m", "version": "2", "source": "runs:/r/model"}).model_id == ""


def test_the_digest_is_what_sha256sum_over_the_sorted_files_prints(tmp_path: Path):
    files = {"MLmodel": b"flavors: {}\n", "model.skops": b"\x00\x01" * 500, "sub/dir/b.txt": b"b", "Z": b"",
             "a b.txt": b"space in the name"}  # fmt: skip
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    shell = "find . -type f | cut -c3- | LC_ALL=C sort | tr '\\n' '\\0' | xargs -0 sha256sum | sha256sum"
    oracle = subprocess.run(["sh", "-c", shell], cwd=tmp_path, capture_output=True, text=True, check=True)
    pairs = [(name, hashlib.sha256(content).hexdigest()) for name, content in files.items()]
    assert tree_digest(pairs) == "sha256:" + oracle.stdout.split()[0]
    assert tree_digest(reversed(pairs)) == tree_digest(pairs)  # the order MLflow lists them in does not matter


def test_the_digest_changes_with_any_file_its_name_or_its_bytes():
    base = [("MLmodel", "a" * 64), ("model.skops", "b" * 64)]
    assert tree_digest(base) != tree_digest([("MLmodel", "a" * 64), ("model.skops", "c" * 64)])
    assert tree_digest(base) != tree_digest([("MLmodel", "a" * 64), ("model.pkl", "b" * 64)])
    assert tree_digest(base) != tree_digest(base[:1])


def test_a_source_with_no_files_is_stalled_naming_the_field_and_what_was_looked_for():
    state = states.empty_source("spec.source.mlflowRun", looked_for("abc", "model"))
    assert state.phase == "Registering"  # never Validated, and looked for again
    stalled = next(c for c in state.conditions if c.type == "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "EmptySource")
    assert stalled.message.startswith("spec.source.mlflowRun: no model files found")
    assert "run abc's artifacts at 'model'" in stalled.message
    assert "LoggedModel named 'model' whose source run is abc" in stalled.message
    assert "log_model(model, name=...)" in stalled.message
    missing = states.empty_source("spec.source.uri", "LoggedModel m-1, which MLflow does not have", "ModelNotFound")
    assert next(c for c in missing.conditions if c.type == "Stalled").reason == "ModelNotFound"
