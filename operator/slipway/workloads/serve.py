"""Serve an ONNX model from MLflow over HTTP, with Prometheus metrics and fault switches.

    python -m slipway.workloads.serve [--model-uri URI] [--host $POD_IP] [--port 8080] [--api slipway|openai]

With ``--api openai`` (or SLIPWAY_SERVE_API=openai) it also answers as an OpenAI-compatible LLM
server (completions, chat completions, streaming) and exports vLLM's metrics: see openai_api.py.
This module is the program; the routes and the server's state are in servehttp.py, the model's
loading in modelload.py, the fault switches in faults.py and the metrics in servemetrics.py.

Endpoints:
  POST /v1/predict  {"instances": [[64 pixel values 0..16], ...]}
                    → {"predictions": [digit, ...], "probabilities": [[10 floats], ...],
                       "modelVersion": "3"}; 400 on bad input, 503 until the model is loaded
  GET  /healthz     200 while the process runs
  GET  /readyz      200 once the model is loaded, 503 before and while shutting down
  GET  /metrics     Prometheus text format:
    slipway_requests_total{code}                    predict requests by HTTP status code
    slipway_request_duration_seconds                histogram of predict request durations
    slipway_time_to_first_token_seconds             histogram, streaming-style (see below)
    slipway_time_per_output_token_seconds           histogram, streaming-style (see below)
    slipway_requests_in_flight                      gauge, for a Pods metric in an HPA
    slipway_model_info{version,uri}                 gauge, 1

A classifier has no tokens, so the streaming metrics are simulated from real timings: each
prediction of a request counts as one output token, and the inference time of a request
(including injected latency) is shared among its predictions. Time per output token is that
share; time to first token is the time from the request's arrival to the end of the first
share. They move the way an LLM server's do when a version is slower, which is what the
``slipway`` analysis preset measures. Buckets start at 10 µs (tokens) and 250 µs (requests).

Environment (flags fall back to it):
  SLIPWAY_MODEL_URI        --model-uri: models:/name/version, models:/name@alias, runs:/…,
                           or mlflow-artifacts:/… (required)
  MLFLOW_TRACKING_URI      the tracking server (required)
  SLIPWAY_MODEL_VERSION    the version label for metrics (default: from a models:/ URI)
  SLIPWAY_MODEL_PATH       a directory where the model's files already are (spec.modelLoad's
                           fetch-model init container put them there): served from it, not
                           downloaded
  POD_IP, PORT             --host, --port (defaults 127.0.0.1 and 8080)
  SLIPWAY_ORT_THREADS      ONNX Runtime intra-op threads (default 1)
  SLIPWAY_SHUTDOWN_DELAY_SECONDS  after SIGTERM, fail readiness and keep serving this long
                           before closing, so endpoints drop the pod first (default 0)
  SLIPWAY_FAULT_*          the fault switches, below

Fault switches, for rollback tests and demos:
  SLIPWAY_FAULT_ERROR_RATE=R       answer predict with 500 (at once) with probability R (0..1)
  SLIPWAY_FAULT_LATENCY_SECONDS=S  add S seconds to the inference of every predict request
                                   (request duration, time to first token and per token all grow)
  SLIPWAY_FAULT_CRASH_ON_START=1   exit with code 1 at start (a crash-looping version)
  SLIPWAY_FAULT_ERRORS_AFTER_SECONDS=S  the error rate applies only once the model has served
                                   S seconds (a version that turns faulty after its promotion)
  SLIPWAY_FAULT_LOAD_SECONDS=S     the model takes S seconds more to load (not ready meanwhile):
                                   a large model's slow start

In a canary rollout the stable and the canary pods get the same environment, so a bad version
must carry its faults itself. Each switch is taken from the first of these that sets it:
  1. the environment variable above (set to 0 to switch off a fault the model carries)
  2. the model version's tags slipway.dev/fault-errorRate, slipway.dev/fault-latencySeconds,
     slipway.dev/fault-crashOnStart, ... (or slipway.fault.<switch>, as earlier versions named
     them; for models:/name/version and models:/name@alias URIs; an alias is resolved once, so
     files, tags and version label are of one version)
  3. the "faults" object of the model's slipway-model.json: {"errorRate": R,
     "latencySeconds": S, "crashOnStart": true}, written by train from SLIPWAY_SERVE_FAULT_*
     and kept by quantize
Values: a number for the rate and the seconds, 1/0 or true/false for the crash. A bad value
is a configuration error (exit code 2). The switches in force, and where each came from, are
logged at start. A crash from tags or metadata happens once the model is downloaded.

SIGTERM and SIGINT shut the server down cleanly (exit code 0): readiness fails at once, new
connections are refused after SLIPWAY_SHUTDOWN_DELAY_SECONDS, and every request in flight (a
stream until its last token) is answered before the server exits; answers sent meanwhile close
their connection. The pod's terminationGracePeriodSeconds bounds the wait.
"""

from __future__ import annotations

import argparse
import logging
import signal
import tempfile
from pathlib import Path
from types import FrameType

from slipway.workloads.common import ConfigError, env_float, env_int, env_str, run_workload
from slipway.workloads.faults import Faults, crash_if_asked
from slipway.workloads.modelload import load_in_background
from slipway.workloads.servehttp import PredictionServer
from slipway.workloads.servemetrics import ServingMetrics

log = logging.getLogger("slipway.workloads.serve")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slipway.workloads.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--model-uri", default=env_str("SLIPWAY_MODEL_URI"))
    parser.add_argument("--host", default=env_str("POD_IP", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=env_int("PORT", 8080, minimum=1))
    parser.add_argument("--threads", type=int, default=env_int("SLIPWAY_ORT_THREADS", 1, minimum=1))
    parser.add_argument(
        "--api",
        choices=("slipway", "openai"),
        default=env_str("SLIPWAY_SERVE_API", "slipway"),
        help="openai: also the OpenAI-compatible endpoints and vLLM's metrics (see openai_api.py)",
    )
    args = parser.parse_args(argv)
    if not args.model_uri:
        raise ConfigError("no model to serve: pass --model-uri or set SLIPWAY_MODEL_URI")
    return args


def serve(args: argparse.Namespace) -> None:
    faults = Faults.from_env()  # checked at once; the model's own switches join once it is downloaded
    crash_if_asked(faults)
    shutdown_delay = env_float("SLIPWAY_SHUTDOWN_DELAY_SECONDS", 0.0, minimum=0.0)
    server = PredictionServer((args.host, args.port), faults, ServingMetrics(), args.api)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("%s: shutting down", signal.Signals(signum).name)
        server.stop(shutdown_delay)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with tempfile.TemporaryDirectory(prefix="slipway-serve-") as workdir:
        load_in_background(server, args, Path(workdir))
        log.info("listening on %s:%d", args.host, args.port)
        try:
            server.serve_forever(poll_interval=0.2)
        finally:
            server.server_close()  # new connections are refused from now on
        server.drain()  # what arrived before the stop is answered in full
    if server.load_error is not None:
        raise server.load_error  # its kind picks the exit code: 75 for MLflow unavailable, else 1 or 2
    log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    return run_workload(lambda: serve(parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
