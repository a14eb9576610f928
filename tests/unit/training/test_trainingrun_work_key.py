"""A TrainingRun's MLflow runs are keyed on the work it asks for (namespace, name and the spec fields
that define what is trained, on what, with which hyperparameters), not only on its uid: the same
YAML applied again finds the run its predecessor made. Scheduling fields change nothing about the
result and not the key. Of the runs found, a FINISHED one is shown, else the one cut short with the
newest checkpoint is resumed; a run of another TrainingRun, or without a checkpoint, is not (pure)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from slipway.mlflow import MlflowUnavailable, Run
from slipway.mlflow.records import WORK_TAG
from slipway.tenancy import Policy
from slipway.training import build, gate
from slipway.training.adopt import adoptable, completed_job, finished_run, gated_own_job, work_of
from slipway.training.model import TrainingRunSpec

SPEC: dict[str, Any] = {
    "model": {"name": "digits"},
    "image": "ghcr.io/slipway-dev/slipway:0.1.0",
    "command": ["python", "-m", "slipway.workloads.train"],
    "args": ["--steps", "6", "--learning-rate", "0.1"],
    "env": [{"name": "SEED", "value": "1"}],
}


def key(spec: dict[str, Any], namespace: str = "team-a", name: str = "digits") -> str:
    return work_of(namespace, name, TrainingRunSpec.model_validate(spec))


@pytest.mark.parametrize(
    "change",
    [
        {"args": ["--steps", "6", "--learning-rate", "0.2"]},  # a hyperparameter
        {"env": [{"name": "SEED", "value": "2"}]},
        {"image": "ghcr.io/slipway-dev/slipway:0.2.0"},
        {"command": ["python", "train.py"]},
        {"model": {"name": "digits-2"}},
        {"nodes": 2},
        {"resources": {"gpus": 1}},
        {"mlflow": {"experiment": "elsewhere"}},
        {"podTemplate": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d2"}}]}},
        {"podTemplate": {"env": [{"name": "LR", "value": "0.3"}]}},
        {"podTemplate": {"envFrom": [{"configMapRef": {"name": "hparams"}}]}},
    ],
)
def test_what_is_trained_on_what_and_how_is_new_work(change: dict[str, Any]) -> None:
    assert key({**SPEC, **change}) != key(SPEC)


@pytest.mark.parametrize(
    "change",
    [
        {"priorityClassName": "high"},
        {"queueName": "team-a"},
        {"runtime": "Job"},
        {"suspend": True},
        {"nodeSelector": {"pool": "a100"}},
        {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        {"failurePolicy": {"maxRestarts": 9}},
        {"checkpoint": {"size": "5Gi"}},
        {"resources": {"cpu": "4", "memory": "8Gi"}},
        {"artifact": {"quantization": {"method": "none"}}},
        {"podTemplate": {"labels": {"team": "a"}, "annotations": {"note": "x"}, "priorityClassName": "low"}},
        {"nodes": 1},  # the default, written out
    ],
)
def test_where_when_and_how_it_is_scheduled_is_the_same_work(change: dict[str, Any]) -> None:
    assert key({**SPEC, **change}) == key(SPEC)


def test_the_key_names_its_namespace_and_name_and_is_independent_of_field_order() -> None:
    assert key(dict(reversed(list(SPEC.items())))) == key(SPEC)
    assert key(SPEC, namespace="team-b") != key(SPEC)  # another team's run is never this one's
    assert key(SPEC, name="digits-v2") != key(SPEC)


def run(
    run_id: str,
    status: str,
    step: int | None = None,
    owner: str = "team-a/digits",
    start: int = 1,
    step_tag: str = "slipway.dev/checkpoint-step",
) -> Run:
    tags = {WORK_TAG: "w", "slipway.dev/trainingrun": owner}
    if step is not None:
        tags[step_tag] = str(step)
    return Run(run_id, "7", "r", status, "", start_time=start, end_time=start + 60_000, tags=tags)


class Search:
    """search_runs over a fixed list (what MLflow answers for the work tag in experiment 7)."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs
        self.asked: list[tuple[list[str], str]] = []

    def search_runs(self, experiment_ids: list[str], filter: str = "") -> list[Run]:
        self.asked.append((list(experiment_ids), filter))
        return [r for r in self.runs if r.experiment_id in experiment_ids]


def pick(*runs: Run) -> str | None:
    client = Search(list(runs))
    found = adoptable(client, "7", "team-a/digits", "w")  # type: ignore[arg-type]
    assert client.asked == [(["7"], "tags.`slipway.dev/work` = 'w'")]
    return found.run_id if found else None


def test_a_finished_run_is_shown_before_any_run_cut_short() -> None:
    assert pick(run("cut", "FAILED", step=4), run("late", "FINISHED", start=9), run("done", "FINISHED")) == "done"


def test_of_runs_cut_short_the_newest_checkpoint_is_resumed() -> None:
    assert pick(run("a", "KILLED", step=2), run("b", "RUNNING", step=6), run("c", "FAILED", step=4)) == "b"


def test_a_checkpoint_step_tagged_as_earlier_versions_named_it_counts() -> None:
    """A run an earlier Slipway's trainer checkpointed carries ``slipway.checkpoint.step``."""
    old = run("old", "KILLED", step=8, step_tag="slipway.checkpoint.step")
    assert pick(run("a", "KILLED", step=2), old) == "old"


def test_a_run_without_checkpoint_or_of_another_trainingrun_is_not_adopted() -> None:
    assert pick(run("bare", "FAILED"), run("other", "FINISHED", owner="team-a/other")) is None
    assert pick(run("sched", "SCHEDULED", step=3)) is None


def test_a_run_left_running_without_a_checkpoint_is_adopted_after_any_checkpointed_one() -> None:
    # Its TrainingRun (or namespace) went before its pods ran: training goes on in it, not in a second run.
    assert pick(run("bare", "RUNNING"), run("other", "RUNNING", owner="team-a/other")) == "bare"
    assert pick(run("bare", "RUNNING"), run("cut", "KILLED", step=2)) == "cut"


def test_a_finished_run_is_shown_as_a_completed_job_with_its_times() -> None:
    job = completed_job(run("done", "FINISHED", start=1_764_900_000_000))
    assert job["status"]["conditions"] == [{"type": "Complete", "status": "True"}]
    assert job["status"]["startTime"] == "2025-12-05T02:00:00Z"
    assert job["status"]["completionTime"] == "2025-12-05T02:01:00Z"


class Mlflow:
    """get_or_create_experiment and search_runs over a fixed list, or MLflow away (every call raises)."""

    def __init__(self, runs: list[Run], away: bool = False) -> None:
        self.runs, self.away, self.calls = runs, away, 0
        self.tracking_uri = f"http://mlflow-{id(self)}:5000"

    proof = None  # no proofs (single-team mode checks none)

    def get_or_create_experiment(self, name: str) -> str:
        self.calls += 1
        if self.away:
            raise MlflowUnavailable(f"MLflow at {self.tracking_uri} did not answer in time")
        return "7"

    def experiment_for(self, name: str, guard: object) -> str:
        return self.get_or_create_experiment(name)

    def search_runs(self, experiment_ids: list[str], filter: str = "") -> list[Run]:
        self.calls += 1
        return [r for r in self.runs if r.experiment_id in experiment_ids and r.tags[WORK_TAG] in filter]


def context() -> SimpleNamespace:
    ctx = SimpleNamespace(status={}, namespace="team-a", name="digits", uid="u-new", events=[],
                          tenancy=Policy("team-a", None))  # fmt: skip
    ctx.event = lambda type_, reason, message: ctx.events.append((type_, reason, message))
    return ctx


def own_job(gated: bool) -> dict[str, Any]:
    spec = TrainingRunSpec.model_validate(SPEC)
    job = build.job("digits", "team-a", spec, "http://mlflow:5000", "slipway-training")
    job["metadata"]["ownerReferences"] = [{"controller": True, "uid": "u-new", "kind": "TrainingRun", "name": "digits"}]
    if not gated:
        job["spec"]["template"] = gate.release(job["spec"]["template"], gate.MlflowLink("http://m", "r", "7"))
    return job


def test_a_finished_run_is_shown_before_the_job_or_while_the_job_of_its_own_is_still_gated() -> None:
    spec = TrainingRunSpec.model_validate(SPEC)
    done = run("done", "FINISHED")
    done.tags[WORK_TAG] = work_of("team-a", "digits", spec)
    for child in (None, own_job(gated=True)):
        ctx = context()
        assert finished_run(ctx, spec, Mlflow([done]), child) is done  # type: ignore[arg-type]
        [(kind, reason, message)] = ctx.events
        assert (kind, reason) == ("Normal", "AdoptedRun") and "done" in message
    # Only a Job of its own that is still gated never ran a pod (deleted when the run is shown).
    ctx = context()
    assert gated_own_job(ctx, own_job(gated=True))  # type: ignore[arg-type]
    assert not gated_own_job(ctx, own_job(gated=False)) and not gated_own_job(ctx, None)  # type: ignore[arg-type]
    theirs = own_job(gated=True)
    theirs["metadata"]["ownerReferences"][0]["uid"] = "u-old"  # the predecessor's, still being deleted
    assert not gated_own_job(ctx, theirs)  # type: ignore[arg-type]


def test_with_mlflow_away_the_job_comes_first_and_later_jobs_do_not_wait_on_mlflow() -> None:
    spec = TrainingRunSpec.model_validate(SPEC)
    away = Mlflow([], away=True)
    assert finished_run(context(), spec, away, None) is None and away.calls == 1  # type: ignore[arg-type]
    assert finished_run(context(), spec, away, None) is None and away.calls == 1  # type: ignore[arg-type]
    # Before the Job's pods get a run it is asked again (and fails as the run lookup would).
    assert finished_run(context(), spec, away, own_job(gated=True)) is None and away.calls == 2  # type: ignore[arg-type]
