"""Reading a Job's outcome (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


def without_pods(job: Mapping[str, Any]) -> bool:
    """A Job that should have pods and, by its status, never had one."""
    status = job.get("status") or {}
    counts = ("active", "ready", "succeeded", "failed", "terminating")
    return should_have_pods(job) and not any(status.get(c) for c in counts)
