"""What Kueue says of a TrainingRun's Job (its Workload), in the run's status."""

from __future__ import annotations

from typing import Any

from slipway.training import kueue
from slipway.training.model import TrainingRunSpec
from slipway.training.state import queue_of, suspend_patch, training_state

SPEC = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "queueName": "gpus"})
JOB_UID = "job-uid-1"


def job(suspend: bool, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "r-train", "uid": JOB_UID, "labels": labels or {}}, "spec": {"suspend": suspend},
            "status": {}}  # fmt: skip


def workload(*conditions: tuple[str, str, str, str], evictions: int = 0, owner: str = JOB_UID) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": "2026-12-03T10:00:00Z"}
            for t, s, r, m in conditions
        ]
    }
    if any(t == "Admitted" and s == "True" for t, s, _, _ in conditions):
        status["admission"] = {"clusterQueue": "team-gpus"}
    if evictions:
        status["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": evictions}]}
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "r-train", "uid": owner, "controller": True}
    return {"metadata": {"name": "job-r-train-1a2b3", "ownerReferences": [ref]}, "status": status}


PENDING = ("QuotaReserved", "False", "Pending",
           "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, "
           "2 more needed")  # fmt: skip
ADMITTED = ("Admitted", "True", "Admitted", "The workload is admitted")
PREEMPTED = ("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x) due to prioritization")


def reason(state) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    ready = next(c for c in state.conditions if c.type == "Ready")
    return ready.reason, ready.message


def test_a_queued_run_names_its_workload_and_kueues_reason() -> None:
    seen = kueue.workload_of(job(True), [workload(PENDING)])
    state = training_state(SPEC, job(True), [], queue=seen)
    why, message = reason(state)
    assert (state.phase, why) == ("Pending", "Queued")
    assert "Workload job-r-train-1a2b3 (LocalQueue gpus)" in message
    assert "insufficient unused quota for nvidia.com/gpu" in message
    assert kueue.queue_status("gpus", seen) == {"localQueue": "gpus", "workload": "job-r-train-1a2b3",
                                               "admitted": False}  # fmt: skip


def test_no_workload_yet_says_to_check_kueue() -> None:
    state = training_state(SPEC, job(True), [], queue=None)
    assert reason(state)[0] == "Queued"
    assert "check that Kueue runs" in reason(state)[1]
    assert kueue.workload_of(job(True), [workload(PENDING, owner="another-job")]) is None


def test_admitted_until_the_pods_run() -> None:
    seen = kueue.workload_of(job(False), [workload(ADMITTED)])
    assert seen is not None and seen.admitted
    starting = training_state(SPEC, job(False), [], queue=seen)
    assert reason(starting) == ("Admitted", "Kueue admitted Workload job-r-train-1a2b3 in ClusterQueue team-gpus; "
                                "waiting for the training pods to start")  # fmt: skip
    pending_pod = {"metadata": {"name": "p"}, "status": {"phase": "Pending"}}
    assert reason(training_state(SPEC, job(False), [pending_pod], queue=seen))[0] == "Admitted"
    finished_pod = {"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}
    finishing = training_state(SPEC, job(False), [finished_pod], queue=seen)
    assert (finishing.phase, reason(finishing)[0]) == ("Running", "Training")  # not "waiting for pods to start"
    running_pod = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert training_state(SPEC, job(False), [running_pod], queue=seen).phase == "Running"
    status = kueue.queue_status("gpus", seen)
    assert status["clusterQueue"] == "team-gpus" and status["admittedAt"] == "2026-12-03T10:00:00Z"


def test_preempted_by_kueue_is_its_own_reason_and_counts_evictions_not_restarts() -> None:
    seen = kueue.workload_of(job(True), [workload(PREEMPTED, PENDING, evictions=2)])
    state = training_state(SPEC, job(True), [], queue=seen)
    why, message = reason(state)
    assert (state.phase, why, state.restarts) == ("Pending", "PreemptedByKueue", 0)
    assert "resumes from its checkpoint" in message and "maxRestarts" in message
    assert kueue.queue_status("gpus", seen)["evictions"] == 2
    # Admitted again: the eviction is history.
    again = kueue.workload_of(job(False), [workload(PREEMPTED, ADMITTED, evictions=2)])
    assert again is not None and again.evicted is None
    other = kueue.workload_of(job(True), [workload(("Evicted", "True", "PodsReadyTimeout", "pods not ready"))])
    assert reason(training_state(SPEC, job(True), [], queue=other))[0] == "EvictedByKueue"


def test_a_job_kueue_defaulted_into_a_queue_is_left_for_kueue_to_admit() -> None:
    """No spec.queueName, but the namespace's default LocalQueue: Kueue's webhook labelled and
    suspended the Job; Slipway must not resume it."""
    plain = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    defaulted = job(True, {kueue.QUEUE_LABEL: "default"})
    assert queue_of(plain, defaulted) == "default"
    assert suspend_patch(plain, defaulted) is None
    assert queue_of(plain, job(True)) is None
    assert suspend_patch(plain, job(True)) == {"metadata": {"annotations": {"slipway.dev/suspended-by-spec": None}},
                                              "spec": {"suspend": False}}  # fmt: skip


def test_a_jobset_reads_as_one_job() -> None:
    from slipway.status.jobs import jobset_as_job

    meta = {"name": "r-train", "uid": "js-1", "labels": {kueue.QUEUE_LABEL: "gpus"}}
    running = {"metadata": meta, "spec": {"suspend": False}, "status": {"restarts": 1, "conditions": []}}
    members = [{"status": {"startTime": "2026-12-03T10:00:05Z"}}, {"status": {"startTime": "2026-12-03T10:00:04Z"}}]
    view = jobset_as_job(running, members)
    assert view["status"]["failed"] == 1  # group restarts read as the Job's failures
    assert view["status"]["startTime"] == "2026-12-03T10:00:04Z"
    assert view["metadata"]["uid"] == "js-1" and queue_of(SPEC, view) == "gpus"
    done = {**running, "status": {"conditions": [{"type": "Completed", "status": "True",
                                                  "lastTransitionTime": "2026-12-03T10:05:00Z"}]}}  # fmt: skip
    finished = training_state(SPEC, jobset_as_job(done, members), [])
    assert (finished.phase, finished.completion_time) == ("Succeeded", "2026-12-03T10:05:00Z")
    exhausted = {**running, "status": {"restarts": 3, "conditions": [{"type": "Failed", "status": "True",
                                                                       "reason": "ReachedMaxRestarts"}]}}  # fmt: skip
    state = training_state(SPEC, jobset_as_job(exhausted, members), [])
    assert (state.phase, reason(state)[0]) == ("Failed", "BackoffLimitExceeded")
    permanent = {**running, "status": {"conditions": [{"type": "Failed", "status": "True",
                                                       "reason": "FailJobSetFailurePolicyAction"}]}}  # fmt: skip
    said = "Container trainer for pod ns/p failed with exit code 3 matching FailJob rule at index 1"
    failed_member = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
                                                "message": said}]}}  # fmt: skip
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i",
                                           "failurePolicy": {"permanentExitCodes": [3]}})  # fmt: skip
    state = training_state(spec, jobset_as_job(permanent, [failed_member]), [])
    assert reason(state)[0] == "PermanentExitCode" and "code 3" in reason(state)[1]


def test_a_workloads_words_are_quoted_bounded() -> None:
    """Anyone who may write Workloads in the namespace writes their messages: a 32 KiB one must not
    reach the run's status (or its Events) whole."""
    huge = ("QuotaReserved", "False", "Pending", "x" * 32768)
    seen = kueue.workload_of(job(True), [workload(huge)])
    assert seen is not None and seen.waiting is not None
    assert len(seen.waiting) == kueue.MAX_QUOTE
    message = reason(training_state(SPEC, job(True), [], queue=seen))[1]
    assert len(message) < kueue.MAX_QUOTE + 200
    evicted = kueue.workload_of(job(True), [workload(("Evicted", "True", "Preempted", "y" * 32768))])
    assert evicted is not None and evicted.evicted is not None and len(evicted.evicted[1]) == kueue.MAX_QUOTE
