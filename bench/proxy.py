"""A counting HTTP reverse proxy (127.0.0.1 only) in front of MLflow or Prometheus: scenario B counts
a controller's calls at rest with it. Only the measured process's connections count: each accepted
connection is matched to its client socket in ``/proc/net/tcp`` and to that process's open file
descriptors; calls from pods (given the same URL) are counted apart as ``other``.

(From ``bench/at_rest.py``, the earlier at-rest harness, now scenario B's.)
"""

from __future__ import annotations

import contextlib
import http.client
import os
import threading
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "content-length", "host"}  # fmt: skip


def _hex_addr(ip: str, port: int) -> str:
    """An IPv4 address as ``/proc/net/tcp`` writes it: little-endian hex address, big-endian hex port."""
    return "".join(f"{int(b):02X}" for b in reversed(ip.split("."))) + f":{port:04X}"


def socket_inode(local: tuple[str, int], remote: tuple[str, int]) -> str | None:
    """The inode of the TCP socket bound to ``local`` and connected to ``remote``, from ``/proc/net/tcp``."""
    want = (_hex_addr(*local), _hex_addr(*remote))
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 9 and (fields[1], fields[2]) == want:
            return fields[9]
    return None


def owns_socket(pid: int, inode: str) -> bool:
    target = f"socket:[{inode}]"
    with contextlib.suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(fd.path) == target:
                    return True
    return False


@dataclass
class Call:
    time: datetime
    origin: str
    """``operator`` (a connection of the operator's process) or ``other`` (pods, anyone else)"""
    method: str
    path: str
    query: str
    status: int
    body: str
    """the request body, cut at 2 KiB (for attribution: MLflow searches are POSTs)"""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy: CountingProxy, max_connections: int) -> None:
        self.proxy = proxy
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(timeout=30):  # bounded: a connection waits at most 30 s for a slot
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection gives its slot back after a minute
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.origin = self.server.proxy.classify(self.client_address)
        self.upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        with contextlib.suppress(Exception):
            super().finish()
        if self.upstream is not None:
            self.upstream.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _send_upstream(self, body: bytes | None) -> http.client.HTTPResponse:
        proxy = self.server.proxy
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = proxy.netloc
        if body is not None:
            headers["Content-Length"] = str(len(body))
        for attempt in (1, 2):  # a kept-alive upstream connection may have been closed meanwhile
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(proxy.host, proxy.port, timeout=120)
            try:
                self.upstream.request(self.command, self.path, body=body, headers=headers)
                return self.upstream.getresponse()
            except (OSError, http.client.HTTPException):
                self.upstream.close()
                self.upstream = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _forward(self) -> None:
        body = self._body()
        try:
            response = self._send_upstream(body)
            data = response.read()
            status, reason, headers = response.status, response.reason, response.getheaders()
            if response.will_close and self.upstream is not None:
                self.upstream.close()
                self.upstream = None
        except (OSError, http.client.HTTPException) as exc:
            status, reason, headers, data = 502, "Bad Gateway", [], f"proxy: {exc}".encode()
        self.server.proxy.record(self, body, status)
        self.send_response(status, reason)
        for key, value in headers:
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _forward


class CountingProxy:
    """An HTTP reverse proxy on 127.0.0.1 that records every request (method, path, query) it forwards."""

    def __init__(self, name: str, upstream: str, max_connections: int = 64, keep: int = 200_000) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{name}: only plain http upstreams are proxied, not {upstream!r}")
        self.name = name
        self.host, self.port = parts.hostname, parts.port or 80
        self.netloc = parts.netloc
        self.operator_pid: int | None = None
        self._calls: deque[Call] = deque(maxlen=keep)  # bounded
        self._lock = threading.Lock()
        self._server = _Server(self, max_connections)
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"proxy-{name}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> CountingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def classify(self, client: tuple[str, int]) -> str:
        """``operator`` if the connection's client socket is one of the operator process's descriptors."""
        pid = self.operator_pid
        if pid is None:
            return "other"
        inode = socket_inode((client[0], client[1]), ("127.0.0.1", self._server.server_port))
        return "operator" if inode is not None and owns_socket(pid, inode) else "other"

    def record(self, handler: _Handler, body: bytes | None, status: int) -> None:
        parts = urlsplit(handler.path)
        text = (body or b"")[:2048].decode("utf-8", "replace")
        call = Call(datetime.now(UTC), handler.origin, handler.command, parts.path, parts.query, status, text)
        with self._lock:
            self._calls.append(call)

    def calls(self, since: datetime, until: datetime) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if since <= c.time < until]
