"""Why a pod cannot run, in words a user can act on; shared by the kinds whose children run pods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slipway import settings

Obj = Mapping[str, Any]

WAITING_PROBLEMS = {
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "NoCommand",
}


# The kubelet's words when a pod that must run as non-root (every pod Slipway builds) has an image
# whose USER is root or a name, and what to set.
ROOT_IMAGE_FIX = (
    "the image's USER is root, and Slipway's pods run as non-root (the restricted Pod Security Standard): "
    "set spec.podTemplate.securityContext.runAsUser (and runAsGroup, fsGroup) to a non-root id, with a "
    "writable HOME (docs/how-to/root-images.md)"
)
NAMED_USER_FIX = (
    "the image's USER is a name the kubelet cannot check: set spec.podTemplate.securityContext.runAsUser to "
    "its numeric id (docs/how-to/root-images.md)"
)


def with_fix(message: str) -> str:
    """``message`` (the kubelet's), and what to set when it refused an image for its user."""
    if "runAsNonRoot and image will run as root" in message:
        return f"{message}; {ROOT_IMAGE_FIX}"
    if "runAsNonRoot and image has non-numeric user" in message:
        return f"{message}; {NAMED_USER_FIX}"
    return message


def pod_problem(pods: Sequence[Obj]) -> tuple[str, str] | None:
    """The first reason a pod cannot run that a user can act on: (reason, message)."""
    found = problem_pod(pods)
    return found[1] if found else None


def problem_pod(pods: Sequence[Obj]) -> tuple[Obj, tuple[str, str]] | None:
    for pod in pods:
        problem = _problem_of(pod)
        if problem is not None:
            return pod, problem
    return None


def _problem_of(pod: Obj) -> tuple[str, str] | None:
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reason = cond.get("reason") or "Unschedulable"
            return reason, f"pod {name}: {cond.get('message') or reason}"
    for cs in status.get("initContainerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in WAITING_PROBLEMS:
            # What the init container said last (e.g. fetch-model's digest mismatch), else the wait.
            said = (((cs.get("lastState") or {}).get("terminated") or {}).get("message") or "").strip()
            detail = said.splitlines()[-1][-300:] if said else waiting.get("message") or waiting["reason"]
            return waiting["reason"], f"pod {name}: init container {cs.get('name')}: {with_fix(detail)}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in WAITING_PROBLEMS:
            return waiting["reason"], f"pod {name}: {with_fix(waiting.get('message') or waiting['reason'])}"
    return None


def missing_default_class(refusal: str, default: str, setting: str) -> str | None:
    """When the API server refuses pods for want of the PriorityClass the operator gave them by
    default (``default``, the value of ``setting``; "" when the spec named a class): what to do,
    naming the setting, since the spec never named that class; else None."""
    if not default or f"no PriorityClass with name {default} was found" not in refusal:
        return None
    where = settings.named(setting)
    return (
        f"{default} is the operator's default PriorityClass ({where}), not one the spec names: a cluster admin "
        f"creates it (manifests/priorityclasses.yaml, or the chart's priorityClasses.create) or sets {where} to "
        "an existing class, or to empty for none"
    )


# A Job with no pods is looked at again this often (its FailedCreate Events send the operator no
# watch event); a refused one, in case the namespace's quota or policy changes.
NO_PODS_RECHECK_SECONDS = 5.0
FAILED_CREATE_RECHECK_SECONDS = 30.0
