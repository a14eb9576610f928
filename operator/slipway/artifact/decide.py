"""A ModelArtifact pass's decision (pure): from the spec, the status and what the pass has read
(slipway.artifact.observed), the next move (slipway.artifact.decisions). Every step first looks for
what an earlier pass did: the source's version, the quantized version, the gate decision and the
aliases recorded on the candidate, so a pass that runs again after a crash carries on.

The lifecycle: resolve the source (a TrainingRun must have succeeded first), register it, quantize
it into its own version when the spec asks, validate the candidate (the quantized version, else the
source's) against the gates, record the decision on it, move the aliases once if the gates passed,
then settle on Validated or Rejected with the lineage cost. A pass that cannot go further settles on
the state that says why (a Job runs, files are being read, the source is empty) and when to look again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from slipway import tenancy
from slipway.artifact import build
from slipway.artifact import state as states
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
from slipway.artifact.gates import GateOutcome, evaluate_gates, with_derived
from slipway.artifact.lineage import lineage_cost
from slipway.artifact.model import ModelArtifactSpec
from slipway.artifact.observed import QUANTIZE, QUANTIZED, SOURCE, VALIDATE, FilesRead, NoFiles, Observed
from slipway.artifact.work import work_keys
from slipway.mlflow import ModelVersion, Run
from slipway.mlflow.digests import is_digest
from slipway.mlflow.sources import MAX_DIGEST_BYTES
from slipway.mlflow.tags import DIGEST, SIZE, SOURCE_DIGEST, SOURCE_SIZE
from slipway.mlflow.uris import ui_run_url, ui_version_url
from slipway.redact import redact_url
from slipway.status import jobs
from slipway.status.pods import FAILED_CREATE_RECHECK_SECONDS, NO_PODS_RECHECK_SECONDS

EMPTY_SOURCE_RECHECK_SECONDS = 60.0  # a run may still be logging its model
DIGEST_REQUEUE_SECONDS = 0.5  # files half read: the next pass carries on this soon


def decide(spec: ModelArtifactSpec, status: Mapping[str, Any], seen: Observed) -> Decision:
    """The pass's next move. A :class:`Settle` carries the status fields known at that point."""
    fields: dict[str, Any] = {}
    decision = _next(spec, status, seen, fields)
    if isinstance(decision, Settle):
        return replace(decision, fields=fields)
    return decision


def _next(spec: ModelArtifactSpec, status: Mapping[str, Any], seen: Observed, fields: dict[str, Any]) -> Decision:
    """The lifecycle from the top, ``fields`` (status fields) filled in as each stage is found done."""
    candidate = _candidate(spec, seen, fields)
    if not isinstance(candidate, ModelVersion):
        return candidate
    outcomes = _outcomes(spec, seen, candidate, fields)
    if not isinstance(outcomes, list):
        return outcomes
    passed = all(o.passed for o in outcomes)
    moved = seen.moved if seen.moved is not None else states.recorded_aliases(candidate.tags)
    if passed and moved is None:
        return _aliases(spec, seen, candidate.version)
    if seen.cost is None:
        return ReadCost(outcomes)
    fields["gates"] = [o.to_status() for o in outcomes]
    fields["cost"], tags = lineage_cost(spec, status, seen.cost, candidate.tags)
    state = states.decided(outcomes, (moved or []) if passed else [], candidate.version)
    return Settle(state, version=candidate.version, tags=tags)


def _candidate(spec: ModelArtifactSpec, seen: Observed, fields: dict[str, Any]) -> ModelVersion | Decision:
    """The version the gates judge: the quantized one when the spec quantizes, else the source's."""
    source = seen.source
    if source is None:
        return _source_to_read(spec, seen)
    if isinstance(source, NoFiles):
        state = states.empty_source(source.field, source.looked_for, source.reason)
        return Settle(state, recheck=EMPTY_SOURCE_RECHECK_SECONDS)
    if seen.model is None:
        return EnsureModel()
    version = _version(spec, seen, SOURCE, source, {})
    if not isinstance(version, ModelVersion):
        return version
    fields |= {"model_version": version.version, "uri": version.uri, **_links(seen, version)}
    fields |= states.digest_fields(
        source.digest or SOURCE_DIGEST.read(version.tags),
        source.size_bytes or SOURCE_SIZE.read(version.tags),
    )
    candidate = version
    q = spec.quantization
    if states.needs_quantization(q.method, q.image, q.command):
        quantized = _quantized(spec, seen, version)
        if not isinstance(quantized, ModelVersion):
            return quantized
        candidate = quantized
        fields |= {"quantized_version": candidate.version, "uri": candidate.uri, **_links(seen, candidate)}
        fields |= states.digest_fields(DIGEST.read(candidate.tags), SIZE.read(candidate.tags))
    files_digest = SOURCE_DIGEST.read(candidate.tags)
    if is_digest(files_digest):  # what serving pods check every file against (status: held in Kubernetes)
        fields["files_digest"] = files_digest
    return candidate


def _links(seen: Observed, version: ModelVersion) -> dict[str, Any]:
    """status.mlflow: ``version`` and the run its model came from, in the MLflow UI; the run's page
    under its experiment when every pass knows it (the TrainingRun's status records it), else the
    UI's route that looks it up (the same link every pass: no status written for nothing). None
    without the UI's address."""
    if not seen.ui:
        return {}
    links = {"versionUrl": ui_version_url(seen.ui, version.name, version.version)}
    if version.run_id:
        trained = ((seen.training_run or {}).get("status") or {}).get("mlflow") or {}
        experiment = str(trained.get("experimentId") or "") if trained.get("runId") == version.run_id else ""
        links["runUrl"] = ui_run_url(seen.ui, version.run_id, experiment)
    return {"mlflow": links}


def _source_to_read(spec: ModelArtifactSpec, seen: Observed) -> Decision:
    """The source to resolve; a TrainingRun's once it succeeded (until then, the state to wait in)."""
    ref = spec.source.training_run_ref
    if ref is None:
        return ReadSource()
    found = states.trainingrun_source(seen.training_run, seen.namespace, ref.name)
    if isinstance(found, states.ArtifactState):
        return Settle(found)
    return ReadSource(found)


def _work(spec: ModelArtifactSpec, seen: Observed) -> list[str]:
    """What this artifact's versions are keyed on besides its uid (see :mod:`slipway.artifact.work`):
    its namespace, name, the spec as the user wrote it and the source it resolved to; the key of
    the earlier rule after it, so a version registered under that one is adopted."""
    if not isinstance(seen.source, states.Source):
        return []
    return work_keys(seen.namespace, seen.name, spec, seen.source.uri)


def _version(
    spec: ModelArtifactSpec, seen: Observed, role: str, source: states.Source, tags: dict[str, str]
) -> ModelVersion | Decision:
    """The version registered for ``role``, else what registering ``source`` takes next."""
    if role not in seen.versions:
        return ReadVersion(role, _work(spec, seen))
    found = seen.versions[role]
    if found is not None:
        return found
    read = seen.files.get(role)
    if read is None:
        return ReadFiles(role, source.uri)
    return _registration(role, source, {states.OWNER_TAG: seen.owner, **tags}, read, _work(spec, seen))


def _registration(role: str, source: states.Source, tags: dict[str, str], read: FilesRead, work: list[str]) -> Decision:
    """Register ``source`` with Slipway's digest, size and file count of its files (whatever its
    producer recorded), once they are all read; none for a URI MLflow does not serve."""
    quantized = role == QUANTIZED
    shown = redact_url(source.uri)
    what = f"the quantizer's output {shown}" if quantized else f"spec.source: {shown}"
    if read.unsupported:
        return Register(role, source, tags, work[0] if work else None)
    if read.too_many is not None:
        return Settle(states.too_many_files(what, read.too_many[0], read.too_many[1], quantized))
    if read.changed:
        again = f"{read.changed}: the files changed while they were read; reading them all again"
        return Settle(states.digesting(what, again, quantized), recheck=DIGEST_REQUEUE_SECONDS)
    tree = read.tree
    if tree is None:
        return Settle(states.digesting(what, read.progress, quantized), recheck=DIGEST_REQUEUE_SECONDS)
    if tree.files == 0:  # emptied since it was found
        return Settle(states.empty_source("spec.source", shown), recheck=EMPTY_SOURCE_RECHECK_SECONDS)
    tags = tags | {states.SOURCE_SIZE_TAG: str(tree.size_bytes), states.SOURCE_FILES_TAG: str(tree.files)}
    skipped = None
    if tree.digest is None:
        skipped = (
            f"{shown}: not digested, its files are more than the operator reads ({MAX_DIGEST_BYTES} bytes): "
            f"{tree.files} files, {tree.size_bytes} bytes"
        )
    else:
        tags[states.SOURCE_DIGEST_TAG] = tree.digest
    return Register(role, source, tags, work[0] if work else None, skipped)


def _quantized(spec: ModelArtifactSpec, seen: Observed, parent: ModelVersion) -> ModelVersion | Decision:
    """The quantized version: found, else made by the quantize step from ``parent`` and registered."""
    if QUANTIZED not in seen.versions:
        return ReadVersion(QUANTIZED, _work(spec, seen))
    done = seen.versions[QUANTIZED]
    if done is not None:
        return done
    method = spec.quantization.method
    env = {"SLIPWAY_MODEL_URI": parent.uri, "SLIPWAY_QUANTIZATION_METHOD": method}
    run = _step_run(spec, seen, QUANTIZE, f"quantizing version {parent.version} ({method})", env)
    if not isinstance(run, Run):
        return run
    output = states.quantized_output(run.run_id, run.tags, parent.version, method)
    if isinstance(output, states.ArtifactState):
        return Settle(output)
    # The tag is the tenant's pod's word: what it names must be that run's own (as a source is checked).
    if seen.tenancy_active and not tenancy.inside_run(output[0], run.run_id, run.artifact_uri):
        return Settle(states.foreign_output(run.run_id, output[0], run.artifact_uri))
    return _version(spec, seen, QUANTIZED, states.Source(output[0], run.run_id), output[1])


def _step_run(spec: ModelArtifactSpec, seen: Observed, step: str, waiting: str, env: dict[str, str]) -> Run | Decision:
    """The step's MLflow run once its Job completed; until then, the Job to create or the state it is in."""
    started = seen.steps.get(step)
    if started is None:
        return StartStep(step)
    if started.job is None:
        return CreateJob(step, _step_job(spec, seen, step, started.run.run_id, env))
    state = states.job_state(step, started.job, waiting, started.refused, started.stuck)
    if state is not None:  # a Job without pods, or a pod stuck before it starts, sends no event: look again
        recheck = FAILED_CREATE_RECHECK_SECONDS if started.refused or started.stuck else NO_PODS_RECHECK_SECONDS
        looking = jobs.without_pods(started.job) or jobs.starting(started.job)
        return Settle(state, recheck=recheck if looking else None, pods=True)
    if started.finished is None:
        return ReadRun(step)
    return started.finished


def _step_job(spec: ModelArtifactSpec, seen: Observed, step: str, run_id: str, env: dict[str, str]) -> dict[str, Any]:
    """The step's Job: Slipway's program, or the spec's image and command, reporting to ``run_id``."""
    settings = spec.quantization if step == QUANTIZE else spec.validation
    env = {
        "MLFLOW_TRACKING_URI": seen.tracking_uri,
        "MLFLOW_RUN_ID": run_id,
        "SLIPWAY_MODELARTIFACT": seen.name,
        **env,
    }
    return build.step_job(
        seen.name,
        seen.namespace,
        step,
        image=getattr(settings, "image", None) or seen.workload_image,
        command=getattr(settings, "command", None),
        args=getattr(settings, "args", None),
        env=env,
        extra_env=getattr(settings, "env", None),
    )


def _outcomes(
    spec: ModelArtifactSpec, seen: Observed, candidate: ModelVersion, fields: dict[str, Any]
) -> list[GateOutcome] | Decision:
    """The gate outcomes: recorded on the version if decided before, else evaluated and recorded
    (the validation metrics, every gate's outcome, then the decision, which is written last)."""
    recorded = states.recorded_outcomes(candidate.tags)
    if recorded is not None:
        return recorded
    tags: dict[str, str] = {}
    outcomes: list[GateOutcome] = []
    validation = spec.validation
    if validation is not None:
        run = _step_run(
            spec, seen, VALIDATE, f"validating version {candidate.version}", {"SLIPWAY_MODEL_URI": candidate.uri}
        )
        if not isinstance(run, Run):
            return run
        if seen.prices is None or seen.baselines is None:
            return ReadGateInputs(sorted({g.baseline for g in validation.gates if g.baseline}))
        values, unavailable = with_derived({key: m.value for key, m in run.metrics.items()}, seen.prices)
        outcomes = evaluate_gates(validation.gates, values, seen.baselines, unavailable)
        for key in states.recorded_metrics(values, validation.gates):
            tags[states.METRIC_TAG + key] = repr(values[key])
        size = states.digest_fields(None, values.get("sizeBytes")).get("size_bytes")
        if size is not None:
            fields.setdefault("size_bytes", size)
    if not seen.recorded:
        return RecordGates(candidate.version, tags | states.decision_tags(outcomes))
    return outcomes


def _aliases(spec: ModelArtifactSpec, seen: Observed, version: str) -> Decision:
    """Point the spec's aliases at ``version``, but never back at an older version than they hold."""
    if seen.held is None:
        return ReadAliases(list(spec.aliases))
    move, kept = states.aliases_to_move(spec.aliases, seen.held, version)
    newer = {alias: str(seen.held[alias]) for alias in kept}
    return MoveAliases(version, move, newer, {states.ALIASES_TAG: ",".join(move) or "-"})
