"""TrainingRun status from what is observed: its Job, its pods, the sizing check (pure)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slipway.clock import rfc3339
from slipway.mlflow.programtags import ATTEMPTS, CHECKPOINT, CHECKPOINT_STEP
from slipway.status.conditions import Cond, held, parse_time, ready, reconciling, settled, stalled
from slipway.status.jobs import job_condition
from slipway.status.pods import (
    FAILED_CREATE_RECHECK_SECONDS,
    NO_PODS_RECHECK_SECONDS,
    missing_default_class,
    problem_pod,
)
from slipway.training import kueue
from slipway.training.model import TrainingRunSpec

TRAINED = "Trained"
_EXIT_CODE = re.compile(r"exit code (\d+)")

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class TrainingState:
    """The computed status of a TrainingRun."""

    phase: str
    conditions: list[Cond]
    restarts: int = 0
    start_time: str | None = None
    completion_time: str | None = None
    failed: bool = False
    succeeded: bool = False
    recheck_seconds: float | None = None  # time is the input: look again then (a stuck pod's grace)


def _running_pods(pods: Sequence[Obj]) -> int:
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


def _failure(job: Obj, spec: TrainingRunSpec) -> tuple[str, str]:
    """(reason, message) of a failed Job, in the words of the TrainingRun."""
    cond = job_condition(job, "Failed") or {}
    reason, message = cond.get("reason") or "Failed", cond.get("message") or ""
    if reason == "PodFailurePolicy":
        code = _EXIT_CODE.search(message)
        number = int(code.group(1)) if code else None
        if number is not None and number in spec.failure_policy.permanent_exit_codes:
            return "PermanentExitCode", (
                f"the trainer exited with code {number}, listed in spec.failurePolicy.permanentExitCodes; "
                "fix the cause and create a new run"
            )
        return "NonRetryableExitCode", (
            f"the trainer exited with code {number}, which is not in spec.failurePolicy.retryableExitCodes; "
            "fix the cause and create a new run"
        )
    if reason == "BackoffLimitExceeded":
        return reason, (
            f"pods failed more than spec.failurePolicy.maxRestarts={spec.failure_policy.max_restarts} times; "
            "see the pods' logs"
        )
    if reason == "DeadlineExceeded":
        return reason, (
            f"the run exceeded spec.failurePolicy.activeDeadlineSeconds={spec.failure_policy.active_deadline_seconds}"
        )
    return reason, message or "the training Job failed"


def _state(phase: str, summary: str, reason: str, message: str, trained: bool = False, **kw: Any) -> TrainingState:
    """A state whose summary conditions (ready / reconciling / stalled) and Trained agree."""
    summary_conds = {"ready": ready, "reconciling": reconciling, "stalled": stalled, "held": held}[summary](
        reason, message
    )
    trained_cond = Cond(TRAINED, "True" if trained else "False", reason, message)
    return TrainingState(phase, [*summary_conds, trained_cond], **kw)


QUOTA_RECHECK_SECONDS = 30.0  # a run its queue's quota can never hold: in case an admin raises it


def training_state(
    spec: TrainingRunSpec,
    job: Obj | None,
    pods: Sequence[Obj],
    sizing_refusal: str | None = None,
    artifact_pending: bool = False,
    artifact: Obj | None = None,
    now: datetime | None = None,
    stuck_grace_seconds: float | None = None,
    create_failure: str | None = None,
    queue: kueue.QueueView | None = None,
    mlflow_pending: bool = False,
    default_priority_class: str = "",
) -> TrainingState:
    """Phase and conditions of a TrainingRun from its children.

    ``artifact_pending``: the run succeeded and its ModelArtifact is still to be created;
    ``artifact``: that ModelArtifact as observed. Ready waits for its verdict, and a Rejected or
    Failed artifact makes the run Stalled: what it trained is not usable. A pod that cannot run
    (bad image, missing Secret, crash loop) is Reconciling for ``stuck_grace_seconds`` after it
    was created, then Stalled. A Job without pods whose pods the API server refuses
    (``create_failure``, its FailedCreate Event) is Stalled with the API server's words (and the
    operator's setting when the class it gave the pods, ``default_priority_class``, is missing); while it
    has no pods and no such Event, the pass looks again in NO_PODS_RECHECK_SECONDS. ``queue``:
    what Kueue says of the Job (its Workload), for a Job in a Kueue queue. ``mlflow_pending``: the
    Job exists, suspended, and its MLflow run is still to be created.
    """
    if sizing_refusal is not None and job is None:
        return _state("Failed", "stalled", "InsufficientGPUMemory", sizing_refusal, failed=True)
    if job is None:
        return _state("Pending", "reconciling", "Creating", "creating the training Job")
    status = job.get("status") or {}
    restarts = int(status.get("failed") or 0)
    kw: dict[str, Any] = {
        "restarts": restarts,
        "start_time": status.get("startTime"),
        "completion_time": status.get("completionTime"),
    }
    if job_condition(job, "Complete"):
        if artifact_pending:
            return _state(
                "Succeeded",
                "reconciling",
                "CreatingArtifact",
                "training finished; creating the ModelArtifact",
                trained=True,
                succeeded=True,
                **kw,
            )
        if artifact is not None:
            return _artifact_outcome(artifact, **kw)
        return _state("Succeeded", "ready", "Succeeded", "training finished", trained=True, succeeded=True, **kw)
    if job_condition(job, "Failed"):
        reason, message = _failure(job, spec)
        return _state("Failed", "stalled", reason, message, failed=True, **kw)
    if (job.get("spec") or {}).get("suspend"):
        return _suspended(spec, job, queue, mlflow_pending, kw)
    if not pods:
        return _no_pods(create_failure, default_priority_class, queue, kw)
    return _with_pods(spec, pods, restarts, now, stuck_grace_seconds, queue, kw)


def _suspended(
    spec: TrainingRunSpec, job: Obj, queue: kueue.QueueView | None, mlflow_pending: bool, kw: dict[str, Any]
) -> TrainingState:
    """A suspended Job: by spec.suspend, until its MLflow run exists, or queued in Kueue."""
    if spec.suspend:
        message = "spec.suspend is true: pods stopped, checkpoint kept; set it to false to resume"
        return _state("Suspended", "held", "Suspended", message, **kw)
    if mlflow_pending and queue_of(spec, job) is None:
        message = "the training Job is created; its pods start once its MLflow run is created"
        return _state("Pending", "reconciling", "CreatingMlflowRun", message, **kw)
    if queue is not None and queue.exceeds and not queue.admitted:
        return _state(
            "Pending", "stalled", "ExceedsQueueQuota", queue.exceeds, recheck_seconds=QUOTA_RECHECK_SECONDS, **kw
        )
    reason, message = kueue.queued(queue_of(spec, job) or "", queue)
    return _state("Pending", "reconciling", reason, message, **kw)


def _no_pods(
    create_failure: str | None, default_class: str, queue: kueue.QueueView | None, kw: dict[str, Any]
) -> TrainingState:
    """A running Job without pods: refused by the API server, or starting them."""
    if create_failure is not None:
        fix = missing_default_class(create_failure, default_class, "training_priority_class") or (
            "fix spec.podTemplate (or the namespace's quota or policy)"
        )
        message = f"the API server refuses the training pods: {create_failure}; {fix} and the Job creates them"
        return _state(
            "Pending", "stalled", "FailedCreate", message, recheck_seconds=FAILED_CREATE_RECHECK_SECONDS, **kw
        )
    if queue is not None and queue.admitted:
        return _state("Pending", "reconciling", *kueue.admitted(queue), recheck_seconds=NO_PODS_RECHECK_SECONDS, **kw)
    return _state(
        "Pending",
        "reconciling",
        "Starting",
        "waiting for the training pods to start",
        recheck_seconds=NO_PODS_RECHECK_SECONDS,
        **kw,
    )


def _with_pods(
    spec: TrainingRunSpec,
    pods: Sequence[Obj],
    restarts: int,
    now: datetime | None,
    stuck_grace_seconds: float | None,
    queue: kueue.QueueView | None,
    kw: dict[str, Any],
) -> TrainingState:
    """A running Job with pods: a pod that cannot run (stuck past the grace: Stalled), else training."""
    running = _running_pods(pods)
    found = problem_pod(pods)
    if found is not None:
        pod, (reason, message) = found
        phase = "Running" if running else "Pending"
        age = _age_seconds(pod, now)
        if stuck_grace_seconds is None or age is None or reason in ("Unschedulable", "SchedulingGated"):
            return _state(phase, "reconciling", reason, message, **kw)  # the scheduler may yet find room
        if age >= stuck_grace_seconds:
            message = f"{message}; stuck for {age:.0f}s (over {stuck_grace_seconds:.0f}s): fix it and the pod goes on"
            return _state(phase, "stalled", reason, message, **kw)
        return _state(phase, "reconciling", reason, message, recheck_seconds=stuck_grace_seconds - age, **kw)
    if running:
        message = f"{running}/{spec.nodes} pods running" + (f", {restarts} restarts" if restarts else "")
        return _state("Running", "reconciling", "Training", message, **kw)
    if pods and all((p.get("status") or {}).get("phase") == "Succeeded" for p in pods):
        return _state(
            "Running", "reconciling", "Training", "the training pods finished; waiting for the Job to complete", **kw
        )
    if queue is not None and queue.admitted:
        return _state("Pending", "reconciling", *kueue.admitted(queue), **kw)
    return _state("Pending", "reconciling", "Starting", "waiting for the training pods to start", **kw)


def _artifact_outcome(artifact: Obj, **kw: Any) -> TrainingState:
    """A finished run whose ModelArtifact decides whether what it trained can be served."""
    name = artifact["metadata"]["name"]
    status = artifact.get("status") or {}
    phase = status.get("phase")
    said = next((c.get("message") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "") or ""
    if phase == "Validated":
        version = status.get("quantizedVersion") or status.get("modelVersion")
        message = f"training finished; ModelArtifact {name} validated" + (f" (version {version})" if version else "")
        return _state("Succeeded", "ready", "Succeeded", message, trained=True, succeeded=True, **kw)
    if phase in ("Rejected", "Failed"):
        message = f"training finished, but ModelArtifact {name} is {phase}: {said or phase}"
        return _state("Succeeded", "stalled", f"Artifact{phase}", message, trained=True, succeeded=True, **kw)
    message = f"training finished; ModelArtifact {name} is {phase or 'starting'}" + (f": {said}" if said else "")
    return _state("Succeeded", "reconciling", "ArtifactInProgress", message, trained=True, succeeded=True, **kw)


def _age_seconds(pod: Obj, now: datetime | None) -> float | None:
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    return None if now is None or created is None else max(0.0, (now - created).total_seconds())


PROGRESS_KEYS = {"step", "totalSteps", "checkpointStep"}


def with_attempts(state: TrainingState, run: Any) -> TrainingState:
    """``state`` whose restarts also count the starts the training code recorded (tag
    ``slipway.dev/attempts``, the number of starts): a pod preempted for a serving pod is replaced
    by the Job without counting as failed (its podFailurePolicy ignores DisruptionTarget), yet
    the run restarted."""
    attempts = _count(ATTEMPTS.read(run.tags))
    if attempts is None or attempts - 1 <= state.restarts:
        return state
    return dataclasses.replace(state, restarts=attempts - 1)


def progress_from_run(run: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(status.progress, status.lastCheckpoint) from an MLflow run.

    The contract with training code: log metric ``step`` each step and
    ``totalSteps`` once; after each checkpoint set tags ``slipway.dev/checkpoint``
    (its path) and ``slipway.dev/checkpoint-step`` (the names before them,
    ``slipway.checkpoint`` and ``slipway.checkpoint.step``, are still read). Any
    other metric shows as latest.
    """
    metrics = run.metrics
    progress: dict[str, Any] = {}
    if "step" in metrics and _count(metrics["step"].value) is not None:
        progress["step"] = _count(metrics["step"].value)
    elif metrics:
        progress["step"] = max((_count(m.step) or 0) for m in metrics.values())
    if "totalSteps" in metrics and _count(metrics["totalSteps"].value) is not None:
        progress["totalSteps"] = _count(metrics["totalSteps"].value)
    shown = sorted(k for k, m in metrics.items() if k not in PROGRESS_KEYS and _finite(m.value))
    if shown:  # bounded: a run with 100k metric keys must not outgrow the object (etcd's limit)
        progress["metrics"] = {k[:MAX_KEY]: round(float(metrics[k].value), 6) for k in shown[:MAX_PROGRESS_METRICS]}
    if len(shown) > MAX_PROGRESS_METRICS:
        progress["metricsOmitted"] = len(shown) - MAX_PROGRESS_METRICS
    checkpoint: dict[str, Any] = {}
    step = _count(CHECKPOINT_STEP.read(run.tags))
    if step is not None:
        checkpoint["step"] = step
    path = CHECKPOINT.read(run.tags)
    if path is not None:
        checkpoint["path"] = str(path)[:MAX_PATH]
    if "checkpointStep" in metrics and metrics["checkpointStep"].timestamp:
        ts = datetime.fromtimestamp(metrics["checkpointStep"].timestamp / 1000, UTC)
        checkpoint["time"] = rfc3339(ts)
    return progress or None, checkpoint or None


# What status keeps of a run, whatever the training code logged.
MAX_PROGRESS_METRICS = 32
MAX_KEY = 250  # MLflow's own limit on a metric key
MAX_PATH = 1024


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _count(value: Any) -> int | None:
    """A step count written by training code: ``12``, ``12.0`` or ``"12"``; None for anything else
    (a bad value is left out of status, never an error that stops the run's reconciliation)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number >= 0 else None


USER_SUSPENDED = "slipway.dev/suspended-by-spec"


def queue_of(spec: TrainingRunSpec, job: Obj | None) -> str | None:
    """The Kueue LocalQueue the run's Job is in: spec.queueName, or the one Kueue's webhook gave a
    Job created without it (the namespace's default LocalQueue)."""
    if spec.queue_name:
        return spec.queue_name
    return ((job or {}).get("metadata") or {}).get("labels", {}).get(kueue.QUEUE_LABEL) or None


def suspend_patch(spec: TrainingRunSpec, job: Obj) -> dict[str, Any] | None:
    """The Job patch that makes it follow ``spec.suspend``, or None. A Job that Kueue holds (in a
    LocalQueue: spec.queueName or the namespace's default) is only resumed if Slipway suspended it."""
    if job_condition(job, "Complete") or job_condition(job, "Failed"):
        return None
    suspended = bool(job["spec"].get("suspend"))
    ours = (job["metadata"].get("annotations") or {}).get(USER_SUSPENDED) == "true"
    if spec.suspend and not suspended:
        return {"metadata": {"annotations": {USER_SUSPENDED: "true"}}, "spec": {"suspend": True}}
    if not spec.suspend and suspended and (ours or queue_of(spec, job) is None):
        return {"metadata": {"annotations": {USER_SUSPENDED: None}}, "spec": {"suspend": False}}
    return None


def finished(body: Mapping[str, Any]) -> bool:
    """Succeeded (with its artifact) or Failed, at the current generation: nothing changes any more."""
    status = body.get("status") or {}
    artifact_done = not (body.get("spec") or {}).get("artifact") or status.get("artifactRef")
    return settled(body, ("Failed", "Succeeded") if artifact_done else ("Failed",))
