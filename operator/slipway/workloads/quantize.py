"""Quantize an ONNX model from MLflow and log the result as artifacts of an MLflow run.

    python -m slipway.workloads.quantize --model-uri URI [--method int8-dynamic]
                                         [--artifact-path model-<method>] [--output-dir DIR]
                                         [--calibration-samples 200] [--output-json PATH]

Methods (``spec.quantization.method`` of a ModelArtifact):
  none          copy the model unchanged (still digested, sized and logged)
  fp16          weight-only float16: float32 weights are stored as float16 and cast back to
                float32 when the model loads, so the file is about half the size and every
                ONNX Runtime CPU kernel still applies (a full float16 graph is a GPU concern)
  int8-dynamic  ONNX Runtime ``quantize_dynamic``: int8 weights, activations quantized per
                batch at run time; no calibration data needed
  int8-static   ONNX Runtime ``quantize_static`` (QDQ format): int8 weights and activations,
                activation ranges calibrated on samples of the training split

Environment (each flag falls back to it):
  MLFLOW_TRACKING_URI          the tracking server (required)
  SLIPWAY_MODEL_URI            --model-uri: runs:/…, models:/name/version, models:/name@alias or
                               mlflow-artifacts:/… of a model directory (or the .onnx itself)
  SLIPWAY_QUANTIZATION_METHOD  --method
  MLFLOW_RUN_ID                the run that receives the artifacts (the operator creates it);
                               when unset a run is created as train does
  SLIPWAY_RESULT_PATH          --output-json (default ./slipway-result.json)

Output: ``<artifact path>/model.onnx`` and ``slipway-model.json`` in the run (the default
artifact path ``model-<method>`` never overwrites a training run's ``model``). The metadata is
the source model's (its serve fault switches ``faults`` included) with ``quantization``,
``parentUri`` and ``parentDigest`` set. Also:
  tags      slipway.dev/quantize-method, -uri, -digest, -size-bytes, -source-uri
  params    quantizeMethod, sourceUri
  metrics   sizeBytes, sourceSizeBytes, sizeRatio
  JSON      {"method", "uri", "runId", "artifactPath", "digest", "sizeBytes",
             "sourceUri", "sourceSizeBytes", "sizeRatio"}
``uri`` is the ``mlflow-artifacts:/`` URI of the model directory: register it with the run id
(``create_model_version(name, source=uri, run_id=runId)``).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from slipway.mlflow import Metric
from slipway.mlflow.programtags import (
    QUANTIZE_DIGEST,
    QUANTIZE_METHOD,
    QUANTIZE_SIZE,
    QUANTIZE_SOURCE_URI,
    QUANTIZE_URI,
)
from slipway.workloads.common import (
    INPUT_NAME,
    METADATA_FILE,
    MODEL_FILE,
    ConfigError,
    digits_split,
    download_model,
    ensure_run,
    env_str,
    file_digest,
    mlflow_client,
    read_metadata,
    result_path,
    run_workload,
    tracked_run,
    write_json_atomic,
)

log = logging.getLogger("slipway.workloads.quantize")

METHODS = ("none", "fp16", "int8-dynamic", "int8-static")
# Small tensors (biases, scales) gain nothing from fp16 and some kernels want them in fp32.
_FP16_MIN_ELEMENTS = 16


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slipway.workloads.quantize", description=__doc__.split("\n")[0])
    parser.add_argument("--model-uri", default=env_str("SLIPWAY_MODEL_URI"))
    parser.add_argument("--method", default=env_str("SLIPWAY_QUANTIZATION_METHOD", "int8-dynamic"))
    parser.add_argument("--artifact-path", default=None, help="default: model-<method>")
    parser.add_argument("--output-dir", default=None, help="keep the quantized model here (default: a temp dir)")
    parser.add_argument("--calibration-samples", type=int, default=200)
    parser.add_argument("--output-json", default=None)
    args = parser.parse_args(argv)
    if not args.model_uri:
        raise ConfigError("no model to quantize: pass --model-uri or set SLIPWAY_MODEL_URI")
    if args.method not in METHODS:
        raise ConfigError(f"quantization method {args.method!r} is not one of {', '.join(METHODS)}")
    if args.calibration_samples < 1:
        raise ConfigError("--calibration-samples must be at least 1")
    args.artifact_path = args.artifact_path or f"model-{args.method}"
    return args


# --------------------------------------------------------------------------- the methods


def quantize_file(source: Path, target: Path, method: str, calibration_samples: int = 200) -> None:
    """Write the ``method``-quantized version of the ONNX model ``source`` to ``target``."""
    if method == "none":
        shutil.copyfile(source, target)
    elif method == "fp16":
        import onnx

        onnx.save(to_fp16_weights(onnx.load(str(source))), str(target))
    elif method == "int8-dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
    elif method == "int8-static":
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

        quantize_static(
            source,
            target,
            digits_calibration(calibration_samples),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
        )
    else:
        raise ConfigError(f"quantization method {method!r} is not one of {', '.join(METHODS)}")


def to_fp16_weights(model: Any) -> Any:
    """Store large float32 initializers as float16, each followed by a Cast back to float32.

    The graph computes exactly as before (in float32) from weights rounded to float16.
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    casts = []
    for initializer in list(graph.initializer):
        if initializer.data_type != TensorProto.FLOAT:
            continue
        weights = numpy_helper.to_array(initializer)
        if weights.size < _FP16_MIN_ELEMENTS:
            continue
        half = numpy_helper.from_array(weights.astype(np.float16), f"{initializer.name}__fp16")
        graph.initializer.remove(initializer)
        graph.initializer.append(half)
        casts.append(
            helper.make_node(
                "Cast", [half.name], [initializer.name], to=TensorProto.FLOAT, name=f"{initializer.name}__to_fp32"
            )
        )
    # Casts first keeps the node list topologically sorted.
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model


def digits_calibration(samples: int) -> Any:
    """ONNX Runtime calibration data: single samples of the training split (never the test split)."""
    from onnxruntime.quantization import CalibrationDataReader

    features = digits_split().train_x[:samples]

    class DigitsCalibration(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.rewind()

        def get_next(self) -> dict[str, Any] | None:
            return next(self._feeds, None)

        def rewind(self) -> None:
            self._feeds = iter([{INPUT_NAME: features[i : i + 1]} for i in range(len(features))])

    return DigitsCalibration()


# --------------------------------------------------------------------------- the program


def quantize(args: argparse.Namespace) -> dict[str, Any]:
    client = mlflow_client()
    run = ensure_run(client, run_name=f"quantize-{args.method}")
    with tracked_run(client, run), tempfile.TemporaryDirectory(prefix="slipway-quantize-") as tmp:
        source = download_model(client, args.model_uri, Path(tmp) / "source")
        out_dir = Path(args.output_dir) if args.output_dir else Path(tmp) / "out"
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / MODEL_FILE
        log.info("quantizing %s (%s) with %s", args.model_uri, source, args.method)
        quantize_file(source, target, args.method, args.calibration_samples)
        metadata = read_metadata(source) | {
            "quantization": args.method,
            "parentUri": args.model_uri,
            "parentDigest": file_digest(source),
        }
        write_json_atomic(out_dir / METADATA_FILE, metadata)

        size, source_size = target.stat().st_size, source.stat().st_size
        digest = file_digest(target)
        uri = client.upload_dir(run.run_id, out_dir, args.artifact_path)
        result = {
            "method": args.method,
            "uri": uri,
            "runId": run.run_id,
            "artifactPath": args.artifact_path,
            "digest": digest,
            "sizeBytes": size,
            "sourceUri": args.model_uri,
            "sourceSizeBytes": source_size,
            "sizeRatio": round(size / source_size, 4),
        }
        client.log_batch(
            run.run_id,
            metrics=[
                Metric("sizeBytes", size),
                Metric("sourceSizeBytes", source_size),
                Metric("sizeRatio", size / source_size),
            ],
            params={"quantizeMethod": args.method, "sourceUri": args.model_uri},
            tags={
                QUANTIZE_METHOD.name: args.method,
                QUANTIZE_URI.name: uri,
                QUANTIZE_DIGEST.name: digest,
                QUANTIZE_SIZE.name: str(size),
                QUANTIZE_SOURCE_URI.name: args.model_uri,
            },
        )
        write_json_atomic(result_path(args.output_json), result)
    log.info("%s: %d -> %d bytes (%.2fx), %s", args.method, source_size, size, size / source_size, uri)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_workload(lambda: quantize(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
