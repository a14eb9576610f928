"""Serve an ONNX model from MLflow over HTTP, with Prometheus metrics and fault switches.

    python -m slipway.workloads.serve [--model-uri URI] [--host $POD_IP] [--port 8080] [--api slipway|openai]

With ``--api openai`` (or SLIPWAY_SERVE_API=openai) it also answers as an OpenAI-compatible LLM
server (completions, chat completions, streaming) and exports vLLM's metrics: see openai_api.py.

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
  2. the model version's tags slipway.fault.errorRate, slipway.fault.latencySeconds,
     slipway.fault.crashOnStart (for models:/name/version and models:/name@alias URIs;
     an alias is resolved once, so files, tags and version label are of one version)
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
import json
import logging
import random
import signal
import tempfile
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
)

from slipway.workloads import openai_api
from slipway.workloads.common import (
    N_FEATURES,
    ConfigError,
    digits_split,
    env_float,
    env_int,
    env_str,
    run_workload,
)
from slipway.workloads.faults import Faults, crash_if_asked
from slipway.workloads.modelload import LoadedModel, load_in_background
from slipway.workloads.servemetrics import ServingMetrics

log = logging.getLogger("slipway.workloads.serve")

MAX_BODY_BYTES = 8 << 20
MAX_INSTANCES = 4096


class BadRequest(ValueError):
    """The request body is not a valid prediction request; answered with 400."""


def parse_instances(body: bytes) -> Any:
    """The float32 [N, 64] array of a ``{"instances": [...]}`` request body, or BadRequest."""
    import numpy as np

    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    instances = request.get("instances") if isinstance(request, dict) else None
    if not isinstance(instances, list) or not instances:
        raise BadRequest('expected {"instances": [[64 numbers], ...]} with at least one instance')
    if len(instances) > MAX_INSTANCES:
        raise BadRequest(f"{len(instances)} instances; at most {MAX_INSTANCES} per request")
    try:
        array = np.asarray(instances, dtype=np.float32)
    except (ValueError, TypeError):
        raise BadRequest("instances must be lists of numbers") from None
    if array.ndim != 2 or array.shape[1] != N_FEATURES:
        raise BadRequest(f"each instance must hold {N_FEATURES} numbers (8x8 pixels), got shape {list(array.shape)}")
    if not np.isfinite(array).all():
        raise BadRequest("instances must be finite numbers")
    return array


class PredictionServer(ThreadingHTTPServer):
    """The HTTP server and the state its handlers share."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: bursts of new connections (streams close theirs) wait, not fail

    def __init__(self, address: tuple[str, int], faults: Faults, metrics: ServingMetrics, api: str = "slipway") -> None:
        super().__init__(address, PredictionHandler)
        self.faults = faults
        self.metrics = metrics
        self.api = api
        if api == "openai":
            self.vllm = openai_api.VllmMetrics(metrics.registry)
            self.openai_images = digits_split().test_x
        self.model: LoadedModel | None = None
        self.stopping = threading.Event()
        self.load_error: BaseException | None = None
        self.random = random.Random()
        self.serving_since = time.monotonic()
        self.active = 0  # requests being answered (a stream until its last token)
        self.idle = threading.Condition()

    def request_started(self) -> None:
        with self.idle:
            self.active += 1

    def request_done(self) -> None:
        with self.idle:
            self.active -= 1
            self.idle.notify_all()

    def drain(self) -> None:
        """Wait until every request in flight is answered (the pod's grace period is the limit)."""
        with self.idle:
            if self.active:
                log.info("draining: %d requests in flight", self.active)
            self.idle.wait_for(lambda: self.active == 0)

    @property
    def model_version(self) -> str:
        return self.model.version if self.model else ""

    @property
    def ready(self) -> bool:
        return self.model is not None and not self.stopping.is_set()

    def serve_model(self, model: LoadedModel) -> None:
        self.metrics.model_info.labels(version=model.version, uri=model.uri).set(1)
        self.serving_since = time.monotonic()
        self.model = model

    def serving_for(self) -> float:
        """Seconds since the model began to serve (errorsAfterSeconds counts from then)."""
        return time.monotonic() - self.serving_since

    def stop(self, delay_seconds: float = 0.0) -> None:
        """Fail readiness now, stop accepting connections after ``delay_seconds`` (from any thread
        but the serving one); answers from then on close their connection. ``serve`` then drains."""
        self.stopping.set()

        def close() -> None:
            time.sleep(delay_seconds)  # keep answering while endpoints drop this pod
            self.shutdown()

        threading.Thread(target=close, name="shutdown", daemon=True).start()


class PredictionHandler(BaseHTTPRequestHandler):
    server: PredictionServer
    protocol_version = "HTTP/1.1"
    _counted = False

    def handle_one_request(self) -> None:
        """One request of a connection, counted from its request line to its last byte, so that a
        stopping server finishes it (see ``PredictionServer.drain``)."""
        self._counted = False
        try:
            super().handle_one_request()
        finally:
            if self._counted:
                self.server.request_done()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:
            self.server.request_started()
            self._counted = True
        return parsed

    def end_headers(self) -> None:
        if self.server.stopping.is_set():
            self.send_header("Connection", "close")  # a stopping server takes no next request on it
        super().end_headers()

    def do_GET(self) -> None:
        openai = self.server.api == "openai"
        if openai and self.path == "/health":
            status = HTTPStatus.OK if self.server.ready else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, b"", "application/json")
        elif openai and self.path == "/v1/models":
            openai_api.models(self)
        elif self.path == "/healthz":
            self._send_json(HTTPStatus.OK, {"status": "ok"})
        elif self.path == "/readyz":
            if self.server.ready:
                self._send_json(HTTPStatus.OK, {"status": "ready", "modelVersion": self.server.model_version})
            else:
                self._send_json(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "not ready"})
        elif self.path == "/metrics":
            self._send(HTTPStatus.OK, self.server.metrics.render(), CONTENT_TYPE_LATEST)
        else:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        if self.server.api == "openai" and self.path in openai_api.ROUTES:
            openai_api.handle(self, self.path)
            return
        if self.path != "/v1/predict":
            self._read_body()
            self._send_json(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})
            return
        metrics = self.server.metrics
        arrived = time.perf_counter()
        metrics.in_flight.inc()
        status = HTTPStatus.INTERNAL_SERVER_ERROR
        try:
            status, answer = self._predict(arrived)
            self._send_json(status, answer)
        finally:
            metrics.in_flight.dec()
            metrics.requests.labels(code=str(int(status))).inc()
            metrics.duration.observe(time.perf_counter() - arrived)

    def _predict(self, arrived: float) -> tuple[HTTPStatus, dict[str, Any]]:
        server = self.server
        body = self._read_body()
        model = server.model
        if model is None or not server.ready:
            return HTTPStatus.SERVICE_UNAVAILABLE, {"error": "model not loaded yet"}
        if body is None:
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body over {MAX_BODY_BYTES} bytes"}
        try:
            instances = parse_instances(body)
        except BadRequest as exc:
            return HTTPStatus.BAD_REQUEST, {"error": str(exc)}
        faults = server.faults
        if faults.fails(server.random.random(), server.serving_for()):
            return HTTPStatus.INTERNAL_SERVER_ERROR, {
                "error": f"injected fault (errorRate={faults.error_rate} from {faults.source('errorRate')})"
            }
        started = time.perf_counter()
        if faults.latency_seconds:
            time.sleep(faults.latency_seconds)  # a slower model: the injected slowness itself
        predictions, probabilities = model.predict(instances)
        finished = time.perf_counter()
        per_token = (finished - started) / len(predictions)
        server.metrics.time_to_first_token.observe(started - arrived + per_token)
        server.metrics.time_per_output_token.observe(per_token)
        return HTTPStatus.OK, {
            "predictions": predictions,
            "probabilities": probabilities,
            "modelVersion": model.version,
        }

    def _read_body(self) -> bytes | None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            return None
        return self.rfile.read(length) if length else b""

    def _send_json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


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
