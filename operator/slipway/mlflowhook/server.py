"""The webhook's HTTP endpoint: one request per connection, on an event loop and a thread of its
own, so that no flood of connections delays kopf's event loop (and with it the leader's Lease
renewals). What it allows, each a bound a sender cannot push (:class:`Limits`):

- connections: at most ``connections`` open; one more closes the oldest still sending its request
  (a slow sender holds a slot for at most ``header_seconds``, and cannot keep a new one out);
- the request line and headers: ``max_head`` bytes within ``header_seconds`` of the connection
  (slowloris: headers sent a byte at a time are cut off);
- the body: exactly ``Content-Length`` bytes (required; at most ``max_body``), however many TCP
  segments they come in, within ``body_seconds`` more;
- requests: ``rate`` a second after a burst of ``burst`` (a token bucket), the others answered 429
  with ``Retry-After`` (MLflow's client honours it) before anything is verified.

A whole request is handed to the handler (blocking: it verifies, and records the id through the
API server) in one thread of its own; the answer closes the connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

from slipway.metrics import WEBHOOK_CONNECTIONS, WEBHOOK_DELIVERIES
from slipway.mlflowhook.verify import MAX_BODY

log = logging.getLogger("slipway.mlflowhook")

Handler = Callable[[Mapping[str, str], bytes], tuple[int, str]]


@dataclass(frozen=True)
class Limits:
    connections: int = 32
    # Sockets accepted per turn of the loop (and the kernel's queue): what a flood can hold open beyond
    # ``connections`` before the oldest are closed is about twice this, not one per sender.
    backlog: int = 16
    header_seconds: float = 5.0
    body_seconds: float = 5.0
    max_head: int = 8 * 1024
    max_body: int = MAX_BODY
    rate: float = 10.0
    burst: int = 20


class BadRequest(Exception):
    def __init__(self, status: int, why: str = "bad-request") -> None:
        super().__init__(why)
        self.status, self.why = status, why


@dataclass
class TokenBucket:
    rate: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens, self.at = float(self.burst), self.clock()

    def take(self) -> float:
        """0 if a request may go now (one token taken), else the seconds until one may."""
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """Method, path and headers (names lower-cased) of a request line and its headers, ``\\r\\n\\r\\n`` ended."""
    lines = head[: -len(b"\r\n\r\n")].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise BadRequest(400)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name:
            raise BadRequest(400)
        try:
            key, text = name.decode("ascii").lower(), value.strip().decode("latin-1")
        except UnicodeDecodeError:
            raise BadRequest(400) from None
        if key in headers and (key.startswith("x-mlflow-") or key in ("content-length", "transfer-encoding")):
            raise BadRequest(400)  # two of what decides: which would count?
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return parts[0].decode("latin-1"), parts[1].split(b"?", 1)[0].decode("latin-1"), headers


def body_length(headers: Mapping[str, str], limit: int) -> int:
    if "transfer-encoding" in headers:
        raise BadRequest(411)  # MLflow sends Content-Length; a chunked body has no bound up front
    length = headers.get("content-length")
    if length is None:
        raise BadRequest(411)
    if not (length.isascii() and length.isdigit()):
        raise BadRequest(400)
    if int(length) > limit:
        raise BadRequest(413, "too-large")
    return int(length)


@dataclass(eq=False)
class Connection:
    writer: asyncio.StreamWriter
    opened: float
    receiving: bool = True  # still sending its request: the one evicted first when the endpoint is full
    evicted: bool = False


class Endpoint:
    """``POST path`` on ``address:port``, served from a thread of its own (``start``, ``stop``)."""

    def __init__(self, handler: Handler, address: str, port: int, path: str, limits: Limits | None = None) -> None:
        self.handler, self.address, self.port, self.path = handler, address, port, path
        self.limits = limits or Limits()
        self.bucket = TokenBucket(self.limits.rate, self.limits.burst)
        self.open: list[Connection] = []  # oldest first
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="slipway-webhook-handler")
        self._thread = threading.Thread(target=self._run, name="slipway-webhook", daemon=True)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> Endpoint:
        """Listen (blocking until bound; raises what binding raised)."""
        self._thread.start()
        self._ready.wait(30)
        if self._failure is not None:
            raise self._failure
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop ended already
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        self._worker.shutdown(wait=False, cancel_futures=True)

    async def cleanup(self) -> None:
        await asyncio.to_thread(self.stop)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._failure = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(
            self._serve, self.address, self.port, limit=self.limits.max_head, backlog=self.limits.backlog
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for connection in list(self.open):
                connection.writer.transport.abort()
            await asyncio.sleep(0)  # their coroutines see the abort and end

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(writer, time.monotonic())
        if not self._admit(connection):
            await self._answer(connection, *refused(503, "overloaded"))
            return
        self.open.append(connection)
        WEBHOOK_CONNECTIONS.set(len(self.open))
        try:
            status, outcome = await self._exchange(reader, connection)
            if status:
                await self._answer(connection, status, outcome, retry_after=self._retry_after(outcome))
        except (ConnectionError, asyncio.IncompleteReadError):
            if connection.evicted:
                WEBHOOK_DELIVERIES.labels(outcome="evicted").inc()
        finally:
            if connection in self.open:
                self.open.remove(connection)
            WEBHOOK_CONNECTIONS.set(len(self.open))
            writer.close()

    def _admit(self, connection: Connection) -> bool:
        """Room for one more: the oldest connection still sending its request is closed if it takes that."""
        if len(self.open) < self.limits.connections:
            return True
        oldest = next((c for c in self.open if c.receiving), None)
        if oldest is None:  # every slot is a whole request being answered
            return False
        oldest.evicted = True
        oldest.writer.transport.abort()  # its coroutine ends at its next step
        self.open.remove(oldest)  # the slot is the new connection's now
        return True

    async def _exchange(self, reader: asyncio.StreamReader, connection: Connection) -> tuple[int, str]:
        """(status, outcome) to answer with; (0, "") for a connection to close without an answer."""
        limits = self.limits
        try:
            async with asyncio.timeout(limits.header_seconds):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path, headers = parse_head(head)
            if path != self.path:
                raise BadRequest(404)
            if method != "POST":
                raise BadRequest(405)
            length = body_length(headers, limits.max_body)
        except TimeoutError:
            return refused(408, "timeout")
        except (asyncio.LimitOverrunError, ValueError):  # the head past max_head (a ValueError on 3.11)
            return refused(431, "bad-request")
        except BadRequest as bad:
            return refused(bad.status, bad.why)
        if self.bucket.take():
            return refused(429, "rate-limited")
        if headers.get("expect", "").lower() == "100-continue":
            connection.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            async with asyncio.timeout(limits.body_seconds):
                body = await reader.readexactly(length)
        except TimeoutError:
            return refused(408, "timeout")
        connection.receiving = False
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker, self.handler, headers, body)
        except Exception:
            log.exception("MLflow webhook: the delivery's handler failed")
            return refused(500, "error")

    def _retry_after(self, outcome: str) -> int | None:
        return max(1, math.ceil((1 - self.bucket.tokens) / self.bucket.rate)) if outcome == "rate-limited" else None

    async def _answer(self, connection: Connection, status: int, outcome: str, retry_after: int | None = None) -> None:
        """Answer and close."""
        text = f"{outcome}\n".encode()
        head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: text/plain\r\n"
        head += f"Content-Length: {len(text)}\r\nConnection: close\r\n"
        head += f"Retry-After: {retry_after}\r\n" if retry_after else ""
        writer = connection.writer
        with contextlib.suppress(ConnectionError, TimeoutError):
            writer.write(head.encode() + b"\r\n" + text)
            async with asyncio.timeout(self.limits.body_seconds):
                await writer.drain()
        writer.close()


def refused(status: int, outcome: str) -> tuple[int, str]:
    """A request the endpoint refuses itself, counted (the handler counts its own outcomes)."""
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()
    return status, outcome
