"""A ModelArtifact's passes carried out against an MLflow and a cluster in memory: a pass that fails at
any MLflow write is carried on by the next one, which registers nothing twice and moves the aliases
only after the gates passed."""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from slipway.artifact import handler
from slipway.artifact import state as states
from slipway.artifact.model import ModelArtifactSpec, ModelArtifactStatus
from slipway.config import OperatorConfig
from slipway.mlflow import FileTree, Found, Metric, MlflowUnavailable, ModelVersion, RegisteredModel, Run
from slipway.mlflow.records import ROLE_TAG, UID_TAG
from slipway.reconcile import Context

NS, NAME, UID, MODEL = "team", "digits", "uid-1", "digits"
WRITES = ("register_version", "create_run", "set_model_version_tag", "set_alias")


@dataclass
class Mlflow:
    """The MLflow calls a pass makes, over a store in memory; the ``fail_at``-th write is refused."""

    accuracy: float
    fail_at: int = 0
    proof: None = None
    tracking_uri: str = "http://mlflow:5000"
    versions: list[ModelVersion] = field(default_factory=list)
    runs: dict[str, Run] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def writes(self) -> int:
        return sum(call in WRITES for call in self.calls)

    def _write(self, name: str) -> None:
        self.calls.append(name)
        if self.writes() == self.fail_at:
            raise MlflowUnavailable(f"{name}: MLflow answered 503")

    def model_for(self, name: str, guard: Any) -> RegisteredModel:
        return RegisteredModel(name)

    def get_run(self, run_id: str) -> Run:
        return self.runs[run_id]

    def run_model(self, run: Run, path: str) -> Found:
        return Found(f"runs:/{run.run_id}/{path}", run.run_id)

    def digest_within(self, work: Any, seconds: float, max_files: int) -> FileTree:
        return FileTree(2, 100, "sha256:" + "a" * 64)

    def version_of(self, model: str, uid: str, role: str, work: Any = None, guard: Any = None) -> ModelVersion | None:
        mine = [v for v in self.versions if v.tags.get(UID_TAG) == uid and v.tags.get(ROLE_TAG) == role]
        return mine[0] if mine else None

    def register_version(
        self, model: str, source: str, run_id: str | None, uid: str, role: str, tags: dict[str, str], **kw: Any
    ) -> ModelVersion:
        self._write("register_version")
        number = str(len(self.versions) + 1)
        self.versions.append(
            ModelVersion(model, number, source, run_id or "", tags={UID_TAG: uid, ROLE_TAG: role, **tags})
        )
        return self.versions[-1]

    def run_of(self, experiment: str, uid: str, role: str, name: str, tags: dict[str, str], guard: Any) -> Run:
        if role not in self.runs:
            self._write("create_run")
            self.runs[role] = Run(role, "1", name, "RUNNING", f"mlflow-artifacts:/1/{role}/artifacts")
        return self.runs[role]

    def set_model_version_tag(self, model: str, version: str, key: str, value: str) -> None:
        self._write("set_model_version_tag")
        found = next(v for v in self.versions if v.version == version)
        found.tags[key] = value

    def get_version_by_alias(self, model: str, alias: str) -> ModelVersion | None:
        return next((v for v in self.versions if v.version == self.aliases.get(alias)), None)

    def set_alias(self, model: str, alias: str, version: str) -> None:
        self._write("set_alias")
        self.aliases[alias] = version

    def steps_ran(self) -> None:
        """What the step pods do once their Job runs: the quantizer names its model, the evaluator
        logs its metric."""
        if "quantize" in self.runs:
            self.runs["quantize"] = replace(self.runs["quantize"], tags={states.QUANTIZE_URI_TAG: "runs:/quantize/q"})
        if "validate" in self.runs:
            metrics = {"accuracy": Metric("accuracy", self.accuracy)}
            self.runs["validate"] = replace(self.runs["validate"], metrics=metrics)


class Cluster:
    """The Jobs a pass creates, completed before the next pass."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}

    def get(self, index: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.jobs.get(name)) if index == "jobs" else None

    def complete(self) -> None:
        for job in self.jobs.values():
            job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}


class InMemoryContext(Context):
    """A pass's context whose Jobs are created in the Cluster above."""

    def ensure(self, index: str, desired: dict[str, Any], create_extra: Any = None) -> dict[str, Any]:
        created = copy.deepcopy(desired)
        created["metadata"]["creationTimestamp"] = datetime.now(UTC).isoformat()
        self.cache.jobs[created["metadata"]["name"]] = created  # type: ignore[attr-defined]
        return created


def lifecycle(mlflow: Mlflow, passes: int = 20) -> dict[str, Any]:
    """Passes until the artifact is decided, the Jobs completing and their pods reporting between
    them; its status."""
    spec = {
        "model": {"name": MODEL},
        "source": {"mlflowRun": {"runId": "train"}},
        "quantization": {"method": "int8-dynamic"},
        "validation": {"gates": [{"metric": "accuracy", "min": 0.9}]},
    }
    body = {
        "kind": "ModelArtifact",
        "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1, "resourceVersion": "1"},
        "spec": spec,
    }
    mlflow.runs["train"] = Run("train", "1", "train", "FINISHED", "mlflow-artifacts:/1/train/artifacts")
    cluster, memory = Cluster(), {}
    config = OperatorConfig(mlflow_url="http://mlflow:5000", prometheus_url=None, prices_file=None)
    for _ in range(passes):
        key = ("modelartifacts", NS, NAME)
        ctx = InMemoryContext(key, body, ModelArtifactStatus, None, cluster, config, mlflow, memory=memory)
        if states.decided_at_generation(body):
            return dict(body["status"])
        with contextlib.suppress(MlflowUnavailable):  # the frame says so in a condition and runs the pass again
            handler.reconcile(ctx, ModelArtifactSpec.model_validate(spec))
        cluster.complete()
        mlflow.steps_ran()
    raise AssertionError(f"not decided after {passes} passes: {body.get('status')}")


def test_a_lifecycle_without_failures() -> None:
    mlflow = Mlflow(0.95)
    status = lifecycle(mlflow)
    assert (status["phase"], status["modelVersion"], status["quantizedVersion"]) == ("Validated", "1", "2")
    assert mlflow.aliases == {"candidate": "2"}
    assert mlflow.versions[1].tags[states.DECISION_TAG] == "passed"
    assert mlflow.versions[1].tags[states.ALIASES_TAG] == "candidate"
    assert mlflow.writes() == 9


@pytest.mark.parametrize("fail_at", range(1, 10))  # a lifecycle writes 9 times
def test_a_pass_failing_at_any_mlflow_write_is_carried_on(fail_at: int) -> None:
    mlflow = Mlflow(0.95, fail_at=fail_at)
    status = lifecycle(mlflow)
    assert status["phase"] == "Validated" and mlflow.writes() > 9  # the refused write made again
    assert [v.tags[ROLE_TAG] for v in mlflow.versions] == ["source", "quantized"]  # nothing registered twice
    assert mlflow.aliases == {"candidate": "2"}


@pytest.mark.parametrize("fail_at", [0, 5, 7])
def test_a_rejected_candidate_moves_no_alias(fail_at: int) -> None:
    mlflow = Mlflow(0.5, fail_at=fail_at)
    status = lifecycle(mlflow)
    assert status["phase"] == "Rejected"
    assert mlflow.aliases == {} and "set_alias" not in mlflow.calls
    assert mlflow.versions[1].tags[states.DECISION_TAG] == "rejected"
