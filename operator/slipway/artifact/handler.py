"""ModelArtifact passes: register, quantize, validate, decide — woken by its Jobs and TrainingRun.

MLflow is the record: versions and step runs are tagged with the artifact's uid, versions also with
its work key (namespace, name, spec as written and resolved source: the same YAML applied again adopts them),
and looked up before any create; the gate decision is a version tag, and aliases move once, right after the
decision. Status is a cache of that record; a pass that runs again after a crash at any line
picks up where MLflow and the cluster say the artifact is.

A pass has the rollout planner's shape: it reads (slipway.artifact.observe) into what it has observed
(slipway.artifact.observed), asks the pure decision (slipway.artifact.decide) for the next move, carries
that move out here, and asks again until the move is the status to settle on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

from slipway import metrics, mlflowcreds
from slipway.artifact import state as states
from slipway.artifact.decide import decide
from slipway.artifact.decisions import (
    CreateJob,
    Decision,
    EnsureModel,
    MoveAliases,
    ReadAliases,
    ReadCost,
    ReadFiles,
    ReadGateInputs,
    ReadRun,
    ReadSource,
    ReadVersion,
    RecordGates,
    Register,
    Settle,
    StartStep,
)
from slipway.artifact.model import ArtifactPhase, ModelArtifactSpec, ModelArtifactStatus
from slipway.artifact.observe import Reader
from slipway.mlflow import MlflowClient, ModelVersion
from slipway.podspec import with_credentials, with_mlflow_tls
from slipway.reconcile import Context, run_pass
from slipway.tenancy import Use

metrics.declare_phases("ModelArtifact", get_args(ArtifactPhase))

# A pass makes about twenty moves at most (each read and write of the lifecycle once); more means a
# decision that its own move does not change, which would otherwise hold a worker for ever.
MAX_MOVES = 50


def reconcile(ctx: Context, spec: ModelArtifactSpec) -> float | None:
    """Carry the artifact from registration to a decision. The spec is immutable (CEL)."""
    if states.decided_at_generation(ctx.body):
        return None  # decided; the spec cannot change
    assert ctx.mlflow is not None
    return Pass(ctx, spec, ctx.mlflow).run()


def models(spec: ModelArtifactSpec) -> list[Use]:
    """The MLflow models this spec names (checked against the namespace's allow-list); its source
    is checked when it is read (a run's experiment is MLflow's to tell)."""
    return [Use("spec.model.name", "model", spec.model.name)]


PASS = (ModelArtifactStatus, lambda ctx: run_pass(ctx, ModelArtifactSpec, reconcile, models))


class Pass:
    """One pass over the artifact's lifecycle: read what the decision asks for, carry out what it
    decides, until it settles (its Jobs and its TrainingRun wake the next one)."""

    def __init__(self, ctx: Context, spec: ModelArtifactSpec, client: MlflowClient) -> None:
        self.ctx, self.spec, self.mlflow = ctx, spec, client
        self.model = spec.model.name
        # What it trusts in MLflow (slipway.mlflow.proof): the model (and its experiment) its status
        # records a version of, registered before proofs existed, is trusted and stamped.
        trusted = [f"model:{self.model}", f"experiment:{self.model}"] if ctx.status.get("modelVersion") else []
        self.guard = ctx.tenancy.guard(client.proof, f"{ctx.namespace}/{ctx.name}", trusted)
        self.read = Reader(ctx, spec, client, self.guard)
        self.seen = self.read.start()

    def run(self) -> float | None:
        """When to run again (seconds), or None to wait for a change."""
        for _ in range(MAX_MOVES):
            decision = decide(self.spec, self.ctx.status, self.seen)
            if isinstance(decision, Settle):
                return self.settle(decision)
            self.carry_out(decision)
        raise RuntimeError(f"ModelArtifact {self.ctx.namespace}/{self.ctx.name}: no decision after {MAX_MOVES} moves")

    def carry_out(self, decision: Decision) -> None:
        """One read or write; what it found or made goes into what the pass has observed."""
        seen, read = self.seen, self.read
        match decision:
            case ReadSource(run_id=run_id):
                seen.source = read.source(run_id)
            case EnsureModel():
                seen.model = self.mlflow.model_for(self.model, self.guard)
            case ReadVersion(role=role, work=work):
                seen.versions[role] = read.version(role, work)
            case ReadFiles(role=role, uri=uri):
                seen.files[role] = read.files(uri)
            case Register():
                seen.versions[decision.role] = self.register(decision)
            case StartStep(step=step):
                seen.steps[step] = read.step(step)
            case CreateJob(step=step, job=job):
                job = with_credentials(job, mlflowcreds.of_pods(self.ctx))
                created = self.ctx.ensure("jobs", with_mlflow_tls(job, self.ctx.config.pod_mlflow_tls))
                seen.steps[step] = read.job(seen.steps[step].run, created)
            case ReadRun(step=step):
                started = seen.steps[step]
                seen.steps[step] = replace(started, finished=self.mlflow.get_run(started.run.run_id))
            case ReadGateInputs(refs=refs):
                seen.prices, seen.baselines = read.gate_inputs(refs)
            case RecordGates(version=version, tags=tags):
                self.tag(version, tags)
                seen.recorded = True
            case ReadAliases(aliases=aliases):
                seen.held = read.aliases(aliases)
            case MoveAliases():
                seen.moved = self.move_aliases(decision)
            case ReadCost(counted=counted):
                for outcome in counted:
                    metrics.GATE_RESULTS.labels("ModelArtifact", "passed" if outcome.passed else "failed").inc()
                seen.cost = read.cost()

    def register(self, decision: Register) -> ModelVersion:
        """Register the version decided (the caller looked it up first)."""
        source, role = decision.source, decision.role
        if decision.skipped is not None:
            self.ctx.event("Warning", "DigestSkipped", decision.skipped)
        version = self.mlflow.register_version(
            self.model,
            source.uri,
            source.run_id,
            self.ctx.uid,
            role,
            decision.tags,
            model_id=source.model_id,
            work=decision.work,
            guard=self.guard,
        )
        self.ctx.event(
            "Normal", "Registered", f"registered {source.uri} as {self.model} version {version.version} ({role})"
        )
        return version

    def tag(self, version: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.mlflow.set_model_version_tag(self.model, version, key, value)

    def move_aliases(self, decision: MoveAliases) -> list[str]:
        for alias, newer in decision.kept.items():
            self.ctx.event("Normal", "AliasKept", f"alias {alias} stays on the newer version {newer}")
        for alias in decision.move:
            self.mlflow.set_alias(self.model, alias, decision.version)
        self.tag(decision.version, decision.tags)
        return decision.move

    def settle(self, decision: Settle) -> float | None:
        """The lineage cost's tags MLflow lacks, then the status (written at the end of the pass)."""
        self.tag(decision.version, decision.tags)
        state = mlflowcreds.noted(self.ctx, decision.state) if decision.pods else decision.state
        self.ctx.write(state.conditions, phase=state.phase, **decision.fields)
        return decision.recheck
