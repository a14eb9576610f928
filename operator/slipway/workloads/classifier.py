"""The digits classifier both reference trainers fit (:mod:`slipway.workloads.train` and
:mod:`slipway.workloads.train_mlflow`): its state, one training step, and the ONNX model with its
metadata file (the layout is in common.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slipway.workloads.common import (
    CLASSES,
    INPUT_NAME,
    METADATA_FILE,
    MODEL_FILE,
    N_FEATURES,
    DigitsSplit,
    env_flag,
    env_float,
    env_str,
    write_json_atomic,
)


@dataclass
class TrainingState:
    """The fitted scaler, the classifier mid-training, and the last completed step."""

    scaler: Any
    classifier: Any
    step: int = 0

    def to_checkpoint(self) -> dict[str, Any]:
        # Plain dicts, not this class: a checkpoint must not name the module that wrote it.
        return {"scaler": self.scaler, "classifier": self.classifier, "step": self.step}

    @classmethod
    def from_checkpoint(cls, payload: Any) -> TrainingState:
        if not isinstance(payload, dict) or not {"scaler", "classifier", "step"} <= payload.keys():
            raise ValueError("not a checkpoint of slipway.workloads.train")
        return cls(payload["scaler"], payload["classifier"], int(payload["step"]))


def new_state(args: argparse.Namespace, data: DigitsSplit) -> TrainingState:
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    classifier = MLPClassifier(
        hidden_layer_sizes=(args.hidden_units,),
        learning_rate_init=args.learning_rate,
        batch_size=args.batch_size,
        random_state=args.seed,
    )
    return TrainingState(scaler=StandardScaler().fit(data.train_x), classifier=classifier)


def training_labels(data: DigitsSplit, bad_model: bool, seed: int) -> Any:
    """The labels to fit; shuffled (so the model learns nothing) for SLIPWAY_BAD_MODEL=1."""
    if not bad_model:
        return data.train_y
    import numpy as np

    return np.random.default_rng(seed).permutation(data.train_y)


def train_step(state: TrainingState, features: Any, labels: Any) -> dict[str, float]:
    """One epoch of minibatch updates; returns the step's metrics."""
    state.classifier.partial_fit(features, labels, classes=list(CLASSES))
    state.step += 1
    return {
        "loss": float(state.classifier.loss_),
        "accuracy": float(state.classifier.score(features, labels)),
        "step": float(state.step),
    }


def export_model(state: TrainingState, directory: Path, metadata: dict[str, Any]) -> Path:
    """Write ``model.onnx`` (scaler + classifier, raw pixels in) and its metadata file."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import Pipeline

    pipeline = Pipeline([("scaler", state.scaler), ("classifier", state.classifier)])
    model = to_onnx(
        pipeline,
        initial_types=[(INPUT_NAME, FloatTensorType([None, N_FEATURES]))],
        options={MLPClassifier: {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    directory.mkdir(parents=True, exist_ok=True)
    model_file = directory / MODEL_FILE
    model_file.write_bytes(model.SerializeToString())
    write_json_atomic(directory / METADATA_FILE, metadata)
    return model_file


def serve_faults_from_env() -> dict[str, Any]:
    """The ``faults`` object of the model's metadata: the SLIPWAY_SERVE_FAULT_* switches that are set."""
    faults: dict[str, Any] = {}
    if env_str("SLIPWAY_SERVE_FAULT_ERROR_RATE"):
        faults["errorRate"] = env_float("SLIPWAY_SERVE_FAULT_ERROR_RATE", 0.0, minimum=0.0, maximum=1.0)
    if env_str("SLIPWAY_SERVE_FAULT_LATENCY_SECONDS"):
        faults["latencySeconds"] = env_float("SLIPWAY_SERVE_FAULT_LATENCY_SECONDS", 0.0, minimum=0.0)
    if env_str("SLIPWAY_SERVE_FAULT_CRASH_ON_START"):
        faults["crashOnStart"] = env_flag("SLIPWAY_SERVE_FAULT_CRASH_ON_START")
    return faults


def model_metadata(args: argparse.Namespace, run_id: str, bad_model: bool, faults: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "format": "onnx",
        "file": MODEL_FILE,
        "input": {"name": INPUT_NAME, "dtype": "float32", "shape": [None, N_FEATURES]},
        "outputs": {"label": "int64 [N]", "probabilities": "float32 [N, 10]"},
        "classes": list(CLASSES),
        "dataset": "scikit-learn digits, 8x8 pixels valued 0..16, flattened row by row",
        "framework": "scikit-learn MLPClassifier behind a StandardScaler",
        "quantization": "none",
        "trainedSteps": args.steps,
        "badModel": bad_model,
        "runId": run_id,
    }
    if faults:
        metadata["faults"] = faults
    return metadata
