"""The MLflow tags the programs Slipway runs set for it to read: the trainer's, the quantizer's and the
evaluator's on their runs, and the fault switches a model version carries to the reference model
server. Part of each program's contract (docs/reference/programs/); the whole table is
slipway.mlflow.tags."""

from __future__ import annotations

from slipway.mlflow.tag import Tag, tag

# --------------------------------------------------------------------------- a TrainingRun's run

CHECKPOINT = tag(
    "checkpoint",
    "training runs",
    "trainer, after each checkpoint",
    "operator: status.lastCheckpoint.path",
    "The newest checkpoint's path.",
    formerly="slipway.checkpoint",
)
CHECKPOINT_STEP = tag(
    "checkpoint-step",
    "training runs",
    "trainer, after each checkpoint",
    "operator: status.lastCheckpoint.step; of the runs a TrainingRun applied again may go on in, the one with the "
    "newest checkpoint",
    "The step of the newest checkpoint (an integer).",
    formerly="slipway.checkpoint.step",
)
ATTEMPTS = tag(
    "attempts",
    "training runs",
    "trainer, at each start",
    "operator: status.restarts also counts starts the Job did not count as failures (preemption); the "
    "reference trainer: to count its own starts",
    "How many times the training code started (an integer).",
    formerly="slipway.attempts",
)
RESUMED_FROM_STEP = tag(
    "resumed-from-step",
    "training runs",
    "the reference trainer, when it resumes",
    "nobody",
    "The checkpoint step the latest attempt resumed from.",
    formerly="slipway.resumedFromStep",
)
MODEL_URI = tag(
    "model-uri",
    "training runs",
    "the reference trainer",
    "nobody (Slipway finds the model as MLflow's client does: the run's artifacts at `model`, else its "
    "LoggedModel named `model`)",
    "Where the trainer uploaded its model.",
    formerly="slipway.model.uri",
)
MODEL_DIGEST = tag(
    "model-digest",
    "training runs",
    "trainer (optional)",
    "operator: status.digest of a ModelArtifact registered from the run's artifacts",
    "`sha256:<hex>` of the model file.",
    formerly="slipway.model.digest",
)
MODEL_SIZE = tag(
    "model-size-bytes",
    "training runs",
    "trainer (optional)",
    "operator: status.sizeBytes of a ModelArtifact registered from the run's artifacts",
    "The model file's size in bytes.",
    formerly="slipway.model.sizeBytes",
)

# --------------------------------------------------------------------------- a ModelArtifact's step runs

QUANTIZE_URI = tag(
    "quantize-uri",
    "quantize runs",
    "quantizer (required)",
    "operator: the model it registers as the quantized version; in multi-tenant mode it must be in the run's "
    "own artifacts",
    "The URI of the quantized model (`runs:/<its run>/<path>` or under the run's artifact location).",
    formerly="slipway.quantize.uri",
)
QUANTIZE_DIGEST = tag(
    "quantize-digest",
    "quantize runs",
    "quantizer (optional)",
    "operator: copied to the quantized version's `slipway.dev/digest` (status.digest)",
    "`sha256:<hex>` of the quantized model file.",
    formerly="slipway.quantize.digest",
)
QUANTIZE_SIZE = tag(
    "quantize-size-bytes",
    "quantize runs",
    "quantizer (optional)",
    "operator: copied to the quantized version's `slipway.dev/size-bytes` (status.sizeBytes)",
    "The quantized model file's size in bytes.",
    formerly="slipway.quantize.sizeBytes",
)
QUANTIZE_METHOD = tag(
    "quantize-method",
    "quantize runs",
    "the reference quantizer",
    "nobody",
    "The method applied (SLIPWAY_QUANTIZATION_METHOD).",
    formerly="slipway.quantize.method",
)
QUANTIZE_SOURCE_URI = tag(
    "quantize-source-uri",
    "quantize runs",
    "the reference quantizer",
    "nobody",
    "The model it quantized (SLIPWAY_MODEL_URI).",
    formerly="slipway.quantize.sourceUri",
)
VALIDATE_MODEL_URI = tag(
    "validate-model-uri",
    "validate runs",
    "the reference evaluator",
    "nobody",
    "The model it evaluated (SLIPWAY_MODEL_URI).",
    formerly="slipway.validate.modelUri",
)

# --------------------------------------------------------------------------- model versions

FAULT = tag(
    "fault-",
    "model versions",
    "you (tests, demos)",
    "the reference model server: a fault switch the version carries (`slipway.dev/fault-errorRate`, "
    "`-latencySeconds`, `-crashOnStart`, ...), unless its environment sets it",
    "A fault the reference server injects when it serves the version.",
    formerly="slipway.fault.",
    family=True,
)

PROGRAM_TAGS: tuple[Tag, ...] = (
    CHECKPOINT,
    CHECKPOINT_STEP,
    ATTEMPTS,
    RESUMED_FROM_STEP,
    MODEL_URI,
    MODEL_DIGEST,
    MODEL_SIZE,
    QUANTIZE_URI,
    QUANTIZE_DIGEST,
    QUANTIZE_SIZE,
    QUANTIZE_METHOD,
    QUANTIZE_SOURCE_URI,
    VALIDATE_MODEL_URI,
    FAULT,
)
