"""Reading a Job's outcome (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slipway.status.conditions import parse_time

# The Job controller makes a Job's first pods within a second or two: a Job is looked at for refused
# pods (its FailedCreate Events, one API list) only once it is this old, never in the pass that made it.
FIRST_POD_GRACE_SECONDS = 3.0


def job_condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The Job's condition of ``type_`` if it is True."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return cond  # type: ignore[no-any-return]
    return None


def is_complete(job: Mapping[str, Any] | None) -> bool:
    return job is not None and job_condition(job, "Complete") is not None


def failure(job: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The Failed condition of a Job that failed, else None."""
    return None if job is None else job_condition(job, "Failed")


def should_have_pods(job: Mapping[str, Any]) -> bool:
    """A Job that should have pods: neither finished nor suspended."""
    finished = job_condition(job, "Complete") or job_condition(job, "Failed")
    return not finished and not (job.get("spec") or {}).get("suspend")


def old_enough_for_pods(job: Mapping[str, Any], now: datetime, grace: float = FIRST_POD_GRACE_SECONDS) -> bool:
    """The Job has existed, or run since it was last resumed, ``grace`` seconds (or its age is
    unknown): missing pods may be refused ones. A Job resumed a moment ago, which the Job controller
    has not seen yet (its Suspended condition still True), is not."""
    suspended = next(
        (c for c in (job.get("status") or {}).get("conditions") or [] if c.get("type") == "Suspended"), None
    )
    if suspended is not None and suspended.get("status") == "True":
        return False
    created = (job.get("metadata") or {}).get("creationTimestamp")
    since = parse_time((suspended or {}).get("lastTransitionTime") or created)
    return since is None or (now - since).total_seconds() >= grace


def starting(job: Mapping[str, Any]) -> bool:
    """A Job running pods none of which is ready yet: one may be stuck before it starts."""
    status = job.get("status") or {}
    return bool(status.get("active")) and not status.get("ready") and not is_complete(job) and not failure(job)


def without_pods(job: Mapping[str, Any]) -> bool:
    """A Job that should have pods and, by its status, never had one."""
    status = job.get("status") or {}
    counts = ("active", "ready", "succeeded", "failed", "terminating")
    return should_have_pods(job) and not any(status.get(c) for c in counts)


# A JobSet's Failed reasons, in the words of a Job's (which the TrainingRun's status explains).
JOBSET_FAILURES = {"ReachedMaxRestarts": "BackoffLimitExceeded"}


def jobset_as_job(jobset: Mapping[str, Any], children: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A JobSet seen as one Job: suspended, Complete or Failed as the JobSet is, its group
    restarts as the Job's failures, started when its first Job started. A JobSet failed by its
    failure policy (a permanent exit code) reports the failed Job's own reason and message, which
    name the exit code."""
    status = jobset.get("status") or {}
    conditions = []
    completed = job_condition(jobset, "Completed")
    if completed:
        conditions.append(
            {"type": "Complete", "status": "True", "lastTransitionTime": completed.get("lastTransitionTime")}
        )
    failed = job_condition(jobset, "Failed")
    if failed:
        reason = JOBSET_FAILURES.get(str(failed.get("reason")), str(failed.get("reason") or "Failed"))
        message = str(failed.get("message") or "")
        if reason != "BackoffLimitExceeded":
            for child in children:
                cond = job_condition(child, "Failed")
                if cond is not None and cond.get("reason") == "PodFailurePolicy":
                    reason, message = "PodFailurePolicy", str(cond.get("message") or "")
        conditions.append({"type": "Failed", "status": "True", "reason": reason, "message": message})
    starts = sorted(str(s) for c in children if (s := (c.get("status") or {}).get("startTime")))
    return {
        "metadata": dict(jobset.get("metadata") or {}),
        "spec": {"suspend": bool((jobset.get("spec") or {}).get("suspend"))},
        "status": {
            "conditions": conditions,
            "failed": int(status.get("restarts") or 0),
            "startTime": starts[0] if starts else None,
            "completionTime": completed.get("lastTransitionTime") if completed else None,
        },
    }
