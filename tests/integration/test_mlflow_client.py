"""slipway.mlflow against a real MLflow server: the operations the operator relies on."""

from __future__ import annotations

import math
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from slipway.mlflow import (
    Metric,
    MlflowClient,
    MlflowError,
    MlflowNotFound,
    model_version_filter,
    run_artifact_uri,
    tag_filter,
)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_experiments_and_runs_are_found_again_by_name_and_tag(mlflow: MlflowClient) -> None:
    name = _name("exp")
    experiment_id = mlflow.get_or_create_experiment(name)
    assert mlflow.get_or_create_experiment(name) == experiment_id

    uid = str(uuid.uuid4())
    run = mlflow.create_run(experiment_id, "train", tags={"slipway.dev/uid": uid})
    assert run.status == "RUNNING" and run.start_time and run.artifact_uri.startswith("mlflow-artifacts:/")
    found = mlflow.search_runs([experiment_id], tag_filter("slipway.dev/uid", uid))
    assert [r.run_id for r in found] == [run.run_id]
    assert mlflow.search_runs([experiment_id], tag_filter("slipway.dev/uid", "other")) == []

    mlflow.update_run(run.run_id, status="FINISHED")
    finished = mlflow.get_run(run.run_id)
    assert finished.status == "FINISHED" and finished.end_time is not None


def test_metrics_params_and_tags_in_one_batch(mlflow: MlflowClient) -> None:
    run = mlflow.create_run(mlflow.get_or_create_experiment(_name("exp")))
    mlflow.log_batch(
        run.run_id,
        metrics=[("loss", 0.9, 1, 1000), Metric("loss", 0.5, 2, 2000), Metric("loss", math.nan, 3, 3000)],
        params={"steps": 3},
        tags={"slipway.checkpoint.step": "2"},
    )
    history = mlflow.get_metric_history(run.run_id, "loss")
    assert [(m.step, m.value) for m in history[:2]] == [(1, 0.9), (2, 0.5)] and math.isnan(history[2].value)
    fetched = mlflow.get_run(run.run_id)
    assert fetched.metrics["loss"].step == 3
    assert fetched.params == {"steps": "3"} and fetched.tags["slipway.checkpoint.step"] == "2"
    with pytest.raises(MlflowError) as changed:
        mlflow.log_batch(run.run_id, params={"steps": 4})  # params are write-once
    assert changed.value.error_code == "INVALID_PARAMETER_VALUE"


def test_artifacts_round_trip_through_the_proxy(mlflow: MlflowClient, tmp_path: Path) -> None:
    run = mlflow.create_run(mlflow.get_or_create_experiment(_name("exp")))
    source = tmp_path / "model"
    (source / "nested").mkdir(parents=True)
    (source / "model.onnx").write_bytes(b"\x08\x07onnx")
    (source / "nested" / "notes.txt").write_text("hi")
    uri = mlflow.upload_dir(run.run_id, source, "model")
    assert uri == f"{run.artifact_uri}/model"
    single = tmp_path / "extra.json"
    single.write_text("{}")
    assert mlflow.upload_artifact(run.run_id, single, "meta") == f"{run.artifact_uri}/meta/extra.json"

    listing = mlflow.list_artifacts(run_artifact_uri(run.run_id, "model"))
    assert {(f.path, f.is_dir, f.size) for f in listing} == {("model.onnx", False, 6), ("nested", True, None)}
    assert mlflow.list_artifacts(run_artifact_uri(run.run_id, "absent")) == []

    tree = mlflow.download_artifacts(run_artifact_uri(run.run_id, "model"), tmp_path / "down")
    assert tree == tmp_path / "down" / "model"
    assert (tree / "model.onnx").read_bytes() == b"\x08\x07onnx" and (tree / "nested" / "notes.txt").read_text() == "hi"
    file = mlflow.download_artifacts(f"{uri}/model.onnx", tmp_path / "file")
    assert file.read_bytes() == b"\x08\x07onnx"
    with pytest.raises(MlflowNotFound):
        mlflow.download_artifacts(run_artifact_uri(run.run_id, "absent"), tmp_path / "none")


def test_registry_versions_tags_and_aliases(mlflow: MlflowClient, tmp_path: Path) -> None:
    run = mlflow.create_run(mlflow.get_or_create_experiment(_name("exp")))
    model_file = tmp_path / "model.onnx"
    model_file.write_bytes(b"weights")
    source = mlflow.upload_artifact(run.run_id, model_file, "model").rsplit("/", 1)[0]
    name = _name("digits")
    assert mlflow.get_or_create_registered_model(name).name == name
    assert mlflow.get_or_create_registered_model(name).aliases == {}

    uid = str(uuid.uuid4())
    first = mlflow.create_model_version(name, source, run.run_id, tags={"slipway.dev/uid": uid})
    second = mlflow.create_model_version(name, run_artifact_uri(run.run_id, "model"), run.run_id)
    assert (first.version, second.version) == ("1", "2")
    # The idempotency lookup: a crash after create, before the status write, finds the version.
    assert [v.version for v in mlflow.search_model_versions(model_version_filter(name, {"slipway.dev/uid": uid}))] == [
        "1"
    ]
    assert [v.version for v in mlflow.search_model_versions(model_version_filter(name))] == ["2", "1"]

    assert mlflow.get_version_by_alias(name, "production") is None
    assert mlflow.get_version_by_alias(_name("no-such-model"), "production") is None
    mlflow.set_alias(name, "production", 1)
    mlflow.set_alias(name, "candidate", "2")
    assert mlflow.get_version_by_alias(name, "production").version == "1"  # type: ignore[union-attr]
    mlflow.set_alias(name, "production", 2)
    assert mlflow.get_registered_model(name).aliases == {"production": "2", "candidate": "2"}
    mlflow.delete_alias(name, "candidate")
    mlflow.delete_alias(name, "candidate")  # already gone: not an error
    assert mlflow.get_version_by_alias(name, "candidate") is None

    mlflow.set_model_version_tag(name, 2, "slipway.dev/gate.accuracy", "passed")
    assert mlflow.get_model_version(name, "2").tags["slipway.dev/gate.accuracy"] == "passed"
    with pytest.raises(MlflowNotFound):
        mlflow.get_model_version(name, 9)

    for uri in (f"models:/{name}@production", f"models:/{name}/1"):
        local = mlflow.download_artifacts(uri, tmp_path / uri.replace("/", "_"))
        assert (local / "model.onnx").read_bytes() == b"weights"
    with pytest.raises(MlflowNotFound, match="no alias 'absent'"):
        mlflow.download_artifacts(f"models:/{name}@absent", tmp_path / "absent")


def test_mlflow_refusals_are_errors_that_say_why(mlflow: MlflowClient) -> None:
    name = _name("digits")
    mlflow.get_or_create_registered_model(name)
    with pytest.raises(MlflowError) as caught:  # "latest" is reserved by every MLflow 3 release
        mlflow.set_alias(name, "latest", 1)
    assert caught.value.status == 400 and caught.value.error_code == "INVALID_PARAMETER_VALUE"
    assert "registered-models/alias" in str(caught.value) and "'latest'" in str(caught.value)
    with pytest.raises(MlflowNotFound, match="not found"):
        mlflow.get_run("0" * 32)


def test_updates_mlflow_refuses_are_returned_with_its_answer_and_hold_back_nothing(mlflow: MlflowClient) -> None:
    run = mlflow.create_run(mlflow.get_or_create_experiment(_name("exp")))
    name = _name("digits")
    mlflow.get_or_create_registered_model(name)
    version = mlflow.create_model_version(name, run_artifact_uri(run.run_id, "model"), run.run_id).version
    updates = [
        {"action": "SetAlias", "model": name, "alias": "latest", "version": version},  # MLflow reserves it
        {"action": "SetTag", "model": name, "version": "99", "key": "k", "value": "v"},  # no such version
        {"action": "SetAlias", "model": name, "alias": "production", "version": version},
    ]
    done, pending, refused = mlflow.apply_updates(updates)
    assert done == updates[2:] and pending == []
    assert [update for update, _ in refused] == updates[:2]
    assert "latest" in refused[0][1] and "(HTTP 400)" in refused[0][1]
    assert "not found" in refused[1][1]
    assert mlflow.get_version_by_alias(name, "production").version == version  # type: ignore[union-attr]


class Racer(MlflowClient):
    """Writers in lock-step: every one looks up and finds nothing, every one creates, then every one
    checks (the race the check after create settles: both creates landed, neither knew of the other)."""

    def __init__(self, url: str, barrier: threading.Barrier) -> None:
        super().__init__(url)
        self.barrier, self.lookups = barrier, 0

    def _step(self, search: Any) -> list[Any]:
        self.lookups += 1
        self.barrier.wait(10)  # the first lookup: all at once; the check: once every create landed
        return [] if self.lookups == 1 else search()

    def search_runs(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self._step(lambda: super(Racer, self).search_runs(*args, **kwargs))

    def search_model_versions(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self._step(lambda: super(Racer, self).search_model_versions(*args, **kwargs))


def race(mlflow: MlflowClient, act: Any, writers: int = 2) -> list[Any]:
    barrier = threading.Barrier(writers)
    clients = [Racer(mlflow.tracking_uri, barrier) for _ in range(writers)]
    with ThreadPoolExecutor(writers) as pool:
        results = list(pool.map(act, clients))
    for client in clients:
        client.close()
    return results


@pytest.mark.parametrize("writers", [2, 3])
def test_writers_racing_to_create_a_run_converge_on_one_and_delete_their_duplicates(
    mlflow: MlflowClient, writers: int
) -> None:
    experiment, uid = _name("race"), str(uuid.uuid4())
    runs = race(mlflow, lambda c: c.run_of(experiment, uid, "train", "r", {}), writers)
    assert len({r.run_id for r in runs}) == 1  # every writer goes on with the same run
    remaining = mlflow.search_runs([mlflow.get_or_create_experiment(experiment)], tag_filter("slipway.dev/uid", uid))
    assert [r.run_id for r in remaining] == [runs[0].run_id]  # the duplicates are deleted


@pytest.mark.parametrize("writers", [2, 3])
def test_writers_racing_to_register_a_version_converge_on_the_lowest_and_delete_theirs(
    mlflow: MlflowClient, writers: int
) -> None:
    run = mlflow.create_run(mlflow.get_or_create_experiment(_name("exp")))
    name, uid = _name("digits"), str(uuid.uuid4())
    mlflow.get_or_create_registered_model(name)

    def register(client: MlflowClient) -> str:
        found = client.version_of(name, uid, "source")
        if found is not None:
            return found.version
        return client.register_version(
            name, run_artifact_uri(run.run_id, "model"), run.run_id, uid, "source", {}
        ).version

    versions = race(mlflow, register, writers)
    assert versions == ["1"] * writers
    left = mlflow.search_model_versions(model_version_filter(name))
    assert [v.version for v in left] == ["1"]
