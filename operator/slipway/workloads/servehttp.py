"""The reference server's HTTP side (the program and its contract: :mod:`slipway.workloads.serve`):
the prediction request's parser, the server's shared state (readiness, the requests in flight, the
stop and drain), and the routes: predict, health, readiness and metrics; with ``--api openai``
the OpenAI-compatible ones, answered by :mod:`slipway.workloads.openai_api`."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from slipway.workloads import openai_api
from slipway.workloads.common import N_FEATURES, digits_split
from slipway.workloads.faults import Faults
from slipway.workloads.modelload import LoadedModel
from slipway.workloads.servemetrics import ServingMetrics

log = logging.getLogger("slipway.workloads.serve")  # the server's one logger

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
