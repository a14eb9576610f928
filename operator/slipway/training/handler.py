"""TrainingRun passes: woken by changes of the run, its Job, pods and ModelArtifact, and by a
progress timer while it trains; everything is recomputed from the cache and MLflow.

Each step of a pass observes (``training.observe``), decides without I/O (``training.decide``) and
applies what it decided (``training.apply``): the opening (refused, stalled, a predecessor's
finished run shown, the checkpoint claim and the Job made), the Job's release to its MLflow run,
and the status (``training.records`` holds what each step reads and decides)."""

from __future__ import annotations

from typing import Any, get_args

from slipway import metrics
from slipway.reconcile import Context, run_pass
from slipway.tenancy import Use
from slipway.training import apply, decide, observe
from slipway.training.model import TrainingPhase, TrainingRunSpec, TrainingRunStatus
from slipway.training.records import Opening, Seen, Start
from slipway.training.state import finished

metrics.declare_phases("TrainingRun", get_args(TrainingPhase))


def reconcile(ctx: Context, spec: TrainingRunSpec) -> float | None:
    """Bring the run's children and status in line with its spec and what actually happened."""
    if finished(ctx.body):
        return None  # nothing changes any more: no I/O at rest
    seen = observe.start(ctx, spec)
    opening = decide.opening(spec, ctx.status, seen)
    if opening.action == "LookUp":  # MLflow's word: asked only of a run neither refused nor stalled
        seen = observe.look_up(ctx, spec, seen)
        opening = decide.opening(spec, ctx.status, seen)
    if opening.action in ("Refuse", "Stall"):
        apply.stop(ctx, opening, seen.sizing)
        return None
    if opening.action == "ShowFinished":
        _show_finished(ctx, spec, seen, opening)
        return None
    if (claim_wait := apply.claim_and_service(ctx, spec, seen.runtime)) is not None:
        return claim_wait  # a claim of that name is being deleted: no Job before its claim
    if opening.action == "Closed":
        return None
    child = seen.child or apply.create_child(ctx, spec, seen.runtime)
    if opening.requeue is not None:  # a sweep being applied: the other Jobs first
        return opening.requeue
    return _train(ctx, spec, seen, child)


def _show_finished(ctx: Context, spec: TrainingRunSpec, seen: Start, opening: Opening) -> None:
    """A predecessor's MLflow run finished this TrainingRun's training (trainingadopt.finished_run):
    that run is shown, with the ModelArtifact the spec asks for (which adopts its predecessor's
    version in turn); a Job of its own that is still gated (made while MLflow did not answer) is
    deleted: it never ran a pod."""
    assert seen.finished is not None
    if opening.delete_child:
        apply.delete_child(ctx, seen.runtime, seen.child)
    job = seen.finished.job
    artifact = apply.artifact(ctx, decide.artifact(spec, ctx.name, ctx.namespace, job))
    shown = Seen(job, [], artifact, seen.finished.run, seen.finished.run_url, sizing=seen.sizing)
    _conclude(ctx, spec, shown)


def _train(ctx: Context, spec: TrainingRunSpec, seen: Start, child: dict[str, Any]) -> float | None:
    """The pods given their MLflow run, the Job following spec.suspend, its ModelArtifact once it
    completed, and the status from what they show."""
    found = observe.children(ctx, spec, seen.runtime, child, made_now=seen.child is None)
    if found.run is not None:
        found = apply.release(ctx, found, decide.release(spec, found))
        found = apply.follow_suspend(ctx, found, decide.suspend(spec, found))
    artifact = apply.artifact(ctx, decide.artifact(spec, ctx.name, ctx.namespace, found.job))
    return _conclude(ctx, spec, observe.status_inputs(ctx, spec, found, artifact, seen.sizing))


def _conclude(ctx: Context, spec: TrainingRunSpec, seen: Seen) -> float | None:
    decided = decide.outcome(spec, ctx.status, seen, ctx.config)
    apply.outcome(ctx, seen, decided)
    return decided.requeue


def models(spec: TrainingRunSpec) -> list[Use]:
    """The MLflow model and experiment this spec uses (checked against the namespace's allow-list)."""
    experiment = (
        Use("spec.mlflow.experiment", "experiment", spec.mlflow.experiment)
        if spec.mlflow.experiment
        else Use("spec.model.name (the default experiment)", "experiment", spec.model.name)
    )
    return [Use("spec.model.name", "model", spec.model.name), experiment]


PASS = (TrainingRunStatus, lambda ctx: run_pass(ctx, TrainingRunSpec, reconcile, models, needs_mlflow=False))
