"""The TrainingRun pass's decisions (pure): the opening (refused, stalled, a predecessor's run
shown, the Job made or re-made), the Job's release to its MLflow run, spec.suspend, the
ModelArtifact, and the status with what the MLflow run gets and when to look again."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slipway.config import OperatorConfig
from slipway.status.pods import FAILED_CREATE_RECHECK_SECONDS, NO_PODS_RECHECK_SECONDS
from slipway.training import build, decide, gate, kueue
from slipway.training.adopt import completed_job
from slipway.training.mlflowrun import RunSeen
from slipway.training.model import TrainingRunSpec
from slipway.training.records import Children, Finished, Seen, Start
from slipway.training.state import QUOTA_RECHECK_SECONDS, USER_SUSPENDED

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CONFIG = OperatorConfig()  # progress poll 15 s, queue position 60 s, stuck pod grace 300 s
LINK = gate.MlflowLink("http://mlflow:5000", "r1", "9")
RECORDED = {"mlflow": {"runId": "r1", "experimentId": "9"}}


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def spec(**fields: Any) -> TrainingRunSpec:
    return TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "command": ["train"], **fields})


class MakeJob:
    """A training Job as the cache holds it, built up like Kueue's ``MakeWorkload(...).Obj()``."""

    def __init__(self, name: str = "r-train", uid: str = "job-1", kind: str = "Job") -> None:
        self.body: dict[str, Any] = {
            "apiVersion": "batch/v1",
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": "team-a",
                "uid": uid,
                "resourceVersion": "7",
                "creationTimestamp": iso(NOW - timedelta(hours=1)),
                "labels": {},
                "annotations": {},
            },
            "spec": {"suspend": False, "template": {"metadata": {}, "spec": {"containers": [{"name": "trainer"}]}}},
            "status": {},
        }

    def suspended(self, by_slipway: bool = False) -> MakeJob:
        self.body["spec"]["suspend"] = True
        if by_slipway:
            self.body["metadata"]["annotations"][USER_SUSPENDED] = "true"
        return self

    def gated(self) -> MakeJob:
        self.body["spec"]["template"]["spec"]["schedulingGates"] = [{"name": gate.RUN_GATE}]
        return self

    def queued(self, queue: str = "gpus") -> MakeJob:
        self.body["metadata"]["labels"][build.QUEUE_LABEL] = queue
        return self

    def started(self, restarts: int = 0) -> MakeJob:
        self.body["status"].update(startTime=iso(NOW - timedelta(minutes=30)), failed=restarts)
        return self

    def complete(self) -> MakeJob:
        self.body["status"]["completionTime"] = iso(NOW)
        self.body["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
        return self

    def failed(self, reason: str, message: str = "") -> MakeJob:
        self.body["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": reason, "message": message}]
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self.body)


def pod(name: str, phase: str = "Running", owner: str = "job-1", gated: bool = False, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingGates": [{"name": gate.RUN_GATE}]} if gated else {}
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": iso(NOW - timedelta(minutes=10)),
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "spec": spec,
        "status": {"phase": phase, **status},
    }


def run(status: str = "RUNNING", **kw: Any) -> RunSeen:
    return RunSeen("r1", "9", status, **kw)


def workload(*conditions: tuple[str, str], owner: str = "job-1") -> dict[str, Any]:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "r-train", "uid": owner, "controller": True}
    status = {"conditions": [{"type": t, "status": s, "message": f"{t} {s}"} for t, s in conditions]}
    return {"metadata": {"name": "job-r-train-1a2b3", "ownerReferences": [ref]}, "status": status}


# -- the opening --------------------------------------------------------------------------------

LOOKED = {"looked_up": True}
JOB = MakeJob().started().obj()
CLOSED = {"phase": "Succeeded", "completionTime": iso(NOW), **RECORDED}
PREDECESSOR = Finished(run("FINISHED"), {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, "u")


@pytest.mark.parametrize(
    ("case", "status", "seen", "action", "reason", "requeue"),
    [
        ("first pass: the Job is made", {}, Start("Job", None, **LOOKED), "Create", None, None),
        ("first pass asks MLflow first", {}, Start("Job", None), "LookUp", None, None),
        (
            "a sweep being applied: the other Jobs first",
            {},
            Start("Job", None, backlog=True, **LOOKED),
            "Create",
            None,
            decide.JOB_MADE_RECHECK_SECONDS,
        ),
        (
            "a sweep, a run recorded: no pause",
            RECORDED,
            Start("Job", None, backlog=True, **LOOKED),
            "Create",
            None,
            None,
        ),
        (
            "a sweep, sized: no pause",
            {},
            Start("Job", None, sizing={"fits": True}, backlog=True, **LOOKED),
            "Create",
            None,
            None,
        ),
        (
            "the Job deleted while it trained: made again",
            {"phase": "Running", **RECORDED},
            Start("Job", None, **LOOKED),
            "Create",
            None,
            None,
        ),
        ("the Job of a finished run deleted: never again", CLOSED, Start("Job", None, **LOOKED), "Closed", None, None),
        ("the Job there: on to its progress", RECORDED, Start("Job", JOB, **LOOKED), "Continue", None, None),
        (
            "refused: too little GPU memory",
            {},
            Start("Job", None, refusal="needs ~62 GiB"),
            "Refuse",
            "InsufficientGPUMemory",
            None,
        ),
        (
            "a refusal after the Job started stops nothing",
            {},
            Start("Job", JOB, refusal="x", **LOOKED),
            "Continue",
            None,
            None,
        ),
        ("refused: no MLflow address", {}, Start("Job", None, mlflow=False), "Stall", "MlflowNotConfigured", None),
        (
            "refused: JobSet not served",
            {},
            Start("JobSet", None, jobset_served=False, **LOOKED),
            "Stall",
            "JobSetNotServed",
            None,
        ),
        ("JobSet served: made", {}, Start("JobSet", None, jobset_served=True, **LOOKED), "Create", None, None),
        (
            "a predecessor's run finished it: shown",
            {},
            Start("Job", None, finished=PREDECESSOR, **LOOKED),
            "ShowFinished",
            None,
            None,
        ),
    ],
)
def test_the_opening(case, status, seen, action, reason, requeue):
    opening = decide.opening(spec(), status, seen)
    assert (opening.action, opening.requeue) == (action, requeue), case
    said = opening.state.conditions if opening.state is not None else opening.conditions
    assert (next((c.reason for c in said if c.type == "Ready"), None)) == reason, case
    if action == "Refuse":
        assert opening.state is not None and opening.state.phase == "Failed" and opening.state.failed


def test_a_gated_job_of_its_own_goes_when_a_predecessors_run_is_shown_and_the_messages_name_the_fix():
    seen = Start("Job", MakeJob().suspended().gated().obj(), finished=PREDECESSOR, gated_own_child=True, **LOOKED)
    assert decide.opening(spec(), {}, seen).delete_child
    stall = decide.opening(spec(), {}, Start("JobSet", None, jobset_served=False, **LOOKED))
    [stalled] = [c for c in stall.conditions if c.type == "Stalled"]
    assert "serves no jobset.x-k8s.io/v1alpha2 jobsets: install JobSet, or set spec.runtime: Job" in stalled.message


# -- the release --------------------------------------------------------------------------------


def children(
    child: dict[str, Any],
    pods: Sequence[dict[str, Any]] = (),
    members: Sequence[dict[str, Any]] = (),
    runtime: str = "Job",
) -> Children:
    return Children(runtime, child, list(members), list(pods), run(), link=LINK)


@pytest.mark.parametrize(
    ("case", "the_spec", "child", "pods", "resume", "released_pods"),
    [
        ("gated, suspended, no queue: released and resumed", spec(), MakeJob().suspended().gated(), [], True, []),
        ("held by Kueue: released, Kueue resumes it", spec(), MakeJob().suspended().gated().queued(), [], False, []),
        (
            "held by spec.suspend: released, kept suspended",
            spec(suspend=True),
            MakeJob().suspended().gated(),
            [],
            False,
            [],
        ),
        (
            "admitted first: its gated pods released",
            spec(),
            MakeJob().gated(),
            [pod("p0", "Pending", gated=True)],
            None,
            ["p0"],
        ),
        ("nothing gated: nothing to do", spec(), MakeJob().started(), [pod("p0")], None, []),
    ],
)
def test_the_release(case, the_spec, child, pods, resume, released_pods):
    decided = decide.release(the_spec, children(child.obj(), pods))
    if resume is None:
        assert decided.child is None, case
    else:
        assert decided.child is not None and decided.child["spec"].get("suspend") is (False if resume else None), case
        template = decided.child["spec"]["template"]
        assert template["spec"]["schedulingGates"] is None and template["metadata"]["annotations"] == LINK.annotations()
    assert [name for name, _ in decided.pods] == released_pods, case


def test_a_jobsets_jobs_are_released_with_it_and_its_pods_one_gang_at_a_time():
    jobset = MakeJob("r", "js-1", kind="JobSet").suspended().gated().obj()
    jobset["spec"] = {"suspend": True, "replicatedJobs": [{"name": "workers", "template": {"spec": jobset["spec"]}}]}
    held = MakeJob("r-workers-0", "j-0").suspended().gated().obj()
    running = MakeJob("r-workers-1", "j-1").gated().obj()  # started meanwhile: keeps its gate
    half_gang = [pod("a0", "Pending", owner="j-1", gated=True)]
    decided = decide.release(spec(nodes=2, runtime="JobSet"), children(jobset, half_gang, [held, running], "JobSet"))
    assert [name for name, _ in decided.members] == ["r-workers-0"] and decided.child is not None
    assert decided.pods == []  # one of two pods: the gang starts together
    whole = [*half_gang, pod("a1", "Pending", owner="j-1", gated=True)]
    decided = decide.release(spec(nodes=2, runtime="JobSet"), children(jobset, whole, [held, running], "JobSet"))
    assert [name for name, _ in decided.pods] == ["a0", "a1"]


@pytest.mark.parametrize(
    ("case", "the_spec", "job", "wanted"),
    [
        ("spec.suspend set: suspended, noted", spec(suspend=True), MakeJob().started(), True),
        ("spec.suspend unset: resumed", spec(), MakeJob().suspended(by_slipway=True).queued(), False),
        ("held by Kueue, not by Slipway: left to Kueue", spec(), MakeJob().suspended().queued(), None),
        ("finished: never patched", spec(suspend=True), MakeJob().complete(), None),
    ],
)
def test_spec_suspend(case, the_spec, job, wanted):
    patch = decide.suspend(the_spec, children(job.obj()))
    if wanted is None:
        assert patch is None, case
    else:
        assert patch is not None and patch["spec"]["suspend"] is wanted, case
        assert patch["metadata"]["resourceVersion"] == "7"  # a 409 if the Job changed since it was read


def test_the_artifact_is_made_once_the_job_completed_and_only_if_the_spec_asks():
    asks = spec(artifact={"aliases": ["candidate"]})
    made = decide.artifact(asks, "r", "team-a", MakeJob().complete().obj())
    assert (
        made is not None
        and made["metadata"]["name"] == "r"
        and made["spec"]["source"]["trainingRunRef"] == {"name": "r"}
    )
    assert decide.artifact(asks, "r", "team-a", MakeJob().started().obj()) is None
    assert decide.artifact(spec(), "r", "team-a", MakeJob().complete().obj()) is None


# -- the status ---------------------------------------------------------------------------------

ARTIFACT = spec(artifact={"aliases": ["candidate"]})
PENDING = kueue.workload_of(MakeJob().obj(), [workload(("QuotaReserved", "False"))])
TOO_BIG = dataclasses.replace(PENDING, exceeds="spec.resources.gpus (8) is over ClusterQueue team-gpus's 4")
ADMITTED = kueue.workload_of(MakeJob().obj(), [workload(("QuotaReserved", "True"), ("Admitted", "True"))])
STUCK = pod(
    "p0",
    "Pending",
    containerStatuses=[
        {"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}
    ],
)
STUCK["metadata"]["creationTimestamp"] = iso(NOW - timedelta(minutes=6))


def seen(
    job: MakeJob | dict[str, Any], pods: Sequence[dict[str, Any]] = (), the_run: RunSeen | None = None, **kw: Any
) -> Seen:
    body = job.obj() if isinstance(job, MakeJob) else job
    return Seen(body, list(pods), kw.pop("artifact", None), the_run, "http://mlflow/#/r1", NOW, **kw)


def validated(name: str = "r") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": "Validated", "modelVersion": "3"}}


@pytest.mark.parametrize(
    ("case", "the_spec", "observed", "phase", "reason", "close", "requeue"),
    [
        (
            "the Job made, its MLflow run next",
            spec(),
            seen(MakeJob().suspended().gated()),
            "Pending",
            "CreatingMlflowRun",
            None,
            decide.JOB_MADE_RECHECK_SECONDS,
        ),
        (
            "suspended by spec.suspend",
            spec(suspend=True),
            seen(MakeJob().suspended(True), the_run=run()),
            "Suspended",
            "Suspended",
            None,
            None,
        ),
        (
            "queued by Kueue",
            spec(),
            seen(MakeJob().suspended().queued(), the_run=run(), queue_name="gpus", queue=PENDING),
            "Pending",
            "Queued",
            None,
            None,
        ),
        (
            "queued, its place known: looked at again",
            spec(),
            seen(MakeJob().suspended().queued(), the_run=run(), queue_name="gpus", queue=PENDING, placed=True),
            "Pending",
            "Queued",
            None,
            CONFIG.queue_position_seconds,
        ),
        (
            "refused: more GPUs than the queue's quota can ever hold",
            spec(queueName="gpus"),
            seen(MakeJob().suspended().queued(), the_run=run(), queue_name="gpus", queue=TOO_BIG),
            "Pending",
            "ExceedsQueueQuota",
            None,
            QUOTA_RECHECK_SECONDS,
        ),
        (
            "admitted, no pods yet",
            spec(),
            seen(MakeJob().queued(), the_run=run(), queue_name="gpus", queue=ADMITTED),
            "Pending",
            "Admitted",
            None,
            NO_PODS_RECHECK_SECONDS,
        ),
        (
            "its pods refused by the API server",
            spec(),
            seen(MakeJob(), the_run=run(), refused='pods "p" is forbidden: violates PodSecurity'),
            "Pending",
            "FailedCreate",
            None,
            FAILED_CREATE_RECHECK_SECONDS,
        ),
        (
            "running: progress read every poll",
            spec(nodes=2),
            seen(MakeJob().started(), [pod("p0"), pod("p1")], run(progress={"step": 40, "totalSteps": 100})),
            "Running",
            "Training",
            None,
            CONFIG.progress_poll_seconds,
        ),
        (
            "a pod failed, retries left: the next attempt runs",
            spec(),
            seen(MakeJob().started(restarts=1), [pod("p1")], run()),
            "Running",
            "Training",
            None,
            CONFIG.progress_poll_seconds,
        ),
        (
            "a pod stuck past the grace",
            spec(),
            seen(MakeJob().started(), [STUCK], run()),
            "Pending",
            "ImagePullBackOff",
            None,
            None,
        ),
        (
            "failed, no retries left: the run closed FAILED",
            spec(),
            seen(MakeJob().started(restarts=4).failed("BackoffLimitExceeded"), [], run()),
            "Failed",
            "BackoffLimitExceeded",
            "FAILED",
            None,
        ),
        (
            "failed on an exit code not listed as retryable",
            spec(failurePolicy={"retryableExitCodes": [137]}),
            seen(MakeJob().failed("PodFailurePolicy", "container trainer exit code 1"), [], run()),
            "Failed",
            "NonRetryableExitCode",
            "FAILED",
            None,
        ),
        (
            "failed on a permanent exit code",
            spec(failurePolicy={"permanentExitCodes": [3]}),
            seen(MakeJob().failed("PodFailurePolicy", "container trainer exit code 3"), [], run()),
            "Failed",
            "PermanentExitCode",
            "FAILED",
            None,
        ),
        (
            "succeeded: the run closed FINISHED",
            spec(),
            seen(MakeJob().complete(), [], run()),
            "Succeeded",
            "Succeeded",
            "FINISHED",
            None,
        ),
        (
            "succeeded, the trainer closed its run",
            spec(),
            seen(MakeJob().complete(), [], run("FINISHED")),
            "Succeeded",
            "Succeeded",
            None,
            None,
        ),
        (
            "succeeded: the ModelArtifact next",
            ARTIFACT,
            seen(MakeJob().complete(), [], run()),
            "Succeeded",
            "CreatingArtifact",
            "FINISHED",
            None,
        ),
        (
            "succeeded, its ModelArtifact validated",
            ARTIFACT,
            seen(MakeJob().complete(), [], run("FINISHED"), artifact=validated()),
            "Succeeded",
            "Succeeded",
            None,
            None,
        ),
        (
            "a predecessor's finished run shown",
            ARTIFACT,
            Seen(PREDECESSOR.job, [], validated(), run("FINISHED"), "u"),
            "Succeeded",
            "Succeeded",
            None,
            None,
        ),
    ],
)
def test_the_status(case, the_spec, observed, phase, reason, close, requeue):
    decided = decide.outcome(the_spec, RECORDED, observed, CONFIG)
    ready = next(c for c in decided.state.conditions if c.type == "Ready")
    assert (decided.state.phase, ready.reason, decided.close_run, decided.requeue) == (phase, reason, close, requeue), (
        case
    )
    assert decided.log_cost == (phase in ("Succeeded", "Failed") and observed.run is not None), case


def test_what_the_status_takes_from_the_run_and_the_children():
    observed = seen(
        MakeJob().started().queued(),
        [pod("p0")],
        run(progress={"step": 40}, checkpoint={"step": 30}, tags={"slipway.dev/attempts": "3"}),
        queue_name="gpus",
        queue=ADMITTED,
        sizing={"fits": True},
        cost={"gpuHours": 1.0},
        runtime="Job",
    )
    decided = decide.outcome(spec(), RECORDED, observed, CONFIG)
    assert decided.state.restarts == 2  # three starts recorded by the trainer: a preempted pod restarted it
    fields = decided.fields
    assert fields["progress"] == {"step": 40} and fields["last_checkpoint"] == {"step": 30}
    assert fields["mlflow"] == {"runId": "r1", "experimentId": "9", "runUrl": "http://mlflow/#/r1"}
    assert fields["queue"]["localQueue"] == "gpus" and fields["queue"]["admitted"] is True
    assert (fields["sizing"], fields["cost"], fields["runtime"], fields["artifact_ref"]) == (
        {"fits": True},
        {"gpuHours": 1.0},
        "Job",
        None,
    )
    made = decide.outcome(spec(), {}, seen(MakeJob().suspended().gated()), CONFIG)
    assert "mlflow" not in made.fields and "progress" not in made.fields and not made.log_cost


def test_an_unreadable_run_says_so_and_is_never_closed_by_the_operator():
    unreadable = RunSeen("r1", "9", "", unreadable="MLflow run r1 is too large to read")
    decided = decide.outcome(spec(), RECORDED, seen(MakeJob().complete(), [], unreadable), CONFIG)
    read = next(c for c in decided.state.conditions if c.type == "MlflowRunRead")
    assert (read.status, read.reason, decided.close_run, decided.state.phase) == (
        "False",
        "MlflowRunTooLarge",
        None,
        "Succeeded",
    )


def test_a_predecessors_completed_job_carries_the_runs_times():
    from slipway.mlflow import Run

    finished = Run("r0", "9", "", "FINISHED", "", start_time=1_700_000_000_000, end_time=1_700_000_360_000)
    job = completed_job(finished)
    decided = decide.outcome(spec(), {}, Seen(job, [], None, run("FINISHED"), "u"), CONFIG)
    assert decided.state.start_time and decided.state.completion_time and decided.requeue is None
