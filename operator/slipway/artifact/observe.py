"""A ModelArtifact pass's reads (its source's are in slipway.artifact.source): the versions registered
for it, the files of a version to register (a few seconds of each pass at a time), its steps' MLflow
runs and Jobs, its gates' prices and baselines, its aliases and what its lineage cost is made of."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from slipway import cost, kube, opencost
from slipway.artifact import build
from slipway.artifact import state as states
from slipway.artifact.gates import Baseline, with_derived
from slipway.artifact.model import ModelArtifactSpec
from slipway.artifact.observed import QUANTIZE, VALIDATE, CostSeen, FilesRead, NoFiles, Observed, StepSeen
from slipway.artifact.source import SourceReader
from slipway.mlflow import Guard, MlflowClient, MlflowError, MlflowNotFound, ModelVersion, Run
from slipway.mlflow.sources import Digesting, SourceChanged, TooManyFiles
from slipway.prices import Prices
from slipway.reconcile import Context
from slipway.redact import without_credentials
from slipway.status import jobs
from slipway.status.pods import pod_problem

# Digesting a version's files: at most this long a pass (and a tenth of the liveness limit), then the
# next pass carries on soon (slipway.artifact.decide), so that one model of 10,000 files holds one
# worker a few seconds at a time and the others' passes run between.
DIGEST_PASS_SECONDS = 10.0
DIGESTING = "digesting"  # ctx.memory: the Digesting in progress (lost with the process: started again)


class Reader:
    """What one pass reads for the decision, as the artifact's ``guard`` trusts MLflow's objects."""

    def __init__(self, ctx: Context, spec: ModelArtifactSpec, client: MlflowClient, guard: Guard) -> None:
        self.ctx, self.spec, self.mlflow, self.guard = ctx, spec, client, guard
        self.model = spec.model.name

    def start(self) -> Observed:
        """What a pass knows before it reads MLflow: its settings and the TrainingRun its source names."""
        config, ref = self.ctx.config, self.spec.source.training_run_ref
        return Observed(
            self.ctx.namespace,
            self.ctx.name,
            config.pod_mlflow_url or without_credentials(self.mlflow.tracking_uri),
            config.workload_image,
            self.ctx.tenancy.active,
            training_run=self.ctx.cache.get("trainingruns", self.ctx.namespace, ref.name) if ref else None,
            ui=config.mlflow_public_url or without_credentials(self.mlflow.tracking_uri),
        )

    def source(self, run_id: str | None) -> states.Source | NoFiles:
        return SourceReader(self.mlflow, self.ctx.tenancy).read(self.spec.source, run_id)

    def version(self, role: str, work: list[str]) -> ModelVersion | None:
        return self.mlflow.version_of(self.model, self.ctx.uid, role, work, self.guard)

    def files(self, uri: str) -> FilesRead:
        """The files at ``uri`` read on for up to DIGEST_PASS_SECONDS: done, or where the reading is
        (kept in ctx.memory for the next pass; MLflow unavailable: kept for the pass that retries)."""
        memory, uid = self.ctx.memory, self.ctx.uid
        work = memory.get(DIGESTING)
        if not isinstance(work, Digesting) or work.uri != uri or work.owner != uid:
            work = memory[DIGESTING] = Digesting(uri, owner=uid)
        config = self.ctx.config
        try:
            tree = self.mlflow.digest_within(
                work, min(DIGEST_PASS_SECONDS, config.stuck_pass_seconds / 10), config.max_digest_files
            )
        except MlflowError as exc:
            if exc.error_code != "UNSUPPORTED_ARTIFACT_URI":
                raise  # MLflow unavailable: the progress is kept for the pass that retries
            memory.pop(DIGESTING, None)
            return FilesRead(unsupported=True)
        except TooManyFiles as exc:
            memory.pop(DIGESTING, None)
            return FilesRead(too_many=(exc.what, exc.limit))
        except SourceChanged as exc:
            memory.pop(DIGESTING, None)
            return FilesRead(changed=str(exc))
        if tree is None:
            return FilesRead(progress=work.progress())
        memory.pop(DIGESTING, None)
        return FilesRead(tree=tree)

    def step(self, step: str) -> StepSeen:
        """The step's MLflow run (found by tags, else created) and its Job, if the cache has it."""
        ctx = self.ctx
        name = f"{ctx.namespace}-{ctx.name}-{step}"
        owner = {states.OWNER_TAG: f"{ctx.namespace}/{ctx.name}"}
        run = self.mlflow.run_of(self.model, ctx.uid, step, name, owner, self.guard)
        return self.job(run, ctx.child("jobs", build.job_name(ctx.name, step)))

    def job(self, run: Run, job: dict[str, Any] | None) -> StepSeen:
        """A step's Job, and for one that should have had pods a while and has none, why the API
        server refuses them (its FailedCreate Events: a Job sends no event of its own); for one whose
        pod has not started a while, why (an image not pulled, a root image refused)."""
        refused = stuck = None
        if job is not None and jobs.without_pods(job) and jobs.old_enough_for_pods(job, datetime.now(UTC)):
            refused = kube.creation_failure(self.ctx.kube, job)
        if job is not None and jobs.starting(job) and jobs.old_enough_for_pods(job, datetime.now(UTC)):
            stuck = pod_problem(kube.pods_of_job(self.ctx.kube, dict(job)))
        return StepSeen(run, job, refused, stuck=stuck)

    def gate_inputs(self, refs: list[str]) -> tuple[Prices, dict[str, Baseline]]:
        prices = cost.prices_of(self.ctx.config.prices_file)
        return prices, {ref: self.baseline(ref, prices) for ref in refs}

    def baseline(self, ref: str, prices: Prices) -> Baseline:
        """The version a relative gate compares with, and its validation metrics (a cost derived again
        at today's prices, so that both sides of a ratio have the same ones)."""
        try:
            version = (
                self.mlflow.get_model_version(self.model, ref)
                if ref.isdigit()
                else self.mlflow.get_version_by_alias(self.model, ref)
            )
        except MlflowNotFound:
            version = None
        if version is None:
            return Baseline(ref, None, {})
        values, refused = states.metric_values(version.tags)
        if not values and not refused and version.run_id:
            values = {k: m.value for k, m in self.mlflow.get_run(version.run_id).metrics.items()}
        return Baseline(ref, version.version, with_derived(values, prices)[0], refused)

    def aliases(self, aliases: list[str]) -> dict[str, str | None]:
        """Which version each alias points at now (None: none)."""
        held: dict[str, str | None] = {}
        for alias in aliases:
            current = self.mlflow.get_version_by_alias(self.model, alias)
            held[alias] = current.version if current else None
        return held

    def cost(self) -> CostSeen:
        """The prices (OpenCost's per node, when the price file asks), and with some configured, the
        TrainingRun and the step Jobs as the cache has them now."""
        ctx = self.ctx
        table = cost.prices_of(ctx.config.prices_file)
        prices = opencost.with_node_prices(table, ctx.prometheus, ctx.config.http_timeout_seconds)
        now = datetime.now(UTC)
        if not prices.configured:
            return CostSeen(prices, now)
        ref = self.spec.source.training_run_ref
        run = ctx.cache.get("trainingruns", ctx.namespace, ref.name) if ref is not None else None
        steps = {step: ctx.child("jobs", build.job_name(ctx.name, step)) for step in (QUANTIZE, VALIDATE)}
        return CostSeen(prices, now, run, steps)
