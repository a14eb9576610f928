"""ModelArtifact passes: register, quantize, validate, decide — woken by its Jobs and TrainingRun.

MLflow is the record: versions and step runs are tagged with the artifact's uid, versions also with
its work key (namespace, name, spec as written and resolved source: the same YAML applied again adopts them),
and looked up before any create; the gate decision is a version tag, and aliases move once, right after the
decision. Status is a cache of that record; a pass that runs again after a crash at any line
picks up where MLflow and the cluster say the artifact is. The decisions between steps are pure
(``status/modelartifact.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

from slipway import cost, kube, metrics, mlflowcreds, opencost, tenancy
from slipway.artifact import build
from slipway.artifact import state as states
from slipway.artifact.gates import Baseline, GateOutcome, evaluate_gates, with_derived
from slipway.artifact.model import ArtifactPhase, ModelArtifactSpec, ModelArtifactStatus
from slipway.artifact.work import work_keys
from slipway.builders.common import with_credentials
from slipway.mlflow import MlflowClient, MlflowError, MlflowNotFound, ModelVersion, Run, parse_model_uri, parse_run_uri
from slipway.mlflow.digests import is_digest
from slipway.mlflow.sources import MAX_DIGEST_BYTES, Digesting, SourceChanged, TooManyFiles, looked_for
from slipway.reconcile import Context, run_pass
from slipway.redact import redact_url, without_credentials
from slipway.status import jobs
from slipway.status.pods import FAILED_CREATE_RECHECK_SECONDS, NO_PODS_RECHECK_SECONDS
from slipway.tenancy import Use

metrics.declare_phases("ModelArtifact", get_args(ArtifactPhase))

OWNER_TAG = "slipway.dev/modelartifact"
EMPTY_SOURCE_RECHECK_SECONDS = 60.0  # a run may still be logging its model
# Digesting a version's files: at most this long a pass (and a tenth of the liveness limit), then the
# next pass carries on this soon, so that one model of 10,000 files holds one worker a few seconds at
# a time and the others' passes run between.
DIGEST_PASS_SECONDS = 10.0
DIGEST_REQUEUE_SECONDS = 0.5
DIGESTING = "digesting"  # ctx.memory: the Digesting in progress (lost with the process: started again)


class Waiting(Exception):
    """The lifecycle cannot go further in this pass; the state says why (a Job runs, a source is due)."""

    def __init__(self, state: states.ArtifactState, recheck_seconds: float | None = None) -> None:
        self.state, self.recheck_seconds = state, recheck_seconds


def reconcile(ctx: Context, spec: ModelArtifactSpec) -> float | None:
    """Carry the artifact from registration to a decision. The spec is immutable (CEL)."""
    if states.decided_at_generation(ctx.body):
        return None  # decided; the spec cannot change
    assert ctx.mlflow is not None
    lifecycle = Lifecycle(ctx, spec, ctx.mlflow)
    try:
        lifecycle.run()
    except Waiting as waiting:
        ctx.write(waiting.state.conditions, phase=waiting.state.phase, **lifecycle.fields)
        return waiting.recheck_seconds
    return None  # its Jobs and its TrainingRun wake it


def models(spec: ModelArtifactSpec) -> list[Use]:
    """The MLflow models this spec names (checked against the namespace's allow-list); its source
    is checked when it is read (a run's experiment is MLflow's to tell)."""
    return [Use("spec.model.name", "model", spec.model.name)]


PASS = (ModelArtifactStatus, lambda ctx: run_pass(ctx, ModelArtifactSpec, reconcile, models))


class Lifecycle:
    """One pass over the artifact's lifecycle; every step first looks for what an earlier pass did."""

    def __init__(self, ctx: Context, spec: ModelArtifactSpec, client: MlflowClient) -> None:
        self.ctx, self.spec, self.mlflow = ctx, spec, client
        self.model = spec.model.name
        self.fields: dict[str, Any] = {}
        self.resolved: states.Source | None = None  # the source this pass resolved
        # What it trusts in MLflow (slipway.mlflow.proof): the model (and its experiment) its status
        # records a version of, registered before proofs existed, is trusted and stamped.
        trusted = [f"model:{self.model}", f"experiment:{self.model}"] if ctx.status.get("modelVersion") else []
        self.guard = ctx.tenancy.guard(client.proof, f"{ctx.namespace}/{ctx.name}", trusted)

    def run(self) -> None:
        source = self.resolved = self.source()
        self.mlflow.model_for(self.model, self.guard)
        version = self.version("source", source, {})
        self.fields |= {"model_version": version.version, "uri": version.uri}
        self.fields |= states.digest_fields(
            source.digest or version.tags.get(states.SOURCE_DIGEST_TAG),
            source.size_bytes or version.tags.get(states.SOURCE_SIZE_TAG),
        )
        candidate = version
        q = self.spec.quantization
        if states.needs_quantization(q.method, q.image, q.command):
            candidate = self.quantize(version)
            self.fields |= {"quantized_version": candidate.version, "uri": candidate.uri}
            self.fields |= states.digest_fields(
                candidate.tags.get("slipway.digest"), candidate.tags.get("slipway.sizeBytes")
            )
        files_digest = candidate.tags.get(states.SOURCE_DIGEST_TAG)
        if is_digest(files_digest):  # what serving pods check every file against (status: held in Kubernetes)
            self.fields["files_digest"] = files_digest
        outcomes = self.validate(candidate)
        passed = all(o.passed for o in outcomes)
        moved = states.recorded_aliases(candidate.tags)
        if passed and moved is None:
            moved = self.move_aliases(candidate.version)
        for outcome in outcomes:
            metrics.GATE_RESULTS.labels("ModelArtifact", "passed" if outcome.passed else "failed").inc()
        self.fields["gates"] = [o.to_status() for o in outcomes]
        self.fields["cost"] = self.lineage_cost(candidate)
        state = states.decided(outcomes, (moved or []) if passed else [], candidate.version)
        self.ctx.write(state.conditions, phase=state.phase, **self.fields)

    def source(self) -> states.Source:
        src = self.spec.source
        if src.uri is not None:
            with mlflowcreds.refusals_named("spec.source.uri"):
                self.check_uri(src.uri, "spec.source.uri")
                return self.uri_source(src.uri, "spec.source.uri")
        if src.mlflow_run is not None:
            run_id, path = src.mlflow_run.run_id, src.mlflow_run.artifact_path
            if self.ctx.tenancy.active:
                tenancy.uri_target(f"runs:/{run_id}/{path}", "spec.source.mlflowRun.artifactPath")
        else:
            assert src.training_run_ref is not None
            ref = src.training_run_ref.name
            found = states.trainingrun_source(
                self.ctx.cache.get("trainingruns", self.ctx.namespace, ref), self.ctx.namespace, ref
            )
            if isinstance(found, states.ArtifactState):
                raise Waiting(found)
            run_id, path = found, "model"
        named = "spec.source.mlflowRun.runId" if src.mlflow_run else "spec.source.trainingRunRef"
        with mlflowcreds.refusals_named(named):
            run = self.mlflow.get_run(run_id)
        if self.ctx.tenancy.active and src.mlflow_run is not None:  # a TrainingRun's run is checked by its own spec
            self.check_run(run, "spec.source.mlflowRun.runId")
        field = "spec.source.mlflowRun" if src.mlflow_run is not None else "spec.source.trainingRunRef"
        return self.run_source(run, path, field)

    def run_source(self, run: Run, path: str, field: str) -> states.Source:
        """The run's model as MLflow's client finds it: its artifacts at ``path``, else its LoggedModel
        named ``path``; Stalled (EmptySource) when neither holds a file."""
        found = self.mlflow.run_model(run, path)
        if found is None:
            raise Waiting(states.empty_source(field, looked_for(run.run_id, path)), EMPTY_SOURCE_RECHECK_SECONDS)
        tags = run.tags if found.model_id is None else {}  # the trainer's tags describe its run artifacts
        return states.Source(
            found.uri,
            found.run_id,
            tags.get("slipway.model.digest"),
            tags.get("slipway.model.sizeBytes"),
            model_id=found.model_id,
        )

    def uri_source(self, uri: str, field: str) -> states.Source:
        """``runs:/`` as a run's model; ``models:/m-<id>`` as that LoggedModel; any other URI as it is
        (one MLflow serves must hold a file)."""
        run_uri = parse_run_uri(uri)
        if run_uri is not None:
            return self.run_source(self.mlflow.get_run(run_uri.run_id), run_uri.path, field)
        model = parse_model_uri(uri)
        if model is not None and model.version is None and model.alias is None:
            try:
                logged = self.mlflow.get_logged_model(model.name)
            except MlflowNotFound:
                raise Waiting(
                    states.empty_source(
                        field, f"LoggedModel {model.name}, which MLflow does not have", "ModelNotFound"
                    ),
                    EMPTY_SOURCE_RECHECK_SECONDS,
                ) from None
            found = self.mlflow.logged(logged)
            source = states.Source(found.uri, found.run_id, model_id=found.model_id)
        else:
            source = states.Source(uri, None)
        if self.mlflow.has_files(source.uri) is False:
            shown = f"LoggedModel {source.model_id}'s artifacts" if source.model_id else f"{redact_url(uri)!r}"
            raise Waiting(states.empty_source(field, shown), EMPTY_SOURCE_RECHECK_SECONDS)
        return source

    def check_uri(self, uri: str, field: str) -> None:
        """A source URI is allowed only if what it reaches is: its model, its run's experiment, its
        experiment (tenancy.uri_target); nothing is checked in single-team mode."""
        policy = self.ctx.tenancy
        if not policy.active:
            return
        target = tenancy.uri_target(uri, field)
        if target.model is not None:
            policy.check([Use(field, "model", target.model)])
        if target.run_id is not None:
            self.check_run(self.mlflow.get_run(target.run_id), field)
        if target.experiment_id is not None:
            self.check_experiment(target.experiment_id, field, uri)
        if target.logged_model is not None:
            try:
                logged = self.mlflow.get_logged_model(target.logged_model)
            except MlflowNotFound:
                raise policy.source_refusal(
                    field,
                    f"LoggedModel {target.logged_model} is not one MLflow knows, so its experiment cannot be checked",
                ) from None
            self.check_experiment(logged.experiment_id, field, f"LoggedModel {logged.model_id}")

    def check_run(self, run: Run, field: str) -> None:
        """A run is the namespace's to use only if its experiment is."""
        self.check_experiment(run.experiment_id, field, f"run {run.run_id}")

    def check_experiment(self, experiment_id: str, field: str, what: str) -> None:
        policy = self.ctx.tenancy
        name = self.mlflow.experiment_name(experiment_id)
        if name is None or not policy.allows(name):
            shown = f"experiment {name!r}" if name is not None else "an experiment MLflow does not know"
            raise policy.source_refusal(
                field, f"{what} belongs to {shown} (id {experiment_id}), not one this namespace may use"
            )

    def version(self, role: str, source: states.Source, tags: dict[str, str]) -> ModelVersion:
        """The version registered for ``role``, registering ``source`` if an earlier pass did not."""
        found = self.mlflow.version_of(self.model, self.ctx.uid, role, self.work(self.resolved), self.guard)
        if found is not None:
            return found
        owner = {OWNER_TAG: f"{self.ctx.namespace}/{self.ctx.name}", **tags}
        owner |= self.source_tags(source, role)
        keys = self.work(self.resolved)
        version = self.mlflow.register_version(
            self.model,
            source.uri,
            source.run_id,
            self.ctx.uid,
            role,
            owner,
            model_id=source.model_id,
            work=keys[0] if keys else None,
            guard=self.guard,
        )
        self.ctx.event(
            "Normal", "Registered", f"registered {source.uri} as {self.model} version {version.version} ({role})"
        )
        return version

    def work(self, source: states.Source | None) -> list[str]:
        """What this artifact's versions are keyed on besides its uid (see :mod:`slipway.artifact.work`):
        its namespace, name, the spec as the user wrote it and the source it resolved to; the key of
        the earlier rule after it, so a version registered under that one is adopted."""
        if source is None:
            return []
        return work_keys(self.ctx.namespace, self.ctx.name, self.spec, source.uri)

    def source_tags(self, source: states.Source, role: str) -> dict[str, str]:
        """Slipway's digest, size and file count of a version's files (whatever its producer recorded),
        read a few seconds of each pass at a time (Waiting, reason Digesting, until done); {} for a URI
        MLflow does not serve."""
        quantized = role == "quantized"
        what = (
            f"the quantizer's output {redact_url(source.uri)}"
            if quantized
            else f"spec.source: {redact_url(source.uri)}"
        )
        work = self.ctx.memory.get(DIGESTING)
        if not isinstance(work, Digesting) or work.uri != source.uri or work.owner != self.ctx.uid:
            work = self.ctx.memory[DIGESTING] = Digesting(source.uri, owner=self.ctx.uid)
        config = self.ctx.config
        try:
            tree = self.mlflow.digest_within(
                work, min(DIGEST_PASS_SECONDS, config.stuck_pass_seconds / 10), config.max_digest_files
            )
        except MlflowError as exc:
            if exc.error_code != "UNSUPPORTED_ARTIFACT_URI":
                raise  # MLflow unavailable: the progress is kept for the pass that retries
            self.ctx.memory.pop(DIGESTING, None)
            return {}
        except TooManyFiles as exc:
            self.ctx.memory.pop(DIGESTING, None)
            raise Waiting(states.too_many_files(what, exc.what, exc.limit, quantized)) from None
        except SourceChanged as exc:
            self.ctx.memory.pop(DIGESTING, None)
            again = f"{exc}: the files changed while they were read; reading them all again"
            raise Waiting(states.digesting(what, again, quantized), DIGEST_REQUEUE_SECONDS) from None
        if tree is None:
            raise Waiting(states.digesting(what, work.progress(), quantized), DIGEST_REQUEUE_SECONDS)
        self.ctx.memory.pop(DIGESTING, None)
        if tree.files == 0:  # emptied since it was found
            raise Waiting(states.empty_source("spec.source", redact_url(source.uri)), EMPTY_SOURCE_RECHECK_SECONDS)
        tags = {states.SOURCE_SIZE_TAG: str(tree.size_bytes), states.SOURCE_FILES_TAG: str(tree.files)}
        if tree.digest is None:
            self.ctx.event(
                "Warning",
                "DigestSkipped",
                f"{redact_url(source.uri)}: not digested, its files are more "
                f"than the operator reads ({MAX_DIGEST_BYTES} bytes): {tree.files} files, "
                f"{tree.size_bytes} bytes",
            )
        return tags | ({states.SOURCE_DIGEST_TAG: tree.digest} if tree.digest else {})

    def step(self, step: str, waiting: str, env: dict[str, str]) -> Run:
        """Run a step's Job (its MLflow run found by tags, else created); its run once it completed."""
        name = f"{self.ctx.namespace}-{self.ctx.name}-{step}"
        run = self.mlflow.run_of(
            self.model, self.ctx.uid, step, name, {OWNER_TAG: f"{self.ctx.namespace}/{self.ctx.name}"}, self.guard
        )
        settings = self.spec.quantization if step == "quantize" else self.spec.validation
        config = self.ctx.config
        tracking = config.pod_mlflow_url or without_credentials(self.mlflow.tracking_uri)
        env = {
            "MLFLOW_TRACKING_URI": tracking,
            "MLFLOW_RUN_ID": run.run_id,
            "SLIPWAY_MODELARTIFACT": self.ctx.name,
            **env,
        }
        job = self.ctx.child("jobs", build.job_name(self.ctx.name, step))
        if job is None:
            desired = build.step_job(
                self.ctx.name,
                self.ctx.namespace,
                step,
                image=getattr(settings, "image", None) or config.workload_image,
                command=getattr(settings, "command", None),
                args=getattr(settings, "args", None),
                env=env,
                extra_env=getattr(settings, "env", None),
            )
            job = self.ctx.ensure("jobs", with_credentials(desired, mlflowcreds.of_pods(self.ctx)))
        podless = jobs.without_pods(job)
        looked = podless and jobs.old_enough_for_pods(job, datetime.now(UTC))
        refused = kube.creation_failure(self.ctx.kube, job) if looked else None
        state = states.job_state(step, job, waiting, refused)
        state = mlflowcreds.noted(self.ctx, state) if state is not None else None
        if state is not None:  # a Job without pods sends no event when its pods are refused: look again
            recheck = FAILED_CREATE_RECHECK_SECONDS if refused else NO_PODS_RECHECK_SECONDS
            raise Waiting(state, recheck if podless else None)
        return self.mlflow.get_run(run.run_id)

    def quantize(self, parent: ModelVersion) -> ModelVersion:
        done = self.mlflow.version_of(self.model, self.ctx.uid, "quantized", self.work(self.resolved), self.guard)
        if done is not None:
            return done
        method = self.spec.quantization.method
        env = {"SLIPWAY_MODEL_URI": parent.uri, "SLIPWAY_QUANTIZATION_METHOD": method}
        run = self.step("quantize", f"quantizing version {parent.version} ({method})", env)
        output = states.quantized_output(run.run_id, run.tags, parent.version, method)
        if isinstance(output, states.ArtifactState):
            raise Waiting(output)
        # The tag is the tenant's pod's word: what it names must be that run's own (as a source is checked).
        if self.ctx.tenancy.active and not tenancy.inside_run(output[0], run.run_id, run.artifact_uri):
            raise Waiting(states.foreign_output(run.run_id, output[0], run.artifact_uri))
        return self.version("quantized", states.Source(output[0], run.run_id), output[1])

    def validate(self, candidate: ModelVersion) -> list[GateOutcome]:
        """The gate outcomes: recorded on the version if decided before, else evaluated now and recorded."""
        recorded = states.recorded_outcomes(candidate.tags)
        if recorded is not None:
            return recorded
        outcomes: list[GateOutcome] = []
        if self.spec.validation is not None:
            run = self.step("validate", f"validating version {candidate.version}", {"SLIPWAY_MODEL_URI": candidate.uri})
            prices = cost.prices_of(self.ctx.config.prices_file)
            values, unavailable = with_derived({key: m.value for key, m in run.metrics.items()}, prices)
            refs = sorted({g.baseline for g in self.spec.validation.gates if g.baseline})
            baselines = {ref: self.baseline(ref, prices) for ref in refs}
            outcomes = evaluate_gates(self.spec.validation.gates, values, baselines, unavailable)
            for key in states.recorded_metrics(values, self.spec.validation.gates):
                self.mlflow.set_model_version_tag(
                    self.model, candidate.version, states.METRIC_TAG + key, repr(values[key])
                )
            size = states.digest_fields(None, values.get("sizeBytes")).get("size_bytes")
            if size is not None:
                self.fields.setdefault("size_bytes", size)
        for tag, text in states.decision_tags(outcomes).items():  # the decision tag last
            self.mlflow.set_model_version_tag(self.model, candidate.version, tag, text)
        return outcomes

    def lineage_cost(self, candidate: ModelVersion) -> dict[str, Any] | None:
        """status.cost: what the version cost to make — its TrainingRun (every attempt), its quantize
        and validate Jobs — also written on the version as tags (once: tags MLflow already has with
        these values are not written again). None without a price table."""
        table = cost.prices_of(self.ctx.config.prices_file)
        prices = opencost.with_node_prices(table, self.ctx.prometheus, self.ctx.config.http_timeout_seconds)
        if not prices.configured:
            return None
        now = datetime.now(UTC)
        parts: dict[str, float | None] = {}
        ref = self.spec.source.training_run_ref
        if ref is not None:
            run = self.ctx.cache.get("trainingruns", self.ctx.namespace, ref.name) or {}
            parts["training"] = ((run.get("status") or {}).get("cost") or {}).get("total")
        recorded = self.ctx.status.get("cost") or {}
        for step, field in (("quantize", "quantization"), ("validate", "validation")):
            job = self.ctx.child("jobs", build.job_name(self.ctx.name, step))
            if job is not None:
                parts[field] = cost.job_cost(job, prices, now)
            elif recorded.get(field) is not None:
                parts[field] = float(recorded[field])  # its Job is gone (deleted, TTL): what was recorded
        known = {k: round(v, 6) for k, v in parts.items() if v is not None}
        out: dict[str, Any] = {"currency": prices.currency or None, **known, "total": round(sum(known.values()), 6)}
        if len(known) < len(parts):
            out["message"] = f"not counted (no price or not finished): {', '.join(sorted(set(parts) - set(known)))}"
        tags = {f"slipway.cost.{k}": str(v) for k, v in out.items() if k in (*parts, "total") and v is not None}
        tags = {("slipway.cost.lineage" if k == "slipway.cost.total" else k): v for k, v in tags.items()}
        if prices.currency:
            tags["slipway.cost.currency"] = prices.currency
        for key, value in tags.items():
            if candidate.tags.get(key) != value:
                self.mlflow.set_model_version_tag(self.model, candidate.version, key, value)
        return out

    def move_aliases(self, version: str) -> list[str]:
        """Point the spec's aliases at ``version``, but never back at an older version than they hold."""
        held = {}
        for alias in self.spec.aliases:
            current = self.mlflow.get_version_by_alias(self.model, alias)
            held[alias] = current.version if current else None
        move, kept = states.aliases_to_move(self.spec.aliases, held, version)
        for alias in kept:
            self.ctx.event("Normal", "AliasKept", f"alias {alias} stays on the newer version {held[alias]}")
        for alias in move:
            self.mlflow.set_alias(self.model, alias, version)
        self.mlflow.set_model_version_tag(self.model, version, states.ALIASES_TAG, ",".join(move) or "-")
        return move

    def baseline(self, ref: str, prices: cost.Prices) -> Baseline:
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
