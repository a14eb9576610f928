"""The fault proxy of the fault suite (``localkube.faultproxy``) against a local echo server: bytes
pass, a delay holds each request back, a partition kills the connections open and new ones, and
healing lets new connections through while the dead ones stay dead."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from localkube.faultproxy import FaultProxy, kubeconfig_through


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    found = FaultProxy("127.0.0.1", server.server_address[1]).start()
    yield found
    found.close()
    server.shutdown()
    server.server_close()


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def echo(conn: socket.socket, data: bytes, timeout: float = 2) -> tuple[bytes | None, float]:
    """What comes back for ``data`` (None if nothing within ``timeout``), and how long it took."""
    conn.settimeout(timeout)
    start = time.monotonic()
    conn.sendall(data)
    try:
        return conn.recv(4096), time.monotonic() - start
    except TimeoutError:
        return None, time.monotonic() - start


def test_bytes_pass_both_ways(proxy: FaultProxy) -> None:
    with connect(proxy) as conn:
        assert echo(conn, b"hello")[0] == b"hello"


def test_a_delay_holds_each_request_back(proxy: FaultProxy) -> None:
    proxy.delay(0.3)
    with connect(proxy) as conn:
        answer, took = echo(conn, b"slow")
    assert answer == b"slow" and 0.3 <= took < 1.0


def test_a_partition_kills_open_and_new_connections_and_healing_lets_only_new_ones_through(
    proxy: FaultProxy,
) -> None:
    before = connect(proxy)
    assert echo(before, b"a")[0] == b"a"
    proxy.blackhole()
    assert echo(before, b"b", timeout=0.3)[0] is None  # no answer, and no close either
    during = connect(proxy)  # accepted, then nothing
    assert echo(during, b"c", timeout=0.3)[0] is None
    proxy.pass_through()
    assert echo(before, b"d", timeout=0.3)[0] is None  # dead for good
    assert echo(during, b"e", timeout=0.3)[0] is None
    with connect(proxy) as after:
        assert echo(after, b"f")[0] == b"f"
    before.close()
    during.close()


def test_a_kubeconfig_is_pointed_at_the_proxy(proxy: FaultProxy, tmp_path: Path) -> None:
    original = tmp_path / "kubeconfig"
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"}
    original.write_text(yaml.safe_dump({"clusters": [{"name": "c", "cluster": cluster}]}))
    copy = yaml.safe_load(kubeconfig_through(original, proxy, tmp_path / "through").read_text())
    assert copy["clusters"][0]["cluster"] == {
        "server": f"https://127.0.0.1:{proxy.port}",
        "certificate-authority": "ca.crt",
    }


def test_the_http_proxy_gives_wrong_answers_for_one_request_in_turn_and_forwards_the_rest() -> None:
    import http.server
    import json
    import urllib.error
    import urllib.request

    from localkube.faultproxy import HttpFaultProxy

    class Ok(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            data = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = HttpFaultProxy(f"http://127.0.0.1:{server.server_address[1]}").start()

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(proxy.url + path, timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    try:
        proxy.garbage("GET", "/alias")
        proxy.answer("GET", "/alias", 500, {"error_code": "INTERNAL_ERROR"})
        answers = [get("/alias?name=m") for _ in range(4)]
        assert [status for status, _ in answers] == [200, 500, 200, 500]
        assert "<html>" in answers[0][1] and "<html>" in answers[2][1]
        assert "INTERNAL_ERROR" in answers[1][1]
        assert get("/other") == (200, json.dumps({"path": "/other"}))
        assert proxy.faked == {"GET /alias garbage": 2, "GET /alias answer": 2}
        proxy.heal()
        assert get("/alias?name=m") == (200, json.dumps({"path": "/alias?name=m"}))
    finally:
        proxy.close()
        server.shutdown()
