"""The TrainingRun pass's decisions (pure): from the spec, the status as stored and what a step of
the pass observed (``training.records``), what to make, patch or write, the next status and when
to look again. Nothing here reads or writes anything; ``training.handler`` observes, decides and
applies, step by step."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slipway import kinds
from slipway.reconcile import MLFLOW_NOT_CONFIGURED
from slipway.status import jobs
from slipway.status.conditions import stalled
from slipway.training import build, gate, kueue, mlflowrun
from slipway.training.model import TrainingRunSpec
from slipway.training.records import Children, Opening, Outcome, Release, Seen, Start
from slipway.training.state import TrainingState, queue_of, suspend_patch, training_state, with_attempts

if TYPE_CHECKING:
    from slipway.config import OperatorConfig

# A Job made while others wait for their first pass (a sweep being applied): the other Jobs first.
# The Job's watch event wakes the run for its status and MLflow run once the cache has it (this
# timer only if that event were lost).
JOB_MADE_RECHECK_SECONDS = 1.0


def opening(spec: TrainingRunSpec, status: Mapping[str, Any], seen: Start) -> Opening:
    """What a pass does first, before it reads the Job's progress."""
    if seen.refusal is not None and seen.child is None:
        return Opening("Refuse", state=training_state(spec, None, [], sizing_refusal=seen.refusal))
    if not seen.mlflow:
        return Opening("Stall", conditions=stalled("MlflowNotConfigured", MLFLOW_NOT_CONFIGURED))
    if not seen.looked_up:
        return Opening("LookUp")
    if seen.finished is not None:  # a predecessor's run finished the training
        return Opening("ShowFinished", delete_child=seen.gated_own_child)
    if seen.child is None and seen.runtime == "JobSet" and seen.jobset_served is False:
        return Opening("Stall", conditions=stalled("JobSetNotServed", jobset_not_served()))
    if seen.child is None and status.get("completionTime"):
        return Opening("Closed")  # the Job of a finished run was deleted (TTL, clean-up): never train again into it
    if seen.child is None:  # first the Job, suspended and gated; its MLflow run follows (gate.RUN_GATE)
        sweep = not (status.get("mlflow") or {}).get("runId") and seen.backlog and seen.sizing is None
        return Opening("Create", requeue=JOB_MADE_RECHECK_SECONDS if sweep else None)
    return Opening("Continue")


def jobset_not_served() -> str:
    jobset = kinds.JOBSET
    return (
        f"spec.runtime is JobSet, but the cluster serves no {jobset.group}/{jobset.version} {jobset.plural}: "
        "install JobSet, or set spec.runtime: Job (an Indexed Job)"
    )


def release(spec: TrainingRunSpec, children: Children) -> Release:
    """Give the run's pods their MLflow run and lift gate.RUN_GATE: in the pod template while the
    Job (or JobSet, and its Jobs) is suspended and may change, resuming it unless Kueue or
    spec.suspend holds it; and on any pod made gated before that (Kueue admitted the Job first, a
    JobSet's Jobs keep the gates they were made with)."""
    child, members, link = children.child, children.members, children.link
    assert link is not None
    released: list[tuple[str, dict[str, Any]]] = []
    child_patch = None
    if gate.gated(gate.pod_template_of(child)) and child["spec"].get("suspend"):
        resume = not spec.suspend and queue_of(spec, children.job) is None
        # A JobSet's Jobs, released like it while suspended (JobSet adds the JobSet's gates to its
        # Jobs' when it resumes them, and never removes one). One that started meanwhile keeps its
        # gate: its pods are released one gang at a time.
        held = [m for m in members if gate.gated(gate.pod_template_of(m)) and m["spec"].get("suspend")]
        released = [
            (m["metadata"]["name"], {"spec": {"template": gate.release(gate.pod_template_of(m), link)}}) for m in held
        ]
        child_patch = gate.release_patch(child, link, resume)
    owners = {child["metadata"]["uid"], *(m["metadata"]["uid"] for m in members)}  # no patch changes a uid
    gang = spec.nodes if children.runtime == "JobSet" else 1
    pods = [(p["metadata"]["name"], gate.release(p, link)) for p in gate.pods_to_release(children.pods, owners, gang)]
    return Release(released, child_patch, pods)


def suspend(spec: TrainingRunSpec, children: Children) -> dict[str, Any] | None:
    """The child's patch that suspends or resumes it as spec.suspend says, if it does not yet; a 409
    if the child changed since it was read."""
    patch = suspend_patch(spec, children.job)
    if patch is None:
        return None
    seen = children.child["metadata"]["resourceVersion"]
    return {**patch, "metadata": {**patch.get("metadata", {}), "resourceVersion": seen}}


def artifact(spec: TrainingRunSpec, name: str, namespace: str, job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's ModelArtifact, made once the Job completed (named as the run)."""
    if spec.artifact is None or not jobs.is_complete(job):
        return None
    return build.model_artifact(name, namespace, spec)


def asked_priority_class(spec: TrainingRunSpec) -> str | None:
    """The PriorityClass the spec names (spec.priorityClassName, else its podTemplate's), if any: without
    one the pods get the operator's default."""
    return spec.priority_class_name or (spec.pod_template.priority_class_name if spec.pod_template else None)


def outcome(spec: TrainingRunSpec, status: Mapping[str, Any], seen: Seen, config: OperatorConfig) -> Outcome:
    """The run's next status from its Job, pods, ModelArtifact, queue and MLflow run; what the MLflow
    run gets first (a finished run's cost, its end: the operator has the last word when the training
    code did not close it); and when to look again."""
    state = training_state(
        spec,
        seen.job,
        seen.pods,
        artifact_pending=spec.artifact is not None and seen.artifact is None,
        artifact=seen.artifact,
        now=seen.now,
        stuck_grace_seconds=config.stuck_pod_grace_seconds,
        create_failure=seen.refused,
        queue=seen.queue,
        mlflow_pending=seen.run is None,
        default_priority_class="" if asked_priority_class(spec) else config.training_priority_class,
    )
    fields: dict[str, Any] = {
        "sizing": seen.sizing,
        "artifact_ref": {"name": seen.artifact["metadata"]["name"]} if seen.artifact else None,
        "cost": seen.cost,
        "queue": kueue.queue_status(seen.queue_name, seen.queue) if seen.queue_name else None,
        "runtime": seen.runtime,
    }
    if seen.run is None:  # the MLflow run next: the Job's watch event wakes this run once the cache has the Job
        return Outcome(state, fields, requeue=JOB_MADE_RECHECK_SECONDS)
    run, done = seen.run, state.succeeded or state.failed
    close = ("FINISHED" if state.succeeded else "FAILED") if run.status == "RUNNING" and done else None
    state = with_attempts(state, run)
    readable = mlflowrun.read_condition(run, status.get("conditions"))
    state = dataclasses.replace(state, conditions=[*state.conditions, *readable])
    fields.update(
        progress=run.progress,
        last_checkpoint=run.checkpoint,
        mlflow={"runId": run.run_id, "experimentId": run.experiment_id, "runUrl": seen.run_url},
    )
    return Outcome(state, fields, close_run=close, log_cost=done, requeue=next_pass(config, state, seen.placed))


def next_pass(config: OperatorConfig, state: TrainingState, placed: bool) -> float | None:
    """When to look again. Progress lives in MLflow, which sends no events: while the run trains,
    time is the input; so it is for a stuck pod's grace period and a queue position."""
    delays = [
        d
        for d in (
            config.progress_poll_seconds if state.phase == "Running" else None,
            config.queue_position_seconds if placed else None,
            state.recheck_seconds,
        )
        if d is not None
    ]
    return max(1.0, min(delays)) if delays else None
