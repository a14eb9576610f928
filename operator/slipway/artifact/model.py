"""ModelArtifact (short name ``ma``): one immutable model version and the gates it must pass."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from slipway.models.base import (
    Condition,
    EnvVar,
    LocalObjectReference,
    ModelRef,
    SlipwayModel,
    StatusModel,
    cel,
    conditions_field,
)

QuantizationMethod = Literal["none", "fp16", "int8-dynamic", "int8-static"]
ArtifactPhase = Literal["Registering", "Quantizing", "Validating", "Validated", "Rejected", "Failed"]

# MLflow refuses aliases named "latest" or shaped like a version ("v3"); RE2 (the
# API server's regex engine) has no look-ahead, so those two are a CEL rule.
ALIAS_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
SOURCE_RULE_MESSAGE = "spec.source: set exactly one of trainingRunRef, mlflowRun or uri"
GATE_THRESHOLD_MESSAGE = "a gate needs min, max, maxRelativeDrop or maxRelativeToBaseline"
GATE_BASELINE_MESSAGE = (
    "maxRelativeDrop and maxRelativeToBaseline need a baseline (an MLflow alias such as production, or a version)"
)
GATE_RANGE_MESSAGE = "a gate's min must not exceed its max"
IMMUTABLE_MESSAGE = "spec is immutable: a new model is a new ModelArtifact (create one with another name)"
ALIAS_MESSAGE = "an alias is a name of letters, digits, _ and -, not 'latest' and not shaped like a version (v3)"
ALIAS_CEL = "self != 'latest' && !self.matches('^v[0-9]+$')"


def check_alias(alias: str) -> str:
    """Refuse what MLflow would refuse as an alias."""
    if not re.fullmatch(ALIAS_PATTERN, alias) or alias == "latest" or re.fullmatch(r"v[0-9]+", alias):
        raise ValueError(ALIAS_MESSAGE)
    return alias


class MlflowRunSource(SlipwayModel):
    """A model logged by an MLflow run."""

    run_id: str = Field(description="MLflow run id.", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9]+$")
    artifact_path: str = Field(
        default="model",
        description="Path of the model inside the run's artifacts; when nothing is there, the name of the "
        "MLflow 3 LoggedModel logged in that run (log_model(name=...)), as MLflow's own client finds it.",
        min_length=1,
        max_length=512,
    )


class ArtifactSource(SlipwayModel):
    """Where the model comes from: exactly one of trainingRunRef, mlflowRun or uri."""

    model_config = cel(
        (
            "[has(self.trainingRunRef), has(self.mlflowRun), has(self.uri)].filter(x, x).size() == 1",
            SOURCE_RULE_MESSAGE,
        ),
    )

    training_run_ref: LocalObjectReference | None = Field(
        default=None, description="A TrainingRun in this namespace; its MLflow run's model is registered."
    )
    mlflow_run: MlflowRunSource | None = Field(default=None, description="An MLflow run and artifact path.")
    uri: str | None = Field(
        default=None,
        description="A model URI MLflow can read, e.g. mlflow-artifacts:/…, runs:/<id>/model, "
        "models:/m-<id> (an MLflow 3 LoggedModel), s3://….",
        min_length=1,
        max_length=2048,
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ArtifactSource:
        if sum(x is not None for x in (self.training_run_ref, self.mlflow_run, self.uri)) != 1:
            raise ValueError(SOURCE_RULE_MESSAGE)
        return self


class Quantization(SlipwayModel):
    """How the model is quantized before validation (a Job)."""

    method: QuantizationMethod = Field(
        default="none",
        description="none (register as is), fp16, int8-dynamic or int8-static (calibrated). "
        "The output is registered as its own MLflow model version.",
    )
    image: str | None = Field(default=None, description="Image of your own quantizer (default: Slipway's).")
    command: list[str] | None = Field(default=None, description="Command of your own quantizer.")
    args: list[str] | None = Field(default=None, description="Arguments of your own quantizer.")


class Gate(SlipwayModel):
    """A condition a metric must meet for the candidate to pass."""

    model_config = cel(
        (
            "has(self.min) || has(self.max) || has(self.maxRelativeDrop) || has(self.maxRelativeToBaseline)",
            GATE_THRESHOLD_MESSAGE,
        ),
        (
            "(!has(self.maxRelativeDrop) && !has(self.maxRelativeToBaseline)) || has(self.baseline)",
            GATE_BASELINE_MESSAGE,
        ),
        ("!has(self.min) || !has(self.max) || self.min <= self.max", GATE_RANGE_MESSAGE),
    )

    metric: str = Field(
        description="Metric the evaluator logs: accuracy, latencyP95Seconds, sizeBytes, predictionsPerCpuSecond, "
        "or any of your own; or costPerMillionPredictions, which the operator derives from the evaluator's "
        "throughput and the price table.",
        min_length=1,
        max_length=250,
    )
    min: float | None = Field(default=None, description="The value must be at least this.")
    max: float | None = Field(default=None, description="The value must be at most this.")
    max_relative_drop: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Largest allowed drop relative to the baseline's value, e.g. 0.02 for 2%.",
    )
    max_relative_to_baseline: float | None = Field(
        default=None,
        gt=0,
        description="Largest allowed ratio of the value to the baseline's, for metrics where lower is better: "
        "e.g. 0.9 on costPerMillionPredictions rejects a version that is not at least 10% cheaper.",
    )
    baseline: str | None = Field(
        default=None,
        description="The version to compare with: an MLflow alias (e.g. production) or a version number.",
        min_length=1,
        max_length=255,
    )
    on_missing_baseline: Literal["pass", "fail"] = Field(
        default="pass",
        description="What a relative gate does when the baseline does not exist yet (e.g. the first model).",
    )

    @model_validator(mode="after")
    def _has_threshold(self) -> Gate:
        relative = self.max_relative_drop is not None or self.max_relative_to_baseline is not None
        if self.min is None and self.max is None and not relative:
            raise ValueError(GATE_THRESHOLD_MESSAGE)
        if relative and self.baseline is None:
            raise ValueError(GATE_BASELINE_MESSAGE)
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(GATE_RANGE_MESSAGE)
        return self


class Validation(SlipwayModel):
    """How the candidate is evaluated (a Job) and the gates it must pass."""

    image: str | None = Field(default=None, description="Image of your own evaluator (default: Slipway's).")
    command: list[str] | None = Field(default=None, description="Command of your own evaluator.")
    args: list[str] | None = Field(default=None, description="Arguments of your own evaluator.")
    env: list[EnvVar] | None = Field(default=None, description="Extra environment of the evaluator.", max_length=64)
    gates: list[Gate] = Field(
        default_factory=list,
        description="Every gate must pass for the artifact to be Validated.",
        max_length=32,
    )


Alias = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        pattern=ALIAS_PATTERN,
        json_schema_extra={"x-kubernetes-validations": [{"rule": ALIAS_CEL, "message": ALIAS_MESSAGE}]},
    ),
    AfterValidator(check_alias),
]


class ArtifactTemplate(SlipwayModel):
    """The quantization, validation and aliases of a ModelArtifact, as a TrainingRun's template."""

    quantization: Quantization = Field(default_factory=Quantization, description="Quantization step.")
    validation: Validation | None = Field(default=None, description="Validation step; omit to skip gates.")
    aliases: list[Alias] = Field(
        default_factory=lambda: ["candidate"],
        description="MLflow aliases pointed at the validated version (default: candidate).",
        max_length=16,
    )


class ModelArtifactSpec(ArtifactTemplate):
    """Desired state of a ModelArtifact. Immutable once created: a new model is a new ModelArtifact."""

    model_config = cel(("self == oldSelf", IMMUTABLE_MESSAGE))

    model: ModelRef = Field(description="The MLflow registered model this version belongs to.")
    source: ArtifactSource = Field(description="Where the model comes from.")


class GateResult(StatusModel):
    """The outcome of one gate."""

    metric: str = Field(description="The gated metric.")
    value: float | None = Field(default=None, description="The candidate's value.")
    threshold: str = Field(default="", description='The rule, e.g. ">= 0.9" or "drop <= 2% of production".')
    baseline_value: float | None = Field(default=None, description="The baseline's value, for relative gates.")
    passed: bool = Field(description="Whether the gate passed.")
    message: str = Field(default="", description="Why it passed or failed.")


class LineageCost(StatusModel):
    """What the artifact's version cost to make: training, quantization and validation (docs/concepts/cost.md)."""

    currency: str | None = Field(default=None, description="The price table's currency.")
    training: float | None = Field(default=None, description="The TrainingRun's cost, every attempt.")
    quantization: float | None = Field(default=None, description="The quantize Job's cost.")
    validation: float | None = Field(default=None, description="The validate Job's cost.")
    total: float | None = Field(default=None, description="The sum: the version's lineage cost.")
    message: str | None = Field(default=None, description="What is not counted, if anything.")


class ArtifactMlflowStatus(StatusModel):
    """Links to the artifact's records in the MLflow UI."""

    version_url: str | None = Field(
        default=None, description="Link to the version validated (the quantized one, if any) in the MLflow UI."
    )
    run_url: str | None = Field(
        default=None, description="Link to the MLflow run that version's model came from, in the MLflow UI."
    )


class ModelArtifactStatus(StatusModel):
    """Observed state of a ModelArtifact."""

    phase: ArtifactPhase | None = Field(default=None, description="Where the artifact is in its lifecycle.")
    model_version: str | None = Field(default=None, description="The registered (unquantized) MLflow version.")
    quantized_version: str | None = Field(default=None, description="The quantized MLflow version, if any.")
    uri: str | None = Field(default=None, description="URI of the artifact that was validated.")
    digest: str | None = Field(default=None, description="sha256 of the artifact files, as sha256:<hex>.")
    size_bytes: int | None = Field(default=None, description="Size of the artifact files.")
    files_digest: str | None = Field(
        default=None,
        description="Slipway's digest over every file of the validated version (sha256:<hex> of the sorted "
        "sha256sum lines), computed when the version was registered: serving pods of this artifact refuse "
        "files that do not have it.",
    )
    mlflow: ArtifactMlflowStatus | None = Field(
        default=None, description="The version and its run in the MLflow UI (links)."
    )
    gates: list[GateResult] | None = Field(default=None, description="The outcome of each gate.")
    cost: LineageCost | None = Field(default=None, description="What the version cost to make.")
    observed_generation: int | None = Field(default=None, description="The generation last reconciled.")
    conditions: list[Condition] | None = conditions_field(
        "Ready, Reconciling, Stalled, Registered, Quantized, Validated"
    )


class ModelArtifact(SlipwayModel):
    """One immutable model version, its quantization and its validation gates."""

    model_config = {"extra": "ignore"}

    spec: ModelArtifactSpec
    status: ModelArtifactStatus | None = None
