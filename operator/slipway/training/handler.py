"""TrainingRun passes: woken by changes of the run, its Job, pods and ModelArtifact, and by a
progress timer while it trains; everything is recomputed from the cache and MLflow."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import Any, get_args

import kopf
from kubernetes.client.exceptions import ApiException

from slipway import kinds, kube, metrics, mlflowcreds
from slipway.builders.common import with_credentials
from slipway.mlflow import MlflowAnswerTooLarge, MlflowClient, MlflowUnavailable, http
from slipway.reconcile import MLFLOW_NOT_CONFIGURED, Context, run_pass
from slipway.redact import without_credentials
from slipway.status import jobs
from slipway.status.conditions import stalled
from slipway.tenancy import Use
from slipway.training import adopt as trainingadopt
from slipway.training import build, claim, kueue, mlflowrun, sizing
from slipway.training import cost as trainingcost
from slipway.training import queue as trainingqueue
from slipway.training.mlflowrun import RunSeen
from slipway.training.model import TrainingPhase, TrainingRunSpec, TrainingRunStatus
from slipway.training.state import (
    TrainingState,
    finished,
    queue_of,
    suspend_patch,
    training_state,
    with_attempts,
)

metrics.declare_phases("TrainingRun", get_args(TrainingPhase))


def reconcile(ctx: Context, spec: TrainingRunSpec) -> float | None:
    """Bring the run's children and status in line with its spec and what actually happened."""
    if finished(ctx.body):
        return None  # nothing changes any more: no I/O at rest
    runtime = _runtime(ctx, spec)
    index, name = _child_of(ctx, runtime)
    child = ctx.child(index, name)
    sizing_status, refusal = _sizing(ctx, spec, child is None)
    if refusal is not None and child is None:
        _write(ctx, training_state(spec, None, [], sizing_refusal=refusal), sizing=sizing_status)
        return None
    if ctx.mlflow is None:
        ctx.write(stalled("MlflowNotConfigured", MLFLOW_NOT_CONFIGURED))
        return None
    if _shows_finished(ctx, spec, ctx.mlflow, runtime, child, sizing_status) or (  # a predecessor's run finished it
        child is None and runtime == "JobSet" and _jobset_not_served(ctx)
    ):
        return None
    if (claim_wait := _ensure_pvc_and_service(ctx, spec, runtime)) is not None:
        return claim_wait  # a claim of that name is being deleted: no Job before its claim
    if child is None and ctx.status.get("completionTime"):
        return None  # the Job of a finished run was deleted (TTL, clean-up): never train again into a closed run
    uri = ctx.config.pod_mlflow_url or without_credentials(ctx.mlflow.tracking_uri)
    made_now = child is None
    if child is None:  # first the Job, suspended and gated; its MLflow run follows (build.RUN_GATE)
        child = _create_child(ctx, spec, runtime, index, uri)
        if not (ctx.status.get("mlflow") or {}).get("runId") and ctx.backlog() and sizing_status is None:
            # A sweep being applied: the other Jobs first. The Job's watch event wakes this run for its
            # status and MLflow run (the timer only if that event were lost), once the cache has it.
            return JOB_MADE_RECHECK_SECONDS
    members = [
        m
        for m in ctx.cache.owned_by("jobs", child["metadata"]["uid"])
        if runtime == "JobSet" and m["metadata"].get("namespace") == ctx.namespace
    ]
    pods = ctx.cache.select("pods", "run", ctx.namespace, ctx.name)
    run: RunSeen | None = None
    cached = False
    if not made_now or (ctx.status.get("mlflow") or {}).get("runId"):
        run, cached = _mlflow_run(ctx, spec, ctx.mlflow)
        link = build.MlflowLink(uri, run.run_id, run.experiment_id)
        child, members, pods = _release(ctx, spec, runtime, name, child, members, pods, link)
    job = jobs.jobset_as_job(child, members) if runtime == "JobSet" else child
    if run is not None:
        child, job = _suspend_as_spec(ctx, spec, runtime, name, child, members, job)
    artifact = _artifact(ctx, spec, job)
    artifact_name = artifact["metadata"]["name"] if artifact else None
    now = datetime.now(UTC)
    refused = _refused(ctx, job, members, pods, now)
    queue_name, queue, placed = trainingqueue.queue(ctx, spec, job)
    state = training_state(
        spec,
        job,
        pods,
        artifact_pending=spec.artifact is not None and artifact is None,
        artifact=artifact,
        now=now,
        stuck_grace_seconds=ctx.config.stuck_pod_grace_seconds,
        create_failure=refused,
        queue=queue,
        mlflow_pending=run is None,
    )
    spent = trainingcost.status_cost(ctx, pods, now)
    recorded: dict[str, Any] = {}
    if run is not None:
        state, recorded = _record_run(ctx, ctx.mlflow, run, cached, state, spent)
    _write(
        ctx,
        state,
        sizing=sizing_status,
        artifact_ref={"name": artifact_name} if artifact_name else None,
        cost=spent,
        queue=kueue.queue_status(queue_name, queue) if queue_name else None,
        runtime=runtime,
        **recorded,
    )
    if run is None:  # the MLflow run next: the Job's watch event wakes this run once the cache has the Job
        return JOB_MADE_RECHECK_SECONDS
    return _next_pass(ctx, state, placed)


def _child_of(ctx: Context, runtime: str) -> tuple[str, str]:
    """The cache index and name of the run's Job (or JobSet)."""
    return ("jobsets", build.jobset_name(ctx.name)) if runtime == "JobSet" else ("jobs", build.job_name(ctx.name))


def _shows_finished(
    ctx: Context,
    spec: TrainingRunSpec,
    mlflow: MlflowClient,
    runtime: str,
    child: dict[str, Any] | None,
    sizing: dict[str, Any] | None,
) -> bool:
    """Whether this TrainingRun's training finished in a predecessor's MLflow run
    (trainingadopt.finished_run): then that run is shown, with the ModelArtifact the spec asks for
    (which adopts its predecessor's version in turn); a Job of its own that is still gated (made
    while MLflow did not answer) is deleted: it never ran a pod."""
    run = trainingadopt.finished_run(ctx, spec, mlflow, child)
    if run is None:
        return False
    if trainingadopt.gated_own_job(ctx, child):
        assert child is not None
        kube.delete(ctx.kube, runtime, ctx.namespace, child["metadata"]["name"], uid=child["metadata"]["uid"])
    job = trainingadopt.completed_job(run)
    artifact = _artifact(ctx, spec, job)
    state = training_state(
        spec, job, [], artifact_pending=spec.artifact is not None and artifact is None, artifact=artifact
    )
    state, recorded = _record_run(ctx, mlflow, mlflowrun.seen(run, trainingcost.COST_METRICS), False, state, {})
    _write(ctx, state, sizing=sizing, artifact_ref={"name": ctx.name} if artifact else None, **recorded)
    return True


def _create_child(ctx: Context, spec: TrainingRunSpec, runtime: str, index: str, uri: str) -> dict[str, Any]:
    """The training Job (or JobSet), suspended and gated; its MLflow run follows (build.RUN_GATE)."""
    make = build.jobset if runtime == "JobSet" else build.job
    body = make(ctx.name, ctx.namespace, spec, uri, priority_class(ctx, spec))
    return ctx.ensure(index, with_credentials(body, mlflowcreds.of_pods(ctx)))


def _suspend_as_spec(
    ctx: Context,
    spec: TrainingRunSpec,
    runtime: str,
    name: str,
    child: dict[str, Any],
    members: list[dict[str, Any]],
    job: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The child (and the Job it stands for) suspended or resumed as spec.suspend says, if it is not yet."""
    patch = suspend_patch(spec, job)
    if patch is None:
        return child, job
    seen = child["metadata"]["resourceVersion"]  # a 409 if it changed since
    patch["metadata"] = {**patch.get("metadata", {}), "resourceVersion": seen}
    child = kube.patch(ctx.kube, runtime, ctx.namespace, name, patch)
    return child, jobs.jobset_as_job(child, members) if runtime == "JobSet" else child


def _refused(
    ctx: Context, job: dict[str, Any], members: list[dict[str, Any]], pods: list[dict[str, Any]], now: datetime
) -> str | None:
    """The API server's refusal of the pods of a Job that should have had pods by now (its FailedCreate Event)."""
    podless = not pods and jobs.should_have_pods(job) and jobs.old_enough_for_pods(job, now)
    refused = (
        next((m for j in (members or [job]) if (m := kube.creation_failure(ctx.kube, j))), None) if podless else None
    )
    return refused


def _jobset_not_served(ctx: Context) -> bool:
    """Whether the cluster serves no JobSets (then the run is Stalled, saying so)."""
    if kube.serves(ctx.kube, *JOBSET):
        return False
    group, version, plural = JOBSET
    message = (
        f"spec.runtime is JobSet, but the cluster serves no {group}/{version} {plural}: install JobSet, "
        "or set spec.runtime: Job (an Indexed Job)"
    )
    ctx.write(stalled("JobSetNotServed", message))
    return True


def _ensure_pvc_and_service(ctx: Context, spec: TrainingRunSpec, runtime: str) -> float | None:
    """The checkpoint PVC, and for a multi-node Job the headless Service (a JobSet makes its own);
    seconds to wait while a claim of that name is being deleted (training.claim.ensure)."""
    wait = claim.ensure(ctx, spec)  # the claim may outlive its TrainingRun (spec.checkpoint.whenDeleted)
    if wait is not None:
        return wait
    service = build.headless_service(ctx.name, ctx.namespace, spec) if runtime == "Job" else None  # JobSet makes it
    if service is not None:
        ctx.ensure("services", service)
    return None


def _record_run(
    ctx: Context, mlflow: MlflowClient, run: RunSeen, cached: bool, state: TrainingState, spent: dict[str, Any]
) -> tuple[TrainingState, dict[str, Any]]:
    """The run's MLflow run brought up to date (its cost logged, finished with the run), and what
    the state and status take from it."""
    recorded: dict[str, Any] = {}
    if cached and (state.succeeded or state.failed):
        run = _read_run(ctx, mlflow, run.run_id, run)  # the last word: what MLflow has now, not a poll's copy
    if state.succeeded or state.failed:
        trainingcost.log_cost(mlflow, run, spent, state.completion_time)
    run = _finish_mlflow_run(mlflow, run, state)
    recorded["progress"], recorded["last_checkpoint"] = run.progress, run.checkpoint
    state = with_attempts(state, run)
    readable = mlflowrun.read_condition(run, ctx.status.get("conditions"))
    state = dataclasses.replace(state, conditions=[*state.conditions, *readable])
    url = mlflow.run_url(run.experiment_id, run.run_id, ui_base=ctx.config.mlflow_public_url)
    recorded["mlflow"] = {"runId": run.run_id, "experimentId": run.experiment_id, "runUrl": url}
    return state, recorded


def _next_pass(ctx: Context, state: TrainingState, placed: bool) -> float | None:
    """When to look again. Progress lives in MLflow, which sends no events: while the run trains,
    time is the input; so it is for a stuck pod's grace period and a queue position."""
    delays = [
        d
        for d in (
            ctx.config.progress_poll_seconds if state.phase == "Running" else None,
            ctx.config.queue_position_seconds if placed else None,
            state.recheck_seconds,
        )
        if d is not None
    ]
    return max(1.0, min(delays)) if delays else None


JOBSET = (kinds.JOBSET.group, kinds.JOBSET.version, kinds.JOBSET.plural)
JOB_MADE_RECHECK_SECONDS = 1.0


def _runtime(ctx: Context, spec: TrainingRunSpec) -> str:
    """What runs the pods: as recorded in status, else what exists (a run made before
    spec.runtime), else spec.runtime, else JobSet for several nodes where the cluster serves it."""
    recorded = ctx.status.get("runtime")
    if recorded in ("Job", "JobSet"):
        return str(recorded)
    if ctx.child("jobs", build.job_name(ctx.name)) is not None:
        return "Job"
    if ctx.child("jobsets", build.jobset_name(ctx.name)) is not None:
        return "JobSet"  # made by a pass that wrote no status
    if spec.runtime is not None:
        return spec.runtime
    return "JobSet" if spec.nodes > 1 and kube.serves(ctx.kube, *JOBSET) else "Job"


def priority_class(ctx: Context, spec: TrainingRunSpec) -> str:
    """The training pods' PriorityClass, as the namespace allows (tenancy.Policy.priority_class)."""
    if spec.priority_class_name:
        return ctx.tenancy.priority_class(
            spec.priority_class_name, "spec.priorityClassName", ctx.config.training_priority_class
        )
    asked = spec.pod_template.priority_class_name if spec.pod_template else None
    return ctx.tenancy.priority_class(asked, "spec.podTemplate.priorityClassName", ctx.config.training_priority_class)


def models(spec: TrainingRunSpec) -> list[Use]:
    """The MLflow model and experiment this spec uses (checked against the namespace's allow-list)."""
    experiment = (
        Use("spec.mlflow.experiment", "experiment", spec.mlflow.experiment)
        if spec.mlflow.experiment
        else Use("spec.model.name (the default experiment)", "experiment", spec.model.name)
    )
    return [Use("spec.model.name", "model", spec.model.name), experiment]


PASS = (TrainingRunStatus, lambda ctx: run_pass(ctx, TrainingRunSpec, reconcile, models, needs_mlflow=False))


def _write(ctx: Context, state: TrainingState, **fields: Any) -> None:
    state = mlflowcreds.noted(ctx, state)  # a failed pod that had no MLflow credentials: say so
    ctx.write(
        state.conditions,
        phase=state.phase,
        restarts=state.restarts,
        start_time=state.start_time,
        completion_time=state.completion_time,
        **{k: v for k, v in fields.items() if v is not None},
    )


def _sizing(ctx: Context, spec: TrainingRunSpec, before_start: bool) -> tuple[dict[str, Any] | None, str | None]:
    """(status.sizing, refusal message). Nodes are read only before the Job exists."""
    if spec.sizing is None:
        return None, None
    stored = ctx.status.get("sizing") or {}
    memory: float | None = None
    if spec.sizing.gpu_memory_gib:
        memory = spec.sizing.gpu_memory_gib * sizing.GIB
    elif before_start:
        memory = sizing.gpu_memory_of_nodes(kube.list_nodes(ctx.kube), spec)
    elif stored.get("availableGib"):
        memory = stored["availableGib"] * sizing.GIB
    return sizing.sizing_status(spec, f"{ctx.namespace}/{ctx.name}", memory)


def _mlflow_run(ctx: Context, spec: TrainingRunSpec, client: MlflowClient) -> tuple[RunSeen, bool]:
    """The run of this TrainingRun: the one in status, else the one tagged with its uid, else the one
    a predecessor of the same name and spec left cut short (trainingadopt), else a new one; and
    whether it is the copy read less than a progress poll ago. A running TrainingRun is
    woken by its pods and Job far more often than its progress needs reading: MLflow is read at
    most once per progress poll (SLIPWAY_PROGRESS_POLL_SECONDS), whatever woke the pass. What is
    kept between passes is what a pass needs (mlflowrun.RunSeen), never the parsed run; a run too
    large to read is read again only every UNREADABLE_POLLS progress polls (MLflow builds its whole
    answer each time)."""
    known = (ctx.status.get("mlflow") or {}).get("runId")
    memory, now = ctx.memory, time.monotonic()
    if known:
        copy = memory.get(RUN_READ)
        before, read_at = copy if copy is not None and copy[0].run_id == known else (None, 0.0)
        poll = ctx.config.progress_poll_seconds * (UNREADABLE_POLLS if before and before.unreadable else 1)
        if before is not None and now - read_at < poll:
            return before, True
        run = _read_run(ctx, client, known, before)
    else:  # its own run, else one a predecessor of the same name and spec made (trainingadopt), else a new one
        tags = {trainingadopt.TRAININGRUN_TAG: f"{ctx.namespace}/{ctx.name}", "slipway.dev/model": spec.model.name}
        run = mlflowrun.seen(trainingadopt.run_for(ctx, spec, client, tags), trainingcost.COST_METRICS)
    memory[RUN_READ] = (run, now)
    return run, False


RUN_READ = "mlflow_run"  # ctx.memory: (mlflowrun.RunSeen as last read, time.monotonic() then)
UNREADABLE_POLLS = 10


def _read_run(ctx: Context, client: MlflowClient, run_id: str, before: RunSeen | None = None) -> RunSeen:
    """What a pass needs of the run ``run_id`` (recorded in status), read now; an unreadable one (its
    answer over the HTTP layer's limit) with the ids status recorded and the words for the condition.
    A run already found unreadable (``before``) stays so when MLflow does not answer in time: it
    takes longest to build the answers of the largest runs."""
    try:
        return mlflowrun.seen(client.get_run(run_id), trainingcost.COST_METRICS)
    except MlflowUnavailable:
        if before is not None and before.unreadable is not None:
            return before
        raise
    except MlflowAnswerTooLarge:
        experiment = str((ctx.status.get("mlflow") or {}).get("experimentId", ""))
        why = f"MLflow answers over {http.MAX_ANSWER_BYTES // 2**20} MiB for it"
        return mlflowrun.unreadable(run_id, experiment, why, f"{ctx.namespace}/{ctx.name}")


def _release(
    ctx: Context,
    spec: TrainingRunSpec,
    runtime: str,
    name: str,
    child: dict[str, Any],
    members: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    link: build.MlflowLink,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Give the run's pods their MLflow run and lift build.RUN_GATE: in the pod template while the
    Job (or JobSet, and its Jobs) is suspended and may change, resuming it unless Kueue or
    spec.suspend holds it; and on any pod made gated before that (Kueue admitted the Job first, a
    JobSet's Jobs keep the gates they were made with). Returns child, members and pods as now."""
    if build.gated(build.pod_template_of(child)) and child["spec"].get("suspend"):
        job = jobs.jobset_as_job(child, members) if runtime == "JobSet" else child
        resume = not spec.suspend and queue_of(spec, job) is None
        members = [_released_job(ctx, m, link) for m in members]
        # Started meanwhile (Kueue): the pods are released below; gone: the next pass sees it.
        child = _patched(ctx, runtime, name, build.release_patch(child, link, resume)) or child
    owners = {child["metadata"]["uid"], *(m["metadata"]["uid"] for m in members)}
    patched = {}
    for pod in build.pods_to_release(pods, owners, spec.nodes if runtime == "JobSet" else 1):
        released = _patched(ctx, "Pod", pod["metadata"]["name"], build.release(pod, link))
        if released is not None:  # else gone, or changed meanwhile: the next pass looks again
            patched[pod["metadata"]["name"]] = released
    return child, members, [patched.get(p["metadata"]["name"], p) for p in pods]


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


def _released_job(ctx: Context, job: dict[str, Any], link: build.MlflowLink) -> dict[str, Any]:
    """A JobSet's Job, released like its JobSet while it is suspended (JobSet adds the JobSet's
    gates to its Jobs' when it resumes them, and never removes one). One that started meanwhile
    keeps its gate: its pods are released one gang at a time."""
    if not (build.gated(build.pod_template_of(job)) and job["spec"].get("suspend")):
        return job
    patch = {"spec": {"template": build.release(build.pod_template_of(job), link)}}
    return _patched(ctx, "Job", job["metadata"]["name"], patch) or job


def _finish_mlflow_run(client: MlflowClient, run: RunSeen, state: TrainingState) -> RunSeen:
    """Close the run when the Job is done and the training code did not (the operator has the last word)."""
    if run.status == "RUNNING" and (state.succeeded or state.failed):
        status = "FINISHED" if state.succeeded else "FAILED"
        client.update_run(run.run_id, status=status)
        return dataclasses.replace(run, status=status)  # what the update changed; MLflow is not read again
    return run


def _artifact(ctx: Context, spec: TrainingRunSpec, job: dict[str, Any]) -> dict[str, Any] | None:
    """The run's ModelArtifact, created once the Job completed (its name is the run's name)."""
    if spec.artifact is None or not jobs.is_complete(job):
        return None
    return ctx.ensure("modelartifacts", build.model_artifact(ctx.name, ctx.namespace, spec))
