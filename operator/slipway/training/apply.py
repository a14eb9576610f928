"""What a TrainingRun pass writes, as its decisions (``training.decide``) say: the checkpoint claim,
the headless Service and the Job (or JobSet), the Job's release to its MLflow run and its
``spec.suspend`` patch, the ModelArtifact, the MLflow run's cost and end, and the status."""

from __future__ import annotations

import dataclasses
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from slipway import kube, mlflowcreds
from slipway.podspec import with_credentials, with_mlflow_tls
from slipway.reconcile import Context
from slipway.training import build, claim
from slipway.training import cost as trainingcost
from slipway.training.model import TrainingRunSpec
from slipway.training.observe import pod_tracking_uri
from slipway.training.records import Children, Opening, Outcome, Release, Seen, child_of
from slipway.training.state import TrainingState


def stop(ctx: Context, opening: Opening, sizing: dict[str, Any] | None) -> None:
    """A run refused (its status, with status.sizing) or stalled (its conditions)."""
    if opening.state is not None:
        write(ctx, opening.state, {"sizing": sizing})
    else:
        ctx.write(opening.conditions)


def delete_child(ctx: Context, runtime: str, child: dict[str, Any] | None) -> None:
    """The run's own Job (or JobSet) that never ran a pod, deleted (only that very object)."""
    assert child is not None
    kube.delete(ctx.kube, runtime, ctx.namespace, child["metadata"]["name"], uid=child["metadata"]["uid"])


def claim_and_service(ctx: Context, spec: TrainingRunSpec, runtime: str) -> float | None:
    """The checkpoint PVC, and for a multi-node Job the headless Service (a JobSet makes its own);
    seconds to wait while a claim of that name is being deleted (training.claim.ensure)."""
    wait = claim.ensure(ctx, spec)  # the claim may outlive its TrainingRun (spec.checkpoint.whenDeleted)
    if wait is not None:
        return wait
    service = build.headless_service(ctx.name, ctx.namespace, spec) if runtime == "Job" else None
    if service is not None:
        ctx.ensure("services", service)
    return None


def create_child(ctx: Context, spec: TrainingRunSpec, runtime: str) -> dict[str, Any]:
    """The training Job (or JobSet), suspended and gated; its MLflow run follows (training.gate)."""
    make = build.jobset if runtime == "JobSet" else build.job
    body = make(ctx.name, ctx.namespace, spec, pod_tracking_uri(ctx), priority_class(ctx, spec))
    index, _ = child_of(ctx.name, runtime)
    body = with_mlflow_tls(with_credentials(body, mlflowcreds.of_pods(ctx)), ctx.config.pod_mlflow_tls)
    return ctx.ensure(index, body)


def priority_class(ctx: Context, spec: TrainingRunSpec) -> str:
    """The training pods' PriorityClass, as the namespace allows (tenancy.Policy.priority_class); and
    their RuntimeClass checked as it allows."""
    ctx.tenancy.check_runtime_class(
        spec.pod_template.runtime_class_name if spec.pod_template else None, "spec.podTemplate.runtimeClassName"
    )
    if spec.priority_class_name:
        return ctx.tenancy.priority_class(
            spec.priority_class_name, "spec.priorityClassName", ctx.config.training_priority_class
        )
    asked = spec.pod_template.priority_class_name if spec.pod_template else None
    return ctx.tenancy.priority_class(asked, "spec.podTemplate.priorityClassName", ctx.config.training_priority_class)


def release(ctx: Context, found: Children, decided: Release) -> Children:
    """The release patches applied, in order; returns the children as they now are. One the API
    server refuses (a Job started meanwhile, a pod whose gates changed) or that is gone stays as it
    was read: the next pass looks again."""
    jobs = dict(decided.members)
    members = [
        (_patched(ctx, "Job", m["metadata"]["name"], jobs[m["metadata"]["name"]]) or m)
        if m["metadata"]["name"] in jobs
        else m
        for m in found.members
    ]
    child = found.child
    if decided.child is not None:
        child = _patched(ctx, found.runtime, child["metadata"]["name"], decided.child) or child
    patched = {}
    for name, patch in decided.pods:
        released = _patched(ctx, "Pod", name, patch)
        if released is not None:
            patched[name] = released
    pods = [patched.get(p["metadata"]["name"], p) for p in found.pods]
    return dataclasses.replace(found, child=child, members=members, pods=pods)


def _patched(ctx: Context, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
    """The object after a merge patch; None if it is gone (404) or the API server refuses the change
    (422: a Job that started meanwhile, a pod whose gates changed since it was read)."""
    try:
        return kube.patch(ctx.kube, kind, ctx.namespace, name, patch)
    except kopf.PermanentError:
        return None
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None


def follow_suspend(ctx: Context, found: Children, patch: dict[str, Any] | None) -> Children:
    """The child suspended or resumed as spec.suspend says (decide.suspend), if it is not yet."""
    if patch is None:
        return found
    child = kube.patch(ctx.kube, found.runtime, ctx.namespace, found.child["metadata"]["name"], patch)
    return dataclasses.replace(found, child=child)


def artifact(ctx: Context, desired: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's ModelArtifact made (or kept) as decided; returns it as it now is."""
    return ctx.ensure("modelartifacts", desired) if desired is not None else None


def outcome(ctx: Context, seen: Seen, decided: Outcome) -> None:
    """The MLflow run brought up to date (a finished run's cost logged, its end set), then the status."""
    run = seen.run
    if run is not None:
        assert ctx.mlflow is not None
        if decided.log_cost:
            trainingcost.log_cost(ctx.mlflow, run, seen.cost or {}, decided.state.completion_time)
        if decided.close_run is not None:
            ctx.mlflow.update_run(run.run_id, status=decided.close_run)
    write(ctx, decided.state, decided.fields)


def write(ctx: Context, state: TrainingState, fields: dict[str, Any]) -> None:
    """The status: the state's phase, conditions, restarts and times, and ``fields`` that are not None."""
    state = mlflowcreds.noted(ctx, state)  # a failed pod that had no MLflow credentials: say so
    ctx.write(
        state.conditions,
        phase=state.phase,
        restarts=state.restarts,
        start_time=state.start_time,
        completion_time=state.completion_time,
        **{k: v for k, v in fields.items() if v is not None},
    )
