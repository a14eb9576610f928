"""ModelArtifact passes: register, quantize, validate, decide — level-based, woken by its Jobs
and its TrainingRun.

MLflow is the record: versions are tagged with the artifact's uid (and looked up
before any create), the gate decision is a version tag, and aliases move once,
right after the decision. Status is a cache of that record; a restart at any
line picks up where MLflow and the cluster say the artifact is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from slipway import metrics
from slipway.builders import modelartifact as build
from slipway.handlers.common import Context, run_pass, write_status
from slipway.mlflow import MlflowClient, MlflowNotFound, ModelVersion, Run, model_version_filter, tag_filter
from slipway.models import ModelArtifactSpec
from slipway.models.modelartifact import ModelArtifactStatus
from slipway.status import jobs
from slipway.status import modelartifact as states
from slipway.status.gates import Baseline, GateOutcome, evaluate_gates

UID_TAG = "slipway.dev/uid"
ROLE_TAG = "slipway.dev/role"
OWNER_TAG = "slipway.dev/modelartifact"
DECISION_TAG = "slipway.dev/validation"
GATES_TAG = "slipway.dev/gates"
ALIASES_TAG = "slipway.dev/aliases-set"
PARENT_TAG = "slipway.dev/parent-version"
METHOD_TAG = "slipway.dev/quantization-method"
METRIC_TAG = "slipway.metric."
FINAL = ("Validated", "Rejected", "Failed")


def reconcile(ctx: Context, spec: ModelArtifactSpec) -> float | None:
    """Carry the artifact from registration to a decision. The spec is immutable (CEL)."""
    status = ctx.status
    if status.get("phase") in FINAL and status.get("observedGeneration") == ctx.body["metadata"].get("generation"):
        return None  # decided; the spec cannot change
    assert ctx.mlflow is not None
    Lifecycle(ctx, spec, ctx.mlflow).run()
    return None  # its Jobs and its TrainingRun wake it


PASS = (ModelArtifactStatus, lambda ctx: run_pass(ctx, ModelArtifactSpec, reconcile))


@dataclass(frozen=True)
class Source:
    """Where the model to register lives."""

    uri: str
    run_id: str | None
    digest: str | None = None
    size_bytes: int | None = None


class Lifecycle:
    """One pass over the artifact's lifecycle; every step first looks for what an earlier pass did."""

    def __init__(self, ctx: Context, spec: ModelArtifactSpec, client: MlflowClient) -> None:
        self.ctx, self.spec, self.mlflow, self.config = ctx, spec, client, ctx.config
        self.name, self.namespace, self.uid = ctx.name, ctx.namespace, ctx.uid
        self.model = spec.model.name
        self.fields: dict[str, Any] = {}

    def write(self, state: states.ArtifactState) -> None:
        write_status(self.ctx, state.conditions, phase=state.phase, **self.fields)

    def run(self) -> None:
        source = self.resolve_source()
        if source is None:
            return
        self.mlflow.get_or_create_registered_model(self.model)
        version = self.find_version("source") or self.register(source, "source", {})
        self.fields |= {"modelVersion": version.version, "uri": version.uri}
        self.fields |= _digest_fields(source.digest, source.size_bytes)
        candidate = version
        if self.spec.quantization.method != "none" or self.spec.quantization.image or self.spec.quantization.command:
            quantized = self.quantize(version)
            if quantized is None:
                return
            candidate = quantized
            self.fields |= {"quantizedVersion": quantized.version, "uri": quantized.uri}
            self.fields |= _digest_fields(quantized.tags.get("slipway.digest"), quantized.tags.get("slipway.sizeBytes"))
        outcomes = self.validate(candidate)
        if outcomes is None:
            return
        passed = all(o.passed for o in outcomes)
        moved = self.spec.aliases
        if passed and candidate.tags.get(ALIASES_TAG) is None:
            moved = self.move_aliases(candidate.version)
            self.mlflow.set_model_version_tag(self.model, candidate.version, ALIASES_TAG, ",".join(moved) or "-")
        elif passed:
            moved = [a for a in candidate.tags[ALIASES_TAG].split(",") if a and a != "-"]
        for outcome in outcomes:
            metrics.GATE_RESULTS.labels("ModelArtifact", "passed" if outcome.passed else "failed").inc()
        self.fields["gates"] = [o.to_status() for o in outcomes]
        self.write(states.decided(outcomes, moved if passed else [], candidate.version))

    def move_aliases(self, version: str) -> list[str]:
        """Point the spec's aliases at ``version``, but never back at an older version than they hold."""
        moved = []
        for alias in self.spec.aliases:
            current = self.mlflow.get_version_by_alias(self.model, alias)
            if current is not None and int(current.version) > int(version):
                message = f"alias {alias} stays on the newer version {current.version}"
                self.ctx.event("Normal", "AliasKept", message)
                continue
            self.mlflow.set_alias(self.model, alias, version)
            moved.append(alias)
        return moved

    # -- source and registration -------------------------------------------------------------

    def resolve_source(self) -> Source | None:
        src = self.spec.source
        if src.uri is not None:
            return Source(src.uri, None)
        if src.mlflow_run is not None:
            return self._run_source(src.mlflow_run.run_id, src.mlflow_run.artifact_path)
        assert src.training_run_ref is not None
        ref = src.training_run_ref.name
        run = self.ctx.cache.get("trainingruns", self.namespace, ref)
        if run is None:
            self.write(states.waiting_for_source(f"TrainingRun {self.namespace}/{ref} does not exist (yet)"))
            return None
        run_status = run.get("status") or {}
        if run_status.get("phase") == "Failed":
            self.write(states.source_failed("TrainingRunFailed", f"TrainingRun {ref} failed; nothing to register"))
            return None
        run_id = (run_status.get("mlflow") or {}).get("runId")
        if run_status.get("phase") != "Succeeded" or not run_id:
            self.write(states.waiting_for_source(f"waiting for TrainingRun {ref} to succeed"))
            return None
        return self._run_source(run_id, "model")

    def _run_source(self, run_id: str, artifact_path: str) -> Source:
        run = self.mlflow.get_run(run_id)
        size = run.tags.get("slipway.model.sizeBytes")
        return Source(
            uri=f"runs:/{run_id}/{artifact_path}",
            run_id=run_id,
            digest=run.tags.get("slipway.model.digest"),
            size_bytes=int(size) if size and size.isdigit() else None,
        )

    def find_version(self, role: str) -> ModelVersion | None:
        found = self.mlflow.search_model_versions(model_version_filter(self.model, {UID_TAG: self.uid, ROLE_TAG: role}))
        return found[0] if found else None

    def register(self, source: Source, role: str, tags: dict[str, str]) -> ModelVersion:
        all_tags = {UID_TAG: self.uid, ROLE_TAG: role, OWNER_TAG: f"{self.namespace}/{self.name}", **tags}
        version = self.mlflow.create_model_version(self.model, source.uri, run_id=source.run_id, tags=all_tags)
        message = f"registered {source.uri} as {self.model} version {version.version} ({role})"
        self.ctx.event("Normal", "Registered", message)
        return version

    # -- quantize and validate ---------------------------------------------------------------

    def step_run(self, step: str) -> Run:
        """The MLflow run a step's Job reports to: found by tags, else created."""
        experiment_id = self.mlflow.get_or_create_experiment(self.model)
        query = f"{tag_filter(UID_TAG, self.uid)} and {tag_filter(ROLE_TAG, step)}"
        found = self.mlflow.search_runs([experiment_id], filter=query, max_results=1)
        if found:
            return found[0]
        tags = {UID_TAG: self.uid, ROLE_TAG: step, OWNER_TAG: f"{self.namespace}/{self.name}"}
        return self.mlflow.create_run(experiment_id, run_name=f"{self.namespace}-{self.name}-{step}", tags=tags)

    def step_job(self, step: str, run: Run, env: dict[str, str]) -> dict[str, Any]:
        job = self.ctx.child("jobs", build.job_name(self.name, step))
        if job is not None:
            return job
        settings = self.spec.quantization if step == "quantize" else self.spec.validation
        desired = build.step_job(
            self.name,
            self.namespace,
            step,
            image=(settings.image if settings else None) or self.config.workload_image,
            command=settings.command if settings else None,
            args=settings.args if settings else None,
            env={
                "MLFLOW_TRACKING_URI": self.config.mlflow_url or self.mlflow.tracking_uri,
                "MLFLOW_RUN_ID": run.run_id,
                "SLIPWAY_MODELARTIFACT": self.name,
                **env,
            },  # fmt: skip
            extra_env=getattr(settings, "env", None),
        )
        return self.ctx.ensure("jobs", desired)

    def job_done(self, step: str, job: dict[str, Any], waiting: str) -> bool:
        """True when the Job completed; otherwise writes why it is not done yet."""
        failed = jobs.failure(job)
        if failed:
            message = (
                f"the {step} Job {job['metadata']['name']} failed ({failed.get('reason')}: "
                f"{failed.get('message', '')}); see its pods' logs"
            )
            self.write(states.step_failed(step, message))
            return False
        if not jobs.is_complete(job):
            self.write(states.quantizing(waiting) if step == "quantize" else states.validating(waiting))
            return False
        return True

    def quantize(self, parent: ModelVersion) -> ModelVersion | None:
        done = self.find_version("quantized")
        if done is not None:
            return done
        method = self.spec.quantization.method
        run = self.step_run("quantize")
        env = {"SLIPWAY_MODEL_URI": parent.uri, "SLIPWAY_QUANTIZATION_METHOD": method}
        job = self.step_job("quantize", run, env)
        if not self.job_done("quantize", job, f"quantizing version {parent.version} ({method})"):
            return None
        run = self.mlflow.get_run(run.run_id)
        uri = run.tags.get("slipway.quantize.uri")
        if not uri:
            message = f"the quantizer finished without setting tag slipway.quantize.uri on MLflow run {run.run_id}"
            self.write(states.step_failed("quantize", message))
            return None
        tags = {PARENT_TAG: parent.version, METHOD_TAG: method}
        for key in ("digest", "sizeBytes"):
            if run.tags.get(f"slipway.quantize.{key}"):
                tags[f"slipway.{key}"] = run.tags[f"slipway.quantize.{key}"]
        return self.register(Source(uri, run.run_id), "quantized", tags)

    def validate(self, candidate: ModelVersion) -> list[GateOutcome] | None:
        """The gate outcomes: recorded on the version if decided before, else evaluated now and recorded."""
        if candidate.tags.get(DECISION_TAG) and candidate.tags.get(GATES_TAG):
            return [GateOutcome(**_outcome_args(g)) for g in json.loads(candidate.tags[GATES_TAG])]
        if self.spec.validation is None:
            outcomes: list[GateOutcome] = []
        else:
            run = self.step_run("validate")
            job = self.step_job("validate", run, {"SLIPWAY_MODEL_URI": candidate.uri})
            if not self.job_done("validate", job, f"validating version {candidate.version}"):
                return None
            run = self.mlflow.get_run(run.run_id)
            values = {key: m.value for key, m in run.metrics.items()}
            refs = {g.baseline for g in self.spec.validation.gates if g.baseline}
            baselines = {ref: self.baseline(ref) for ref in sorted(refs)}
            outcomes = evaluate_gates(self.spec.validation.gates, values, baselines)
            for key, value in values.items():
                self.mlflow.set_model_version_tag(self.model, candidate.version, METRIC_TAG + key, repr(value))
            if "sizeBytes" in values and "sizeBytes" not in self.fields:
                self.fields["sizeBytes"] = int(values["sizeBytes"])
        gates = json.dumps([o.to_status() for o in outcomes])
        self.mlflow.set_model_version_tag(self.model, candidate.version, GATES_TAG, gates)
        decision = "passed" if all(o.passed for o in outcomes) else "rejected"
        self.mlflow.set_model_version_tag(self.model, candidate.version, DECISION_TAG, decision)
        return outcomes

    def baseline(self, ref: str) -> Baseline:
        """The version a relative gate compares with, and its validation metrics."""
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
        values = {k[len(METRIC_TAG) :]: float(v) for k, v in version.tags.items() if k.startswith(METRIC_TAG)}
        if not values and version.run_id:
            values = {k: m.value for k, m in self.mlflow.get_run(version.run_id).metrics.items()}
        return Baseline(ref, version.version, values)


def _digest_fields(digest: str | None, size: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if digest:
        fields["digest"] = digest if digest.startswith("sha256:") else f"sha256:{digest}"
    if size is not None and str(size).isdigit():
        fields["sizeBytes"] = int(size)
    return fields


def _outcome_args(g: dict[str, Any]) -> dict[str, Any]:
    return {
        "metric": g["metric"],
        "value": g.get("value"),
        "threshold": g.get("threshold", ""),
        "baseline_value": g.get("baselineValue"),
        "passed": bool(g["passed"]),
        "message": g.get("message", ""),
    }
