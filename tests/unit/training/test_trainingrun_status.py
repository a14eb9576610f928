"""TrainingRun phase and conditions from its Job and pods."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slipway.mlflow import Metric, Run
from slipway.status.conditions import Cond
from slipway.training.model import TrainingRunSpec
from slipway.training.state import progress_from_run, training_state

SPEC = TrainingRunSpec.model_validate(
    {"model": {"name": "m"}, "image": "i", "failurePolicy": {"permanentExitCodes": [3]}}
)


def job(conditions: list[dict[str, Any]] | None = None, suspend: bool = False, failed: int = 0) -> dict[str, Any]:
    return {
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions or [], "failed": failed, "startTime": "2026-01-01T00:00:00Z"},
    }


def pod(phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p-1"}, "status": {"phase": phase, **status}}


def cond(state, type_: str) -> Cond:
    return next(c for c in state.conditions if c.type == type_)


def test_no_job_yet_is_pending():
    state = training_state(SPEC, None, [])
    assert state.phase == "Pending"
    assert cond(state, "Reconciling").status == "True"


def test_sizing_refusal_fails_before_any_job():
    state = training_state(SPEC, None, [], sizing_refusal="needs ~90 GiB")
    assert state.phase == "Failed"
    assert cond(state, "Stalled").reason == "InsufficientGPUMemory"
    assert cond(state, "Stalled").message == "needs ~90 GiB"


def test_running_counts_restarts():
    state = training_state(SPEC, job(failed=1), [pod()])
    assert state.phase == "Running"
    assert state.restarts == 1
    assert "1 restarts" in cond(state, "Ready").message


def test_unschedulable_carries_the_schedulers_message():
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
    }
    state = training_state(SPEC, job(), [pod("Pending", conditions=[scheduled])])
    assert state.phase == "Pending"
    assert cond(state, "Ready").reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in cond(state, "Ready").message


def test_image_pull_backoff_is_named():
    waiting = {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}}
    state = training_state(SPEC, job(), [pod("Pending", containerStatuses=[waiting])])
    assert cond(state, "Ready").reason == "ImagePullBackOff"


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "CreateContainerConfigError", "CrashLoopBackOff"])
def test_a_pod_that_cannot_run_is_reconciling_for_the_grace_period_then_stalled(reason):
    waiting = {"state": {"waiting": {"reason": reason, "message": "what the node said"}}}
    stuck = {**pod("Pending", containerStatuses=[waiting]), "metadata": {"name": "p-1",
             "creationTimestamp": "2026-01-01T00:00:00Z"}}  # fmt: skip
    early = training_state(SPEC, job(), [stuck], now=datetime(2026, 1, 1, 0, 1, tzinfo=UTC), stuck_grace_seconds=300)
    assert (cond(early, "Reconciling").status, cond(early, "Stalled").status) == ("True", "False")
    assert early.recheck_seconds == 240  # looked at again when the grace ends, without an event
    late = training_state(SPEC, job(), [stuck], now=datetime(2026, 1, 1, 0, 6, tzinfo=UTC), stuck_grace_seconds=300)
    assert (cond(late, "Stalled").status, cond(late, "Stalled").reason) == ("True", reason)
    assert "what the node said" in cond(late, "Stalled").message and "stuck for 360s" in cond(late, "Stalled").message
    assert late.phase == "Pending" and cond(late, "Reconciling").status == "False"


def test_an_unschedulable_pod_is_never_stalled_by_age():
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no GPU"}
    waiting = {**pod("Pending", conditions=[scheduled]), "metadata": {"name": "p-1",
               "creationTimestamp": "2026-01-01T00:00:00Z"}}  # fmt: skip
    state = training_state(SPEC, job(), [waiting], now=datetime(2026, 1, 2, tzinfo=UTC), stuck_grace_seconds=300)
    assert cond(state, "Reconciling").status == "True"  # preemption or a new node may yet make room


def test_permanent_exit_code_fails_with_the_code():
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "PodFailurePolicy",
        "message": "Container trainer for pod ns/p-1 failed with exit code 3 matching FailJob rule at index 1",
    }
    state = training_state(SPEC, job([failed]), [])
    assert state.phase == "Failed"
    assert cond(state, "Stalled").reason == "PermanentExitCode"
    assert "code 3" in cond(state, "Stalled").message


def test_deadline_exceeded():
    failed = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer"}
    state = training_state(SPEC, job([failed]), [])
    assert cond(state, "Stalled").reason == "DeadlineExceeded"


def test_complete_is_ready_unless_the_artifact_is_pending():
    complete = [{"type": "Complete", "status": "True"}]
    done = training_state(SPEC, job(complete), [])
    assert done.phase == "Succeeded"
    assert cond(done, "Ready").status == "True"
    assert cond(done, "Trained").status == "True"
    pending = training_state(SPEC, job(complete), [], artifact_pending=True)
    assert cond(pending, "Ready").status == "False"
    assert cond(pending, "Reconciling").reason == "CreatingArtifact"


def artifact(phase: str | None, message: str = "") -> dict[str, Any]:
    status = {"phase": phase, "modelVersion": "3", "conditions": [{"type": "Ready", "message": message}]}
    return {"metadata": {"name": "run"}, "status": status if phase else {}}


def test_a_finished_run_reports_its_artifacts_verdict():
    complete = job([{"type": "Complete", "status": "True"}])
    deciding = training_state(SPEC, complete, [], artifact=artifact("Validating", "validating version 3"))
    assert (deciding.phase, cond(deciding, "Ready").status, cond(deciding, "Reconciling").reason) == (
        "Succeeded", "False", "ArtifactInProgress")  # fmt: skip
    assert "validating version 3" in cond(deciding, "Ready").message
    usable = training_state(SPEC, complete, [], artifact=artifact("Validated"))
    assert cond(usable, "Ready").status == "True" and "version 3" in cond(usable, "Ready").message
    rejected = training_state(SPEC, complete, [], artifact=artifact("Rejected", "accuracy 0.5 < 0.9"))
    assert (rejected.phase, cond(rejected, "Trained").status) == ("Succeeded", "True")  # training itself worked
    assert (cond(rejected, "Stalled").status, cond(rejected, "Stalled").reason) == ("True", "ArtifactRejected")
    assert "accuracy 0.5 < 0.9" in cond(rejected, "Stalled").message
    assert cond(training_state(SPEC, complete, [], artifact=artifact(None)), "Reconciling").status == "True"


def test_suspended_by_spec_vs_queued_by_kueue():
    suspended = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "suspend": True})
    held = training_state(suspended, job(suspend=True), [])
    assert held.phase == "Suspended"
    # Suspended on purpose: no work in flight and nothing stuck, and not Ready.
    assert [cond(held, t).status for t in ("Ready", "Reconciling", "Stalled")] == ["False", "False", "False"]
    queued = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "queueName": "q"})
    state = training_state(queued, job(suspend=True), [])
    assert state.phase == "Pending"
    assert cond(state, "Ready").reason == "Queued"


def test_a_job_made_before_its_mlflow_run_says_so_unless_kueue_or_the_user_holds_it():
    plain = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    state = training_state(plain, job(suspend=True), [], mlflow_pending=True)
    assert (state.phase, cond(state, "Ready").reason) == ("Pending", "CreatingMlflowRun")
    assert "MLflow run" in cond(state, "Ready").message
    queued = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "queueName": "q"})
    assert cond(training_state(queued, job(suspend=True), [], mlflow_pending=True), "Ready").reason == "Queued"
    suspended = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "suspend": True})
    assert training_state(suspended, job(suspend=True), [], mlflow_pending=True).phase == "Suspended"


def running_run(metrics: dict[str, Metric], tags: dict[str, str]) -> Run:
    return Run(
        run_id="r", experiment_id="1", run_name="", status="RUNNING", artifact_uri="", metrics=metrics, tags=tags
    )


def test_progress_and_checkpoint_from_mlflow_run():
    run = running_run(
        metrics={
            "step": Metric("step", 7, 7),
            "totalSteps": Metric("totalSteps", 30, 0),
            "loss": Metric("loss", 0.25, 7),
            "checkpointStep": Metric("checkpointStep", 5, 5, 1767225600000),
        },
        tags={"slipway.dev/checkpoint": "/checkpoints/step-5.pkl", "slipway.dev/checkpoint-step": "5"},
    )
    progress, checkpoint = progress_from_run(run)
    assert progress == {"step": 7, "totalSteps": 30, "metrics": {"loss": 0.25}}
    assert checkpoint == {"step": 5, "path": "/checkpoints/step-5.pkl", "time": "2026-01-01T00:00:00Z"}


def test_checkpoint_and_attempts_tags_as_earlier_versions_named_them_are_still_read():
    """A trainer written for an earlier Slipway sets ``slipway.checkpoint``, ``slipway.checkpoint.step``
    and ``slipway.attempts``; a run already in MLflow carries them: status shows them all the same."""
    from slipway.training.mlflowrun import seen
    from slipway.training.state import with_attempts

    old = {"slipway.checkpoint": "/checkpoints/step-5.pkl", "slipway.checkpoint.step": "5", "slipway.attempts": "3"}
    run = running_run(metrics={}, tags=old)
    assert progress_from_run(run)[1] == {"step": 5, "path": "/checkpoints/step-5.pkl"}
    state = training_state(SPEC, job(failed=1), [pod()])
    assert with_attempts(state, seen(run)).restarts == 2  # what a pass keeps of the run holds the old tag
    both = running_run(metrics={}, tags={**old, "slipway.dev/checkpoint-step": "10"})
    assert progress_from_run(both)[1] == {"step": 10, "path": "/checkpoints/step-5.pkl"}  # the new name wins


def test_suspend_patch_follows_spec_and_leaves_kueue_held_jobs_alone() -> None:
    from slipway.training.state import USER_SUSPENDED, suspend_patch

    running = {"metadata": {}, "spec": {"suspend": False}, "status": {}}
    suspend = SPEC.model_copy(update={"suspend": True})
    assert suspend_patch(suspend, running) == {"metadata": {"annotations": {USER_SUSPENDED: "true"}},
                                               "spec": {"suspend": True}}  # fmt: skip
    ours = {"metadata": {"annotations": {USER_SUSPENDED: "true"}}, "spec": {"suspend": True}, "status": {}}
    assert suspend_patch(SPEC, ours)["spec"] == {"suspend": False}  # type: ignore[index]
    queued = SPEC.model_copy(update={"queue_name": "gpus"})
    kueue_held = {"metadata": {}, "spec": {"suspend": True}, "status": {}}
    assert suspend_patch(queued, kueue_held) is None  # Kueue admits it, not Slipway
    done = {
        "metadata": {},
        "spec": {"suspend": False},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    assert suspend_patch(suspend, done) is None
    assert suspend_patch(SPEC, running) is None


def test_finished_only_at_the_current_generation() -> None:
    from slipway.training.state import finished

    body = {"metadata": {"generation": 2}, "spec": {}, "status": {"phase": "Succeeded", "observedGeneration": 2}}
    assert finished(body)
    assert not finished({**body, "status": {"phase": "Succeeded", "observedGeneration": 1}})
    with_artifact = {**body, "spec": {"artifact": {"aliases": ["candidate"]}}}
    assert not finished(with_artifact)  # its ModelArtifact is not made yet
    assert finished({**with_artifact, "status": {**body["status"], "artifactRef": {"name": "r"}}})


def test_values_training_code_writes_badly_never_break_the_progress():
    run = running_run(
        metrics={"step": Metric("step", float("nan"), 3), "loss": Metric("loss", float("inf"), 3)},
        tags={"slipway.dev/checkpoint-step": "12.0"},
    )
    progress, checkpoint = progress_from_run(run)
    assert progress == {"step": 3} and checkpoint == {"step": 12}
    run.tags["slipway.dev/checkpoint-step"] = "twelve"
    assert progress_from_run(run)[1] is None


def test_restarts_count_preempted_attempts_the_job_does_not():
    from slipway.training.state import with_attempts

    state = training_state(SPEC, job(failed=1), [pod()])
    assert state.restarts == 1
    # Three starts (one failure the Job counted, one preemption it ignored): 2 restarts.
    assert with_attempts(state, running_run({}, {"slipway.dev/attempts": "3"})).restarts == 2
    # Never fewer than the Job counts; a bad or missing tag changes nothing.
    assert with_attempts(state, running_run({}, {"slipway.dev/attempts": "1"})).restarts == 1
    assert with_attempts(state, running_run({}, {"slipway.dev/attempts": "many"})).restarts == 1
    assert with_attempts(state, running_run({}, {})).restarts == 1


def test_a_run_with_100k_metrics_keeps_status_small():
    import json

    metrics = {f"m{i:06d}": Metric(f"m{i:06d}", i / 7, 3) for i in range(100_000)}
    metrics["x" * 5000] = Metric("x" * 5000, 1.0, 3)  # a key longer than MLflow allows
    run = running_run(metrics=metrics, tags={"slipway.dev/checkpoint": "/c/" + "p" * 100_000})
    progress, checkpoint = progress_from_run(run)
    assert progress is not None and checkpoint is not None
    assert len(progress["metrics"]) == 32 and progress["metricsOmitted"] == 100_001 - 32
    assert list(progress["metrics"])[:2] == ["m000000", "m000001"]  # by name: the same keys every pass
    assert len(json.dumps(progress)) < 2048 and len(checkpoint["path"]) == 1024


def test_metric_values_of_the_wrong_type_are_left_out():
    run = running_run(metrics={"loss": Metric("loss", "0.5x", 3), "acc": Metric("acc", None, "two"),  # type: ignore[arg-type]
                               "f1": Metric("f1", "0.75", 4)}, tags={})  # fmt: skip
    progress, _ = progress_from_run(run)
    assert progress == {"step": 4, "metrics": {"f1": 0.75}}


def test_a_job_is_looked_at_for_refused_pods_only_once_it_has_had_time_to_make_them():
    from slipway.status.jobs import FIRST_POD_GRACE_SECONDS, old_enough_for_pods

    made = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    job = {"metadata": {"creationTimestamp": "2026-01-01T12:00:00Z"}}
    assert not old_enough_for_pods(job, made)  # the pass that made it: no Events listed
    assert not old_enough_for_pods(job, made + timedelta(seconds=FIRST_POD_GRACE_SECONDS - 1))
    assert old_enough_for_pods(job, made + timedelta(seconds=FIRST_POD_GRACE_SECONDS))  # the 5 s recheck looks
    assert old_enough_for_pods({"metadata": {}}, made)  # age unknown: looked at
    # Made suspended (before its MLflow run) and resumed later: its age counts from the resume.
    resumed = made + timedelta(seconds=60)
    held = {**job, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert not old_enough_for_pods(held, resumed + timedelta(seconds=1))  # the Job controller has not seen it
    stamp = resumed.strftime("%Y-%m-%dT%H:%M:%SZ")
    going = {**job, "status": {"conditions": [{"type": "Suspended", "status": "False", "lastTransitionTime": stamp}]}}
    assert not old_enough_for_pods(going, resumed + timedelta(seconds=FIRST_POD_GRACE_SECONDS - 1))
    assert old_enough_for_pods(going, resumed + timedelta(seconds=FIRST_POD_GRACE_SECONDS))


def test_a_running_trainingrun_reads_its_mlflow_run_at_most_once_per_progress_poll():
    """Pods and Jobs wake a run's passes far more often than its progress needs reading."""
    from types import SimpleNamespace

    from slipway.training import runread

    class Client:
        def __init__(self) -> None:
            self.reads = 0

        def get_run(self, run_id: str) -> Run:
            self.reads += 1
            return Run(run_id, "1", "RUNNING", {}, {}, {})

    client = Client()
    config = SimpleNamespace(progress_poll_seconds=15)
    ctx = SimpleNamespace(status={"mlflow": {"runId": "r1"}}, memory={}, config=config)
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "command": ["train"]})
    results = [runread.mlflow_run(ctx, spec, client) for _ in range(20)]  # 20 passes within one poll
    assert client.reads == 1 and [cached for _, cached in results] == [False] + [True] * 19
    ctx.memory[runread.RUN_READ] = (ctx.memory[runread.RUN_READ][0], ctx.memory[runread.RUN_READ][1] - 16)
    run, cached = runread.mlflow_run(ctx, spec, client)  # a poll later: read again
    assert (client.reads, cached, run.run_id) == (2, False, "r1")
