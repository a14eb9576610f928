"""Validate a model: accuracy on the held-out split, CPU latency percentiles, size.

    python -m slipway.workloads.validate --model-uri URI [--latency-runs 200] [--warmup-runs 20]
                                         [--threads 1] [--output-json PATH]

Accuracy is measured on the test part of the digits split, which ``train`` never sees
(:func:`slipway.workloads.common.digits_split`). Latency is the wall time of single-sample
``InferenceSession.run`` calls on CPU with ONNX Runtime, after warmup runs, cycling through
the test samples; p50 and p95 by linear interpolation. Size is the bytes of ``model.onnx``.
Throughput is predictions per CPU-second: the whole test split in one batch, run again until
``THROUGHPUT_CPU_SECONDS`` of the process's CPU time are spent (ONNX Runtime's threads included);
from it and the price of a CPU-hour the operator derives ``costPerMillionPredictions``.

Environment (each flag falls back to it):
  MLFLOW_TRACKING_URI     the tracking server (required)
  SLIPWAY_MODEL_URI       --model-uri: runs:/…, models:/name/version, models:/name@alias or
                          mlflow-artifacts:/… of a model directory (or the .onnx itself)
  MLFLOW_RUN_ID           the run that receives the metrics (the operator creates it); when unset
                          a run is created as train does
  SLIPWAY_LATENCY_RUNS    --latency-runs
  SLIPWAY_RESULT_PATH     --output-json (default ./slipway-result.json)

Output: metrics ``accuracy``, ``latencyP50Seconds``, ``latencyP95Seconds``, ``sizeBytes``,
``predictionsPerCpuSecond`` on
the run; params ``modelUri``, ``latencyRuns``; tag ``slipway.dev/validate-model-uri``; and the JSON
``{"modelUri", "runId", "metrics": {name: value}}``.

The evaluator contract, for a custom ``spec.validation.image``/``command``: read the model
from ``SLIPWAY_MODEL_URI``, log each metric the gates name to the MLflow run in
``MLFLOW_RUN_ID`` (any metric name works; the built-in gates use the five above; log
``predictionsPerCpuSecond`` and/or ``predictionsPerGpuSecond`` for a cost gate), exit 0.
The operator reads the metrics from that run and evaluates the gates itself.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slipway.mlflow import Metric, now_millis
from slipway.mlflow.programtags import VALIDATE_MODEL_URI
from slipway.workloads.common import (
    INPUT_NAME,
    ConfigError,
    DigitsSplit,
    digits_split,
    download_model,
    ensure_run,
    env_int,
    env_str,
    mlflow_client,
    onnx_session,
    percentile,
    result_path,
    run_workload,
    tracked_run,
    write_json_atomic,
)

log = logging.getLogger("slipway.workloads.validate")


@dataclass(frozen=True)
class Evaluation:
    """What validation measured, under the metric names the gates use."""

    accuracy: float
    latency_p50_seconds: float
    latency_p95_seconds: float
    size_bytes: int
    predictions_per_cpu_second: float

    def metrics(self) -> dict[str, float]:
        return {
            "accuracy": self.accuracy,
            "latencyP50Seconds": self.latency_p50_seconds,
            "latencyP95Seconds": self.latency_p95_seconds,
            "sizeBytes": float(self.size_bytes),
            "predictionsPerCpuSecond": self.predictions_per_cpu_second,
        }


THROUGHPUT_CPU_SECONDS = 0.5


def throughput(run: Callable[[], Any], batch: int, cpu_seconds: float = THROUGHPUT_CPU_SECONDS) -> float:
    """Predictions per CPU-second of ``run`` (one batch of ``batch`` predictions), measured by the
    process's CPU time (not the wall clock, which a busy node stretches) over at least ``cpu_seconds``."""
    run()  # warm
    done, start = 0, time.process_time()
    while True:
        run()
        done += batch
        spent = time.process_time() - start
        if spent >= cpu_seconds:
            return done / spent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slipway.workloads.validate", description=__doc__.split("\n")[0])
    parser.add_argument("--model-uri", default=env_str("SLIPWAY_MODEL_URI"))
    parser.add_argument("--latency-runs", type=int, default=env_int("SLIPWAY_LATENCY_RUNS", 200, minimum=1))
    parser.add_argument("--warmup-runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--output-json", default=None)
    args = parser.parse_args(argv)
    if not args.model_uri:
        raise ConfigError("no model to validate: pass --model-uri or set SLIPWAY_MODEL_URI")
    if args.latency_runs < 1 or args.warmup_runs < 0 or args.threads < 1:
        raise ConfigError("--latency-runs and --threads must be at least 1, --warmup-runs at least 0")
    return args


def evaluate(model_file: Path, data: DigitsSplit, latency_runs: int, warmup_runs: int, threads: int) -> Evaluation:
    """Accuracy on the test split, single-sample latency percentiles, and file size."""
    session = onnx_session(model_file, threads)
    labels = session.run(["label"], {INPUT_NAME: data.test_x})[0]
    accuracy = float((labels.reshape(-1) == data.test_y).mean())
    samples = [data.test_x[i : i + 1] for i in range(len(data.test_x))]
    for i in range(warmup_runs):
        session.run(None, {INPUT_NAME: samples[i % len(samples)]})
    latencies = []
    for i in range(latency_runs):
        start = time.perf_counter()
        session.run(None, {INPUT_NAME: samples[i % len(samples)]})
        latencies.append(time.perf_counter() - start)
    per_cpu_second = throughput(lambda: session.run(["label"], {INPUT_NAME: data.test_x}), len(data.test_x))
    return Evaluation(
        accuracy=accuracy,
        latency_p50_seconds=percentile(latencies, 50),
        latency_p95_seconds=percentile(latencies, 95),
        size_bytes=model_file.stat().st_size,
        predictions_per_cpu_second=per_cpu_second,
    )


def validate(args: argparse.Namespace) -> dict[str, Any]:
    client = mlflow_client()
    run = ensure_run(client, run_name="validate")
    with tracked_run(client, run), tempfile.TemporaryDirectory(prefix="slipway-validate-") as tmp:
        model_file = download_model(client, args.model_uri, Path(tmp))
        evaluation = evaluate(model_file, digits_split(), args.latency_runs, args.warmup_runs, args.threads)
        metrics = evaluation.metrics()
        timestamp = now_millis()
        client.log_batch(
            run.run_id,
            metrics=[Metric(k, v, 0, timestamp) for k, v in metrics.items()],
            params={"modelUri": args.model_uri, "latencyRuns": args.latency_runs},
            tags={VALIDATE_MODEL_URI.name: args.model_uri},
        )
        result = {"modelUri": args.model_uri, "runId": run.run_id, "metrics": metrics}
        write_json_atomic(result_path(args.output_json), result)
    log.info(
        "%s: accuracy %.4f, latency p50 %.6fs p95 %.6fs, %d bytes, %.0f predictions per CPU-second",
        args.model_uri,
        evaluation.accuracy,
        evaluation.latency_p50_seconds,
        evaluation.latency_p95_seconds,
        evaluation.size_bytes,
        evaluation.predictions_per_cpu_second,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    return run_workload(lambda: validate(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
