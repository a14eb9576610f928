"""ModelArtifact phase and conditions for each stage of its lifecycle (pure)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slipway.artifact.gates import GateOutcome, non_finite
from slipway.mlflow.errors import MlflowError
from slipway.mlflow.programtags import QUANTIZE_DIGEST, QUANTIZE_SIZE, QUANTIZE_URI
from slipway.mlflow.tags import (
    ALIASES_SET,
    DIGEST,
    GATES,
    METRIC,
    MODELARTIFACT,
    PARENT_VERSION,
    QUANTIZATION_METHOD,
    SIZE,
    SOURCE_DIGEST,
    SOURCE_FILES,
    SOURCE_SIZE,
    VALIDATION,
)
from slipway.redact import redact_url
from slipway.status import jobs
from slipway.status.conditions import Cond, ready, reconciling, settled, stalled

REGISTERED, QUANTIZED, VALIDATED = "Registered", "Quantized", "Validated"


@dataclass(frozen=True)
class ArtifactState:
    phase: str
    conditions: list[Cond]


def _state(
    phase: str,
    summary: Callable[[str, str], list[Cond]],
    reason: str,
    message: str,
    done: tuple[bool, bool, bool] = (False, False, False),
) -> ArtifactState:
    """Summary conditions plus Registered / Quantized / Validated: True when done, else the current reason."""
    steps = [
        Cond(type_, "True", "Done") if finished else Cond(type_, "False", reason, message)
        for type_, finished in zip((REGISTERED, QUANTIZED, VALIDATED), done, strict=True)
    ]
    return ArtifactState(phase, [*summary(reason, message), *steps])


def waiting_for_source(message: str) -> ArtifactState:
    return _state("Registering", reconciling, "WaitingForSource", message)


def registering(message: str = "registering the model version in MLflow") -> ArtifactState:
    return _state("Registering", reconciling, "Registering", message)


def source_failed(reason: str, message: str) -> ArtifactState:
    return _state("Failed", stalled, reason, message)


def empty_source(field: str, looked_for: str, reason: str = "EmptySource") -> ArtifactState:
    """The source holds no file: nothing is registered, and it is looked for again (a run may still
    be logging its model)."""
    message = (
        f"{field}: no model files found; looked for {looked_for}; log the model there (e.g. "
        "mlflow.sklearn.log_model(model, name=...) in that run), or name where it is; nothing was "
        "registered and no alias moved"
    )
    return _state("Registering", stalled, reason, message)


def digesting(what: str, progress: str, quantized: bool = False) -> ArtifactState:
    """Slipway reads the files of a version to register, a few seconds of each pass at a time."""
    message = (
        f"{what}: {progress}; carried on in the next pass (the count is the operator's: a restarted "
        "operator starts again)"
    )
    if quantized:
        return _state("Quantizing", reconciling, "Digesting", message, (True, False, False))
    return _state("Registering", reconciling, "Digesting", message)


def too_many_files(what: str, counted: str, limit: int, quantized: bool = False) -> ArtifactState:
    """The files of a version to register are more than the operator digests: nothing is registered.
    ``what``: the source in words (its field first); ``counted``: "files" or "directories"."""
    message = (
        f"{what} holds more than {limit} {counted}, more than the operator digests (its setting "
        f"--max-digest-files, SLIPWAY_MAX_DIGEST_FILES: {limit}); Slipway reads every file of a model it "
        "registers: log the model as fewer files (an archive), or a cluster admin raises the setting; "
        "nothing was registered and no alias moved"
    )
    done = (True, False, False) if quantized else (False, False, False)
    return _state("Quantizing" if quantized else "Registering", stalled, "TooManyFiles", message, done)


def quantizing(message: str) -> ArtifactState:
    return _state("Quantizing", reconciling, "Quantizing", message, (True, False, False))


def validating(message: str) -> ArtifactState:
    return _state("Validating", reconciling, "Validating", message, (True, True, False))


def step_failed(step: str, message: str) -> ArtifactState:
    """The quantize or validate Job failed: a person must look (its logs say why)."""
    if step == "quantize":
        return _state("Failed", stalled, "QuantizationFailed", message, (True, False, False))
    return _state("Failed", stalled, "ValidationFailed", message, (True, True, False))


def decided(outcomes: list[GateOutcome], aliases: list[str], version: str) -> ArtifactState:
    """Validated (aliases moved) or Rejected (the failing gates named, with value and threshold)."""
    failed = [o for o in outcomes if not o.passed]
    if failed:
        reasons = "; ".join(f"gate {o.metric} failed: {o.message} (threshold {o.threshold})" for o in failed)
        return _state("Rejected", stalled, "GateFailed", f"{reasons}; no alias moved", (True, True, False))
    moved = f"; aliases {', '.join(aliases)} point at version {version}" if aliases else ""
    return _state("Validated", ready, "Validated", f"{len(outcomes)} gates passed{moved}", (True, True, True))


# -- decisions between the I/O steps (pure) ------------------------------------------------------

FINAL = ("Validated", "Rejected", "Failed")


@dataclass(frozen=True)
class Source:
    """Where the model to register lives, and what its producer recorded about it."""

    uri: str
    run_id: str | None
    digest: str | None = None
    size_bytes: str | None = None
    model_id: str | None = None  # an MLflow 3 logged model, registered with its id


def decided_at_generation(body: Mapping[str, Any]) -> bool:
    """A decision was reached for the current spec (immutable): nothing changes any more."""
    return settled(body, FINAL)


# The MLflow tags of an artifact's versions and runs (slipway.mlflow.tags says who writes and reads each).
OWNER_TAG = MODELARTIFACT.name  # namespace/name, on the versions and runs Slipway makes for an artifact
SOURCE_DIGEST_TAG = SOURCE_DIGEST.name  # Slipway's digest over the source's files, on the source version
SOURCE_SIZE_TAG = SOURCE_SIZE.name
SOURCE_FILES_TAG = SOURCE_FILES.name
DECISION_TAG = VALIDATION.name
GATES_TAG = GATES.name
ALIASES_TAG = ALIASES_SET.name
METRIC_TAG = METRIC.name
QUANTIZE_URI_TAG = QUANTIZE_URI.name  # set by the quantize pod: the model it made


def needs_quantization(method: str, image: str | None, command: list[str] | None) -> bool:
    return method != "none" or bool(image) or bool(command)


def trainingrun_source(run: Mapping[str, Any] | None, namespace: str, ref: str) -> str | ArtifactState:
    """The MLflow run id a ``trainingRunRef`` source registers from, or the state to wait in."""
    if run is None:
        return waiting_for_source(f"TrainingRun {namespace}/{ref} does not exist (yet)")
    status = run.get("status") or {}
    if status.get("phase") == "Failed":
        return source_failed("TrainingRunFailed", f"TrainingRun {ref} failed; nothing to register")
    run_id = (status.get("mlflow") or {}).get("runId")
    if status.get("phase") != "Succeeded" or not run_id:
        return waiting_for_source(f"waiting for TrainingRun {ref} to succeed")
    return str(run_id)


def _step_phase(step: str) -> tuple[str, tuple[bool, bool, bool]]:
    """The phase a step's Job holds the artifact in, and the steps done by then."""
    return ("Quantizing", (True, False, False)) if step == "quantize" else ("Validating", (True, True, False))


def job_state(
    step: str,
    job: Mapping[str, Any],
    waiting: str,
    create_failure: str | None = None,
    stuck: tuple[str, str] | None = None,
) -> ArtifactState | None:
    """Why a step's Job is not done (failed, its pods refused by the API server, a pod that cannot
    start, or still running), or None once it completed."""
    if stuck is not None and not jobs.is_complete(job) and not jobs.failure(job):
        reason, said = stuck
        phase, done = _step_phase(step)
        return _state(phase, stalled, reason, f"the {step} Job {job['metadata']['name']}: {said}", done)
    if create_failure is not None:
        message = (
            f"the API server refuses the pods of the {step} Job {job['metadata']['name']}: {create_failure}; "
            "fix the namespace's quota or policy and the Job creates them"
        )
        phase, done = _step_phase(step)
        return _state(phase, stalled, "FailedCreate", message, done)
    failed = jobs.failure(job)
    if failed:
        message = (
            f"the {step} Job {job['metadata']['name']} failed ({failed.get('reason')}: "
            f"{failed.get('message', '')}); see its pods' logs"
        )
        return step_failed(step, message)
    if not jobs.is_complete(job):
        return quantizing(waiting) if step == "quantize" else validating(waiting)
    return None


def quantized_output(
    run_id: str, tags: Mapping[str, str], parent: str, method: str
) -> tuple[str, dict[str, str]] | ArtifactState:
    """(URI, version tags) of what the quantizer made, from its run's tags (each also under the name
    earlier versions read); Failed if it set none."""
    uri = QUANTIZE_URI.read(tags)
    if not uri:
        return step_failed(
            "quantize", f"the quantizer finished without setting tag {QUANTIZE_URI_TAG} on MLflow run {run_id}"
        )
    out = {PARENT_VERSION.name: parent, QUANTIZATION_METHOD.name: method}
    for made, kept in ((QUANTIZE_DIGEST, DIGEST), (QUANTIZE_SIZE, SIZE)):
        value = made.read(tags)
        if value:
            out[kept.name] = value
    return uri, out


def foreign_output(run_id: str, uri: str, artifact_root: str) -> ArtifactState:
    """The quantizer's tag names a model outside its own run's artifacts: refused, nothing registered."""
    shown = redact_url(uri if len(uri) <= 200 else uri[:197] + "...")
    root = redact_url(artifact_root.rstrip("/")) if artifact_root else ""
    expected = f"runs:/{run_id}/<path>" + (f" or {root}/<path>" if root else "")
    message = (
        f"MLflow tag {QUANTIZE_URI_TAG} of the quantize run {run_id} is {shown!r}, outside that run's own "
        f"artifacts; the quantizer must log its model in its own run and set the tag to {expected}; "
        "nothing was registered and no alias moved"
    )
    return _state("Failed", stalled, "SourceNotAllowed", message, (True, False, False))


def recorded_outcomes(tags: Mapping[str, str]) -> list[GateOutcome] | None:
    """The gate outcomes recorded on a version by an earlier decision, if it was decided."""
    if not (tags.get(DECISION_TAG) and tags.get(GATES_TAG)):
        return None
    try:
        return [
            GateOutcome(
                str(g["metric"]),
                _number(g.get("value")),
                str(g.get("threshold", "")),
                _number(g.get("baselineValue")),
                bool(g["passed"]),
                str(g.get("message", "")),
            )
            for g in json.loads(tags[GATES_TAG])
        ]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise MalformedTag(GATES_TAG, tags[GATES_TAG], exc) from None


class MalformedTag(MlflowError):
    """A tag Slipway reads back from a model version is not what it wrote (someone edited it in MLflow)."""

    def __init__(self, tag: str, value: str, exc: Exception) -> None:
        shown = value if len(value) <= 80 else value[:77] + "..."
        super().__init__(
            f"the model version's MLflow tag {tag} is not what Slipway records ({type(exc).__name__}: {shown!r}); "
            f"delete the tag (and {DECISION_TAG}) in MLflow and the gates are evaluated again",
            error_code="MALFORMED_TAG",
        )


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def decision_tags(outcomes: list[GateOutcome]) -> dict[str, str]:
    """What is recorded on the version: every gate's outcome, then the decision."""
    return {
        GATES_TAG: json.dumps([o.to_status() for o in outcomes]),
        DECISION_TAG: "passed" if all(o.passed for o in outcomes) else "rejected",
    }


def recorded_aliases(tags: Mapping[str, str]) -> list[str] | None:
    """The aliases an earlier pass moved to this version (None: not moved yet)."""
    value = tags.get(ALIASES_TAG)
    return None if value is None else [a for a in value.split(",") if a and a != "-"]


def aliases_to_move(aliases: list[str], held: Mapping[str, str | None], version: str) -> tuple[list[str], list[str]]:
    """(aliases to point at ``version``, aliases kept on a newer version): never move one back."""
    kept = [a for a in aliases if held.get(a) is not None and int(str(held[a])) > int(version)]
    return [a for a in aliases if a not in kept], kept


def metric_values(tags: Mapping[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """Validation metrics recorded on a version (tags ``slipway.dev/metric-<name>``, or
    ``slipway.metric.<name>`` as earlier versions wrote them), and why a tag is not used, by metric:
    a tag that is not a finite number ("nan", "inf", text someone wrote in MLflow) is refused, as if
    the metric were not reported, never parsed into a value a gate compares."""
    values: dict[str, float] = {}
    refused: dict[str, str] = {}
    for name, key in METRIC.members(tags).items():
        text = tags[key]
        shown = text if len(text) <= 40 else text[:37] + "..."
        try:
            number = float(text)
        except ValueError:
            refused[name] = f"its MLflow tag {key} is {shown!r}, not a number"
            continue
        what = non_finite(number)
        if what is not None:
            refused[name] = f"its MLflow tag {key} is {shown!r}, {what}, not finite"
        else:
            values[name] = number
    return values, refused


MAX_RECORDED_METRICS = 32


def recorded_metrics(values: Mapping[str, float], gates: Sequence[Any]) -> list[str]:
    """The validation metrics tagged on the version: every gate's, then others by name, at most
    MAX_RECORDED_METRICS in all, finite ones only (a validator logging 100k metrics costs 32 tag writes, not 100k)."""
    finite = {k for k, v in values.items() if non_finite(v) is None}  # a NaN is in the gates' messages
    gated = sorted({g.metric for g in gates} & finite)
    others = sorted(k for k in finite if k not in gated and len(k) <= 250)
    return gated + others[: max(0, MAX_RECORDED_METRICS - len(gated))]


def digest_fields(digest: str | None, size: Any) -> dict[str, Any]:
    """status.digest (as sha256:<hex>) and status.sizeBytes, from what the workload recorded."""
    fields: dict[str, Any] = {}
    hexdigest = (digest or "").removeprefix("sha256:")
    if re.fullmatch(r"[0-9a-f]{64}", hexdigest):  # anything else a workload wrote is left out of status
        fields["digest"] = f"sha256:{hexdigest}"
    if isinstance(size, float) and size.is_integer() and size >= 0:
        size = int(size)  # a metric: 1234.0
    if size is not None and str(size).isdigit() and len(str(size)) <= 18:
        fields["size_bytes"] = int(size)
    return fields
