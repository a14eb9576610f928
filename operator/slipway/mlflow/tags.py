"""Every MLflow tag Slipway reads or writes, in one table (:data:`TAGS`): its name, what it is on, who
writes it, who reads it and why; docs/reference/mlflow-tags.md is generated from it. The tags the
operator writes are here, those the programs it runs set (the trainer's, the quantizer's, ...) in
slipway.mlflow.programtags; slipway.mlflow.tag says how a tag is named and read (its earlier
name too)."""

from __future__ import annotations

from slipway.mlflow.programtags import PROGRAM_TAGS
from slipway.mlflow.tag import OPERATOR, Tag, tag

# --------------------------------------------------------------------------- records and proofs

PROOF = tag(
    "proof",
    "experiments, registered models, runs and model versions Slipway creates",
    OPERATOR,
    "operator: where the namespace allow-list applies, an object found without a valid proof is not used",
    "An HMAC-SHA256, under a key only the operator holds, of what the object is (kind, namespace and name; for "
    "a run or version also its object, id, role and work key).",
)
NAMESPACE = tag(
    "namespace",
    "experiments and registered models Slipway creates",
    OPERATOR,
    "operator, through the proof that covers it",
    "The namespace the experiment or model was created for.",
)
UID = tag(
    "uid",
    "runs and model versions Slipway creates",
    OPERATOR,
    "operator: looked up before any create, so nothing is made twice",
    "The uid of the object that made it.",
)
ROLE = tag(
    "role",
    "a ModelArtifact's step runs and model versions",
    OPERATOR,
    "operator: with the uid, which of its object's records it is",
    "What the run or version is for: `quantize` or `validate` (runs), `source` or `quantized` (versions).",
)
WORK = tag(
    "work",
    "training runs and model versions Slipway creates",
    OPERATOR,
    "operator: an object applied again (a new uid, no status) finds what its predecessor made",
    "A hash of the object's namespace, name and the spec fields that define its work (a ModelArtifact's also "
    "of its resolved source).",
)

# --------------------------------------------------------------------------- what made a run or a version

TRAININGRUN = tag(
    "trainingrun",
    "training runs",
    OPERATOR,
    "operator: a run adopted by a TrainingRun applied again must carry its namespace/name",
    "The TrainingRun that made the run, as namespace/name.",
)
MODEL = tag(
    "model",
    "training runs",
    OPERATOR,
    "nobody (find a model's training runs in MLflow)",
    "The registered model the TrainingRun trains (spec.model.name).",
)
MODELARTIFACT = tag(
    "modelartifact",
    "a ModelArtifact's step runs and model versions",
    OPERATOR,
    "nobody (find an artifact's runs and versions in MLflow)",
    "The ModelArtifact that made it, as namespace/name.",
)

# --------------------------------------------------------------------------- model versions

SOURCE_DIGEST = tag(
    "source-digest",
    "model versions Slipway registers",
    OPERATOR,
    "operator: status.filesDigest; fetch-model: the digest every file must have when the pod spec gives none",
    "Slipway's digest over every file of the version (`sha256:<hex>` of the sorted sha256sum lines).",
    formerly="slipway.source.digest",
)
SOURCE_SIZE = tag(
    "source-size-bytes",
    "model versions Slipway registers",
    OPERATOR,
    "operator: status.sizeBytes",
    "The bytes of the version's files.",
    formerly="slipway.source.sizeBytes",
)
SOURCE_FILES = tag(
    "source-files",
    "model versions Slipway registers",
    OPERATOR,
    "nobody",
    "How many files the version has.",
    formerly="slipway.source.files",
)
DIGEST = tag(
    "digest",
    "quantized model versions",
    "operator, from the quantizer's `slipway.dev/quantize-digest`",
    "operator: status.digest; fetch-model: the model file's digest when there is no files digest",
    "`sha256:<hex>` of the quantized model file.",
    formerly="slipway.digest",
)
SIZE = tag(
    "size-bytes",
    "quantized model versions",
    "operator, from the quantizer's `slipway.dev/quantize-size-bytes`",
    "operator: status.sizeBytes",
    "The quantized model file's size in bytes.",
    formerly="slipway.sizeBytes",
)
PARENT_VERSION = tag(
    "parent-version",
    "quantized model versions",
    OPERATOR,
    "nobody",
    "The version it was quantized from.",
)
QUANTIZATION_METHOD = tag(
    "quantization-method",
    "quantized model versions",
    OPERATOR,
    "nobody",
    "spec.quantization.method.",
)
METRIC = tag(
    "metric-",
    "validated model versions",
    "operator, from the validate run's metrics",
    "operator: the baseline's values of relative gates (a value that is not a finite number counts as missing)",
    "One tag per validation metric (`slipway.dev/metric-<name>`): every gated metric, then others by name, at most 32.",
    formerly="slipway.metric.",
    family=True,
)
GATES = tag(
    "gates",
    "validated model versions",
    OPERATOR,
    "operator: the outcome of a decision made before (an object applied again decides nothing twice)",
    "Each gate's value, threshold and result (JSON).",
)
VALIDATION = tag(
    "validation",
    "validated model versions",
    OPERATOR,
    "operator: the version was decided (written last, after the gates)",
    "The gates' decision, `passed` or `rejected`, recorded before any alias moves.",
)
ALIASES_SET = tag(
    "aliases-set",
    "validated model versions",
    OPERATOR,
    "operator: the aliases moved once, never again",
    "The aliases moved to the version once validated (`-` for none).",
)
COST_TRAINING = tag(
    "cost-training",
    "validated model versions",
    OPERATOR,
    "nobody",
    "What the version's TrainingRun cost, every attempt (with a price table).",
    formerly="slipway.cost.training",
)
COST_QUANTIZATION = tag(
    "cost-quantization",
    "validated model versions",
    OPERATOR,
    "nobody",
    "What the quantize Job cost.",
    formerly="slipway.cost.quantization",
)
COST_VALIDATION = tag(
    "cost-validation",
    "validated model versions",
    OPERATOR,
    "nobody",
    "What the validate Job cost.",
    formerly="slipway.cost.validation",
)
COST_LINEAGE = tag(
    "cost-lineage",
    "validated model versions",
    OPERATOR,
    "nobody",
    "The version's lineage cost: training, quantization and validation together.",
    formerly="slipway.cost.lineage",
)
COST_SERVING_PER_HOUR = tag(
    "cost-serving-per-hour",
    "promoted model versions",
    OPERATOR,
    "nobody",
    "What serving the version cost per hour, by the canary's last analysis.",
    formerly="slipway.cost.servingPerHour",
)
COST_PER_1K_REQUESTS = tag(
    "cost-per-1k-requests",
    "promoted model versions",
    OPERATOR,
    "nobody",
    "What serving cost per thousand requests, by the canary's last analysis.",
    formerly="slipway.cost.per1kRequests",
)
COST_PER_MILLION_TOKENS = tag(
    "cost-per-million-tokens",
    "promoted model versions",
    OPERATOR,
    "nobody",
    "What serving cost per million generated tokens, by the canary's last analysis.",
    formerly="slipway.cost.perMillionTokens",
)
COST_CURRENCY = tag(
    "cost-currency",
    "training runs; validated and promoted model versions",
    OPERATOR,
    "nobody",
    "The price table's currency of the cost figures beside it.",
    formerly="slipway.cost.currency",
)
ROLLBACK = tag(
    "rollback",
    "model versions a canary or a bake rolled back",
    OPERATOR,
    "operator: only that InferenceDeployment, re-created without its status, refuses the version for it",
    "The rollback's record: the InferenceDeployment's namespace/name, its reason, metric and value.",
)

TAGS: tuple[Tag, ...] = (
    PROOF,
    NAMESPACE,
    UID,
    ROLE,
    WORK,
    TRAININGRUN,
    MODEL,
    MODELARTIFACT,
    SOURCE_DIGEST,
    SOURCE_SIZE,
    SOURCE_FILES,
    DIGEST,
    SIZE,
    PARENT_VERSION,
    QUANTIZATION_METHOD,
    METRIC,
    GATES,
    VALIDATION,
    ALIASES_SET,
    COST_TRAINING,
    COST_QUANTIZATION,
    COST_VALIDATION,
    COST_LINEAGE,
    COST_SERVING_PER_HOUR,
    COST_PER_1K_REQUESTS,
    COST_PER_MILLION_TOKENS,
    COST_CURRENCY,
    ROLLBACK,
    *PROGRAM_TAGS,
)
