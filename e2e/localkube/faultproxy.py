"""A TCP proxy that misbehaves on demand, to put between one client (an operator replica) and a
server (the API server, MLflow): the faults of a real network, which stopping a process cannot make.

Modes, switched at any time from any thread:

- ``pass_through()``: bytes go both ways as they come.
- ``blackhole()``: a partition. Every connection open now is dead for good: what either side sends
  is read and dropped, nothing is answered, nothing is closed (the client sees a request that never
  ends, as when packets are lost, not the quick refusal of a stopped server). New connections are
  accepted and dead the same way. Healing (``pass_through``) lets *new* connections through; the dead
  ones stay dead, as TCP connections do after a partition long enough for their peers to give up.
- ``delay(seconds)``: each chunk the client sends reaches the server ``seconds`` later, in order
  (a slow API server: every request answered that much later; what the server streams, such as
  watch events, is not delayed).

TLS passes through untouched (the proxy sees bytes), so a kubeconfig only needs its server address
changed (:func:`kubeconfig_through`); the API server's certificate names 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import yaml

CHUNK = 65536


class FaultProxy:
    """``127.0.0.1:<port>`` forwarding to ``target`` (host, port), in a thread of its own."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self.seconds = 0.0
        self.port = 0
        self.connections = 0
        self._dead: set[int] = set()  # ids of connections a partition killed
        self._open: set[int] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name=f"faultproxy->{target_port}", daemon=True)

    # -- control (any thread) ----------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def pass_through(self) -> None:
        self.mode, self.seconds = "pass", 0.0

    def blackhole(self) -> None:
        self._dead |= self._open
        self.mode = "blackhole"

    def delay(self, seconds: float) -> None:
        self.mode, self.seconds = "delay", seconds

    def close(self) -> None:
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.get_running_loop().stop()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- the proxy (its own event loop) ------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        self._open.add(conn)
        if self.mode == "blackhole":
            self._dead.add(conn)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            if conn not in self._dead:
                upstream = await asyncio.open_connection(*self.target)
            if upstream is None:
                await self._drop(reader)
                return
            up_reader, up_writer = upstream
            await asyncio.gather(
                self._pump(conn, reader, up_writer, delayed=True),
                self._pump(conn, up_reader, writer, delayed=False),
            )
        except (ConnectionError, OSError):
            pass
        finally:
            self._open.discard(conn)
            for w in (writer, upstream[1] if upstream else None):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()

    async def _drop(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(CHUNK):
            pass

    async def _pump(self, conn: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delayed: bool) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    with contextlib.suppress(Exception):
                        writer.write_eof()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if conn in self._dead:
                    continue  # a partition came while it waited
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(CHUNK)
                if conn in self._dead:
                    if not data:
                        await asyncio.Event().wait()  # dead: never closed from this side either
                    continue
                due = time.monotonic() + (self.seconds if delayed and self.mode == "delay" else 0.0)
                await queue.put((due, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()


def kubeconfig_through(kubeconfig: Path, proxy: FaultProxy, path: Path) -> Path:
    """A copy of ``kubeconfig`` whose every cluster is reached through ``proxy``."""
    config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    for cluster in config.get("clusters") or []:
        server = str(cluster["cluster"]["server"])
        scheme = server.split("://", 1)[0]
        cluster["cluster"]["server"] = f"{scheme}://{proxy.address}"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class HttpFaultProxy:
    """An HTTP proxy in front of one server (MLflow) that answers some requests wrongly on demand:
    ``answer(method, path, status, body)`` (a 403 as MLflow's auth gives, a 500), ``garbage(method,
    path)`` (an HTML page where JSON is expected), ``delay(method, path, seconds)``; ``heal()`` forwards
    everything again. ``method``/``path`` of ``"*"`` match any; a path matches by its prefix; wrong
    answers given for the same request take turns (a 500, then an HTML page, then the 500 ...).
    ``url`` is what the client uses instead of the server's. Counts what it answered itself."""

    def __init__(self, target: str) -> None:
        import http.server
        import urllib.parse

        self.target = urllib.parse.urlsplit(target)
        self.rules: list[tuple[str, str, str, Any]] = []
        self.faked: dict[str, int] = {}
        self._turns: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="httpfaultproxy", daemon=True)

    def start(self) -> HttpFaultProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, path: str, status: int, body: dict[str, Any]) -> None:
        with self._lock:
            self.rules.append((method, path, "answer", (status, body)))

    def garbage(self, method: str, path: str) -> None:
        with self._lock:
            self.rules.append((method, path, "garbage", None))

    def delay(self, method: str, path: str, seconds: float) -> None:
        with self._lock:
            self.rules.append((method, path, "delay", seconds))

    def heal(self) -> None:
        with self._lock:
            self.rules.clear()
            self._turns.clear()

    def _rule(self, method: str, path: str) -> tuple[str, Any] | None:
        with self._lock:
            matching = [(kind, arg) for m, p, kind, arg in self.rules if m in ("*", method) and (p == "*" or
                        path.startswith(p))]  # fmt: skip
            wrong = [rule for rule in matching if rule[0] in ("answer", "garbage")]
            if wrong:
                turn = self._turns.get((method, path), 0)
                self._turns[(method, path)] = turn + 1
                return wrong[turn % len(wrong)]
        return matching[0] if matching else None

    def _handle(self, request: Any) -> None:
        import http.client
        import json

        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        rule = self._rule(request.command, request.path.split("?", 1)[0])
        if rule is not None and rule[0] in ("answer", "garbage"):
            key = f"{request.command} {request.path.split('?', 1)[0]} {rule[0]}"
            with self._lock:
                self.faked[key] = self.faked.get(key, 0) + 1
            if rule[0] == "answer":
                status, payload = rule[1]
                self._reply(request, status, "application/json", json.dumps(payload).encode())
            else:
                self._reply(request, 200, "text/html", b"<html><body>502 Bad Gateway</body></html>")
            return
        if rule is not None and rule[0] == "delay":
            time.sleep(float(rule[1]))
        conn = http.client.HTTPConnection(self.target.hostname, self.target.port, timeout=60)
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(request.command, request.path, body=body or None, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            self._reply(request, answer.status, answer.getheader("Content-Type") or "application/json", data)
        except OSError:
            self._reply(request, 502, "text/plain", b"upstream unreachable")
        finally:
            conn.close()

    @staticmethod
    def _reply(request: Any, status: int, content_type: str, data: bytes) -> None:
        try:
            request.send_response(status)
            request.send_header("Content-Type", content_type)
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        except OSError:
            pass
