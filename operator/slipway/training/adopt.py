"""A TrainingRun deleted and applied again from the same YAML (Argo CD after a prune or a restore; a
Velero restore with its status stripped and a new uid) adopts the MLflow run its predecessor made,
instead of training again: runs carry the MLflow tag ``slipway.dev/work`` (:func:`work_of`), looked
up, in the TrainingRun's own experiment only, when the TrainingRun has no run of its own.

- a FINISHED run: the TrainingRun shows it (Succeeded, its progress and checkpoint, its
  ModelArtifact if the spec asks for one) and makes no Job, JobSet, Workload nor run (with MLflow
  not answering, its Job comes first, gated, and is deleted, never having run a pod, once the run
  is found);
- a run cut short (RUNNING, FAILED or KILLED, with a checkpoint recorded): the new Job reports to
  that run, as a pod that replaces a lost one does, and the trainer resumes from the newest
  checkpoint in the checkpoint volume when the claim is still there: kept, with no owner, by
  ``spec.checkpoint.whenDeleted: Retain``, or restored (Velero restores it with no ownerReference),
  it is adopted by the TrainingRun of the same name (``training.claim``); under ``Delete`` (when
  unset) it went with the TrainingRun that owned it, and training starts again from step 1 in that run;
- a run still RUNNING that never recorded a checkpoint (its TrainingRun, or its namespace, was deleted
  before its pods ran, e.g. while the operator was down): the new Job reports to that run, from step 1,
  so no second run is made and none is left RUNNING;
- anything else (no such run, a spec that differs, runs made before work keys): a new run, as before.

Where the allow-list applies, only a run carrying Slipway's proof for this namespace/name and work key
is adopted (slipway.mlflow.proof): the tags a trainer can read, copied onto a planted run, are not enough.

Every step is a lookup, so a pass that crashes at any line finds the same run next time."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from slipway import kube, reasons
from slipway.clock import rfc3339
from slipway.mlflow import Guard, MlflowClient, MlflowUnavailable, Run, tag_filter
from slipway.mlflow.programtags import CHECKPOINT_STEP
from slipway.mlflow.records import UID_TAG, WORK_TAG, work_key
from slipway.mlflow.tags import TRAININGRUN
from slipway.reconcile import Context
from slipway.training import gate
from slipway.training.model import TrainingRunSpec

# The spec fields that define the work, as the API spells them: what is trained (model, image,
# command, args, env, podTemplate.env and envFrom), on what (podTemplate.volumes and volumeMounts:
# the data), with which hyperparameters (args, env) and at which scale (nodes, resources.gpus:
# the world size), and where it is recorded (mlflow.experiment). Not counted, because they change
# nothing about the result: where and when it runs (nodeSelector, tolerations, priorityClassName,
# queueName, runtime, podTemplate's labels, annotations, nodeSelector, tolerations, affinity and
# priorityClassName, resources.cpu, memory and gpuResourceName), how failures and pauses are handled
# (failurePolicy, suspend), the checkpoint volume's size and class, sizing (an estimate) and artifact
# (what happens after training: its ModelArtifact has a work key of its own).
# What defines the work. Where a pod runs and beside what (podTemplate.runtimeClassName,
# topologySpreadConstraints, shmSize, sidecars, resources.extendedResources) does not: a run moved
# to other nodes, or given RDMA devices, resumes its checkpoints.
WORK_FIELDS = (
    "model",
    "image",
    "command",
    "args",
    "env",
    "nodes",
    "resources.gpus",
    "mlflow.experiment",
    "podTemplate.env",
    "podTemplate.envFrom",
    "podTemplate.volumes",
    "podTemplate.volumeMounts",
)
TRAININGRUN_TAG = TRAININGRUN.name  # namespace/name of the TrainingRun that made the run
CHECKPOINT_STEP_TAG = CHECKPOINT_STEP.name  # set by the trainer with each checkpoint


def work_of(namespace: str, name: str, spec: TrainingRunSpec) -> str:
    """The work key of a TrainingRun: its namespace, name and the :data:`WORK_FIELDS` of its spec
    (defaults filled in, so ``nodes: 1`` written or left out is the same work)."""
    written = spec.to_dict()
    picked: dict[str, Any] = {}
    for path in WORK_FIELDS:
        value: Any = written
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value not in (None, [], {}):
            picked[path] = value
    return work_key(namespace, name, picked, "TrainingRun")


def experiment_of(spec: TrainingRunSpec) -> str:
    return spec.mlflow.experiment or spec.model.name


def guard_of(ctx: Context, client: MlflowClient) -> Guard:
    """What this TrainingRun trusts in MLflow (slipway.mlflow.proof): the experiment its status
    records (made before proofs existed) is trusted, and stamped."""
    recorded = (ctx.status.get("mlflow") or {}).get("experimentId")
    trusted = [f"experiment-id:{recorded}"] if recorded else []
    return ctx.tenancy.guard(client.proof, f"{ctx.namespace}/{ctx.name}", trusted)


def adoptable(
    client: MlflowClient, experiment_id: str, owner: str, work: str, guard: Guard | None = None
) -> Run | None:
    """The run a predecessor of the TrainingRun ``owner`` (namespace/name) made for ``work`` in
    ``experiment_id`` (the TrainingRun's own experiment, checked against the namespace's allow-list
    before any pass), with its proof where proofs are enforced (``guard``): a FINISHED one first, else
    the one cut short with the newest checkpoint, else one still RUNNING that never checkpointed (its
    TrainingRun went before its pods ran or logged a checkpoint: it goes on in that run, not a second)."""
    found = [
        r
        for r in client.search_runs([experiment_id], filter=tag_filter(WORK_TAG, work))
        if r.experiment_id == experiment_id
        and r.tags.get(TRAININGRUN_TAG) == owner
        and (guard is None or guard.run_holds(r.experiment_id, r.run_id, r.tags, "", work))
    ]
    done = [r for r in found if r.status == "FINISHED"]
    if done:
        return min(done, key=lambda r: (r.start_time or 0, r.run_id))
    cut = [r for r in found if r.status in ("RUNNING", "FAILED", "KILLED") and _checkpoint_step(r) is not None]
    if cut:
        return max(cut, key=lambda r: (_checkpoint_step(r) or 0, r.start_time or 0, r.run_id))
    left = [r for r in found if r.status == "RUNNING"]
    return min(left, key=lambda r: (r.start_time or 0, r.run_id)) if left else None


def _checkpoint_step(run: Run) -> int | None:
    value = CHECKPOINT_STEP.read(run.tags) or ""
    return int(value) if value.isdigit() else None


def finished_run(
    ctx: Context, spec: TrainingRunSpec, client: MlflowClient, child: Mapping[str, Any] | None
) -> Run | None:
    """The FINISHED run a TrainingRun shows instead of training, or None: train as before.

    With no run in status (no Job yet, a Job made while MLflow did not answer, or a pass that
    crashed before it wrote the run): a predecessor's, found by the work key (an Event names it).
    Looked up before the Job is made; with MLflow unreachable the Job comes first, as for any run,
    and this is asked again before its pods get a run (MLflow is then not asked before a Job for
    AWAY_SECONDS, so a sweep's Jobs do not each wait on it). With a run in status and no Job: that
    run again while it is a predecessor's (tagged with another uid) and the TrainingRun Succeeded,
    so that later passes follow its ModelArtifact."""
    known = (ctx.status.get("mlflow") or {}).get("runId")
    if known:
        if child is not None or ctx.status.get("phase") != "Succeeded":
            return None
        run = client.get_run(str(known))
        return run if run.tags.get(UID_TAG) != ctx.uid and run.status == "FINISHED" else None
    if child is None and time.monotonic() < _AWAY.get(client.tracking_uri, 0.0):
        return None
    try:
        guard = guard_of(ctx, client)
        experiment_id = client.experiment_for(experiment_of(spec), guard)
        owner = f"{ctx.namespace}/{ctx.name}"
        found = adoptable(client, experiment_id, owner, work_of(ctx.namespace, ctx.name, spec), guard)
    except MlflowUnavailable:
        if child is None:
            _AWAY[client.tracking_uri] = time.monotonic() + AWAY_SECONDS
        return None
    if found is None or found.status != "FINISHED":
        return None
    adopted_event(ctx, found, "its training finished there: nothing trains again")
    return found


AWAY_SECONDS = 30.0
_AWAY: dict[str, float] = {}  # MLflow tracking URI -> time.monotonic() until which no lookup precedes a Job


def run_for(ctx: Context, spec: TrainingRunSpec, client: MlflowClient, tags: Mapping[str, str]) -> Run:
    """The MLflow run of a TrainingRun with no run in status: its own (tagged with its uid), else a
    predecessor's it adopts (:func:`adoptable`), else a new one tagged with its uid and work key."""
    experiment = experiment_of(spec)
    guard = guard_of(ctx, client)
    experiment_id = client.experiment_for(experiment, guard)
    own = client.search_runs([experiment_id], filter=tag_filter(UID_TAG, ctx.uid))
    work = work_of(ctx.namespace, ctx.name, spec)
    if not own:
        run = adoptable(client, experiment_id, f"{ctx.namespace}/{ctx.name}", work, guard)
        if run is not None and run.status == "FINISHED":  # found now, after finished_run could not ask
            raise kopf.TemporaryError(f"MLflow run {run.run_id} finished this work: shown by the next pass", delay=0)
        if run is not None:
            step = _checkpoint_step(run)
            adopted_event(
                ctx,
                run,
                "training goes on in it, "
                + (
                    f"from its newest checkpoint (step {step}) if the checkpoint volume still holds it"
                    if step is not None
                    else "from the start: it never recorded a checkpoint"
                ),
            )
            return run
    return client.run_of(experiment, ctx.uid, None, f"{ctx.namespace}-{ctx.name}", {**tags, WORK_TAG: work}, guard)


def adopted_event(ctx: Context, run: Run, what: str) -> None:
    ctx.event(
        "Normal",
        reasons.ADOPTED_RUN,
        f"adopted MLflow run {run.run_id} ({run.status}, experiment "
        f"{run.experiment_id}), made for the same namespace, name and spec by an earlier TrainingRun "
        f"{ctx.namespace}/{ctx.name}: {what}",
    )


def completed_job(run: Run) -> dict[str, Any]:
    """What the status is computed from for a run whose training finished without a Job of this
    TrainingRun: a completed Job's status, with the run's start and end times."""
    status: dict[str, Any] = {"conditions": [{"type": "Complete", "status": "True"}]}
    for key, millis in (("startTime", run.start_time), ("completionTime", run.end_time)):
        if millis:
            status[key] = rfc3339(datetime.fromtimestamp(millis / 1000, UTC))
    return {"status": status}


def gated_own_job(ctx: Context, child: Mapping[str, Any] | None) -> bool:
    """Whether ``child`` is this TrainingRun's Job (or JobSet) and still gated: it never ran a pod
    (pods wait for their MLflow run, gate.RUN_GATE)."""
    return (
        child is not None
        and kube.controller_uid(dict(child)) == ctx.uid
        and gate.gated(gate.pod_template_of(dict(child)))
    )
