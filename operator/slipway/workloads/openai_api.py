"""The OpenAI-compatible mode of the reference server (``serve --api openai``): what an LLM
server such as vLLM answers and exports, produced by the small digits model, so the ``vllm``
analysis preset and LLM rollouts can be tested on real scraped series without a GPU.

Endpoints (besides /healthz, /readyz and /metrics):
  GET  /health                200 once the model is loaded (vLLM's readiness), 503 before
  GET  /v1/models             the served model
  POST /v1/completions        {"prompt", "max_tokens" (16), "stream"}
  POST /v1/chat/completions   {"messages", "max_tokens" (16), "stream"}
With ``"stream": true`` the answer is server-sent events, one chunk per token, then
``data: [DONE]``. Each token is one prediction of the model on a digit image picked from the
prompt, its text the predicted digit; tokens come at ``SLIPWAY_TOKENS_PER_SECOND`` (default 100).

Metrics, under vLLM's names (label ``model_name``):
  vllm:time_to_first_token_seconds      histogram: arrival to the first token
  vllm:inter_token_latency_seconds      histogram: between consecutive tokens
  vllm:e2e_request_latency_seconds      histogram: arrival to the last token
  vllm:request_success_total{finished_reason}   counter (length, stop)
  vllm:generation_tokens_total          counter: tokens generated (the cost per token's denominator)
  vllm:num_requests_running             gauge (an HPA Pods metric)
  vllm:num_requests_waiting             gauge: requests queued for a sequence slot (KEDA's queue depth)
  vllm:kv_cache_usage_perc              gauge, 0..1: the KV cache in use, here the share of the sequence
                                        slots taken (what GIE's endpoint picker scores, with the queue)
  http_requests_total{handler,method,status}    as vLLM's API server exports it through
                                        prometheus-fastapi-instrumentator: status grouped (2xx, 5xx)

At most ``SLIPWAY_MAX_NUM_SEQS`` requests generate at once (vLLM's ``--max-num-seqs``; default
256): the others wait, in arrival order, counted in ``vllm:num_requests_waiting``.

Fault switches (env, model version tag ``slipway.dev/fault-<switch>``, or model metadata, as the
others): ``firstTokenDelaySeconds`` (added before the first token: a slower prefill) and
``tokenDelaySeconds`` (added before every later token: slower decoding); ``errorRate`` answers
500s, ``latencySeconds`` delays every token.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from slipway.workloads.common import env_float, env_int

if TYPE_CHECKING:
    from slipway.workloads.servehttp import PredictionHandler

# vLLM's own buckets, with finer ones below 10 ms for a small model's tokens.
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
MAX_TOKENS = 4096
ROUTES = ("/v1/completions", "/v1/chat/completions")


class VllmMetrics:
    """The series vLLM's OpenAI-compatible server exports, in the server's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            ["model_name"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Time between tokens.",
            ["model_name"],
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "End to end request latency.",
            ["model_name"],
            buckets=E2E_BUCKETS,
            registry=registry,
        )
        self.success = Counter(
            "vllm:request_success", "Finished requests.", ["model_name", "finished_reason"], registry=registry
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generated tokens.", ["model_name"], registry=registry
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Requests being generated.", ["model_name"], registry=registry
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Requests waiting for a sequence slot.", ["model_name"], registry=registry
        )
        self.kv_cache = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage (1 = full).", ["model_name"], registry=registry
        )
        # The scheduler's sequence slots: requests past them wait (vLLM's --max-num-seqs).
        self.max_num_seqs = env_int("SLIPWAY_MAX_NUM_SEQS", 256, minimum=1)
        self.slots = threading.BoundedSemaphore(self.max_num_seqs)
        self._taken = 0
        self._lock = threading.Lock()
        self.http = Counter(
            "http_requests",
            "HTTP requests by handler, method and status group.",
            ["handler", "method", "status"],
            registry=registry,
        )
        for route in ROUTES:  # every series from the first scrape on (see ServingMetrics)
            for status in ("2xx", "4xx", "5xx"):
                self.http.labels(route, "POST", status)

    def taken(self, model: str, delta: int) -> None:
        """A sequence slot taken (+1) or given back (-1): the running requests and the KV cache's use."""
        with self._lock:
            self._taken += delta
            self.running.labels(model).set(self._taken)
            self.kv_cache.labels(model).set(self._taken / self.max_num_seqs)


class BadCompletion(ValueError):
    """An invalid completion request; answered 400 as OpenAI does."""


def parse_request(body: bytes, chat: bool) -> tuple[str, int, bool]:
    """(prompt text, max_tokens, stream) of a completions or chat completions body."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadCompletion(f"body is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadCompletion("the body must be a JSON object")
    if chat:
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadCompletion("messages must be a non-empty list of {role, content}")
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
    else:
        raw = request.get("prompt")
        if not isinstance(raw, (str, list)):
            raise BadCompletion("prompt must be a string or a list of strings")
        prompt = raw if isinstance(raw, str) else "\n".join(str(p) for p in raw)
    max_tokens = request.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= MAX_TOKENS:
        raise BadCompletion(f"max_tokens must be an integer in [1, {MAX_TOKENS}]")
    return prompt, max_tokens, bool(request.get("stream", False))


def generate(handler: PredictionHandler, prompt: str, max_tokens: int, arrived: float) -> Iterator[str]:
    """The tokens of one request, each one prediction, paced and delayed as the faults say; the
    metrics are observed as tokens come."""
    server = handler.server
    model = server.model
    assert model is not None
    faults = server.faults
    vllm: VllmMetrics = server.vllm  # type: ignore[attr-defined]
    name = model.name
    images = server.openai_images  # type: ignore[attr-defined]
    start = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
    pace = 1.0 / env_float("SLIPWAY_TOKENS_PER_SECOND", 100.0, minimum=0.001)
    last = arrived
    for i in range(max_tokens):
        began = time.perf_counter()
        label, _ = model.predict(images[(start + i) % len(images)][None, :])
        delay = pace + faults.latency_seconds
        delay += faults.first_token_delay_seconds if i == 0 else faults.token_delay_seconds
        time.sleep(max(0.0, delay - (time.perf_counter() - began)))
        now = time.perf_counter()
        if i == 0:
            vllm.ttft.labels(name).observe(now - arrived)
        else:
            vllm.itl.labels(name).observe(now - last)
        last = now
        vllm.generation_tokens.labels(name).inc()
        yield f"{label[0]} "
    vllm.e2e.labels(name).observe(time.perf_counter() - arrived)
    vllm.success.labels(name, "length").inc()


def handle(handler: PredictionHandler, path: str) -> None:
    """Answer a completions or chat completions request."""
    server = handler.server
    arrived = time.perf_counter()
    vllm: VllmMetrics = server.vllm  # type: ignore[attr-defined]
    body = read_body(handler)
    chat = path == "/v1/chat/completions"
    status = HTTPStatus.OK
    try:
        if server.model is None or not server.ready:
            status = HTTPStatus.SERVICE_UNAVAILABLE
            handler._send_json(status, _error("the model is loading", "server_error"))
            return
        if body is None:
            raise BadCompletion("body too large")
        prompt, max_tokens, stream = parse_request(body, chat)
        if server.faults.fails(server.random.random(), server.serving_for()):
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            where = server.faults.source("errorRate")
            handler._send_json(status, _error(f"injected fault (errorRate from {where})", "server_error"))
            return
        model_name = server.model.name
        vllm.waiting.labels(model_name).inc()
        try:
            vllm.slots.acquire()
        finally:
            vllm.waiting.labels(model_name).dec()
        vllm.taken(model_name, +1)
        try:
            tokens = generate(handler, prompt, max_tokens, arrived)
            if stream:
                _stream(handler, tokens, chat, model_name)
            else:
                text = "".join(tokens)
                handler._send_json(status, _completion(text, chat, model_name, prompt, max_tokens))
        finally:
            vllm.taken(model_name, -1)
            vllm.slots.release()
    except BadCompletion as exc:
        status = HTTPStatus.BAD_REQUEST
        handler._send_json(status, _error(str(exc), "invalid_request_error"))
    finally:
        vllm.http.labels(path, "POST", f"{int(status) // 100}xx").inc()


def read_body(handler: PredictionHandler) -> bytes | None:
    """The request's body, sent with a Content-Length or chunked (as a gateway that streams the
    body through a filter, Envoy's ext_proc, sends it); None if over the server's limit."""
    from slipway.workloads.servehttp import MAX_BODY_BYTES  # servehttp imports this module

    if "chunked" not in handler.headers.get("Transfer-Encoding", "").lower():
        return handler._read_body()
    body = b""
    while True:
        size = int(handler.rfile.readline(66).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while handler.rfile.readline(8192).strip():  # trailers, up to the blank line
                pass
            return body
        if len(body) + size > MAX_BODY_BYTES:
            handler.close_connection = True
            return None
        body += handler.rfile.read(size)
        handler.rfile.readline(8)  # the CRLF after the chunk


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


def _completion(text: str, chat: bool, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    prompt_tokens = max(1, len(prompt.split()))
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max_tokens,
            "total_tokens": prompt_tokens + max_tokens,
        },
    }


def _stream(handler: PredictionHandler, tokens: Iterator[str], chat: bool, model: str) -> None:
    """Server-sent events, one chunk per token as it is produced; the connection closes after."""
    handler.send_response(HTTPStatus.OK)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    kind = "chat.completion.chunk" if chat else "text_completion"

    def event(choice: dict[str, Any]) -> None:
        chunk = {"id": ident, "object": kind, "created": int(time.time()), "model": model, "choices": [choice]}
        handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        handler.wfile.flush()

    for token in tokens:
        event(
            {"index": 0, "delta": {"content": token}, "finish_reason": None}
            if chat
            else {"index": 0, "text": token, "finish_reason": None}
        )
    event(
        {"index": 0, "delta": {}, "finish_reason": "length"}
        if chat
        else {"index": 0, "text": "", "finish_reason": "length"}
    )
    handler.wfile.write(b"data: [DONE]\n\n")
    handler.wfile.flush()


def models(handler: PredictionHandler) -> None:
    model = handler.server.model
    data = [] if model is None else [{"id": model.name, "object": "model", "owned_by": "slipway"}]
    handler._send_json(HTTPStatus.OK, {"object": "list", "data": data})
