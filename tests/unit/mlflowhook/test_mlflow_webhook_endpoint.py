"""The MLflow webhook's endpoint (slipway.mlflowhook.server) over real sockets, in-process: a body in
several TCP segments is read whole (Content-Length), and every bound holds: size, the time to send the
headers (slowloris) and the body, the connections open at once (the oldest slow sender gives way to a
new one), the request rate. Each request is made with a raw socket, byte for byte as a client sends it."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from localkube.wait import wait_for
from slipway.controller import Cache
from slipway.metrics import WEBHOOK_DELIVERIES
from slipway.mlflowhook import PATH, Verifier, handle, sign
from slipway.mlflowhook.server import BadRequest, Endpoint, Limits, TokenBucket, parse_head

SECRET = b"endpoint-test-secret"


class Scheduler:
    active = True

    def wake(self, key, delay: float = 0.0) -> None:  # pragma: no cover - nothing follows in these tests
        pass


def delivery(at: float | None = None) -> tuple[bytes, bytes]:
    """The request line and headers, and the body, of a delivery signed as MLflow signs it."""
    body = json.dumps({"entity": "model_version_alias", "action": "created", "timestamp": "",
                       "data": {"name": "nobody-follows", "alias": "candidate", "version": "3"}})  # fmt: skip
    delivery_id, stamp = str(uuid.uuid4()), str(int(time.time() if at is None else at))
    head = (f"POST {PATH} HTTP/1.1\r\nHost: operator\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-MLflow-Delivery-Id: {delivery_id}\r\nX-MLflow-Timestamp: {stamp}\r\n"
            f"X-MLflow-Signature: {sign(SECRET, delivery_id, stamp, body)}\r\n\r\n")  # fmt: skip
    return head.encode(), body.encode()


class Served:
    """An endpoint on 127.0.0.1 whose handler is the real one (signature, timestamp, id); its calls counted."""

    def __init__(self, limits: Limits) -> None:
        self.calls: list[bytes] = []
        verifier = Verifier(SECRET)

        def handler(headers, body):
            self.calls.append(body)
            return handle(verifier, Cache({"inferencedeployments": {}}), Scheduler(), headers, body)

        self.endpoint = Endpoint(handler, "127.0.0.1", 0, PATH, limits).start()

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.endpoint.port), timeout=10)
        return sock


@pytest.fixture
def served(request) -> Iterator[Served]:
    server = Served(getattr(request, "param", Limits()))
    yield server
    server.endpoint.stop()


def answer(sock: socket.socket) -> tuple[int, dict[str, str], str]:
    """Status, headers and body of the answer; the endpoint closes the connection after it."""
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body.decode().strip()


def counted(outcome: str) -> float:
    return WEBHOOK_DELIVERIES.labels(outcome=outcome)._value.get()


def closed_without_answer(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


def test_a_body_in_two_segments_a_moment_apart_is_read_whole(served):
    head, body = delivery()
    with served.connect() as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head + body[:40])
        time.sleep(0.3)  # the second segment comes later: what MLflow's client may do over a real network
        sock.sendall(body[40:])
        assert answer(sock)[::2] == (200, "unfollowed")
    assert served.calls == [body]  # the signature verified over the whole body


def test_headers_alone_then_the_body_is_read_whole(served):
    head, body = delivery()
    with served.connect() as sock:
        sock.sendall(head)
        time.sleep(0.3)
        sock.sendall(body)
        assert answer(sock)[::2] == (200, "unfollowed")


@pytest.mark.parametrize("served", [Limits(header_seconds=0.5)], indirect=True)
def test_headers_sent_a_byte_at_a_time_are_cut_off_at_the_header_deadline(served):
    head, _ = delivery()
    with served.connect() as sock:
        started = time.monotonic()
        sent = 0
        with pytest.raises(OSError):  # the endpoint answers 408 and closes while bytes keep coming
            for byte in head[:-4]:
                sock.send(bytes([byte]))
                sent += 1
                time.sleep(0.05)
        took = time.monotonic() - started
    assert 0.4 < took < 3 and sent < len(head) - 4
    assert served.calls == []


@pytest.mark.parametrize("served", [Limits(header_seconds=0.5)], indirect=True)
def test_a_slow_sender_is_answered_408(served):
    head, _ = delivery()
    before = counted("timeout")
    with served.connect() as sock:
        sock.sendall(head[:20])
        assert answer(sock)[::2] == (408, "timeout")
    assert served.calls == [] and counted("timeout") == before + 1


@pytest.mark.parametrize("served", [Limits(body_seconds=0.5)], indirect=True)
def test_a_body_shorter_than_its_content_length_times_out_unread(served):
    head, body = delivery()
    with served.connect() as sock:
        sock.sendall(head + body[:-1])
        assert answer(sock)[::2] == (408, "timeout")
    assert served.calls == []


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (f"POST {PATH} HTTP/1.1\r\nContent-Length: 70000\r\n\r\n", 413),
        (f"POST {PATH} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        (f"POST {PATH} HTTP/1.1\r\nHost: x\r\n\r\n", 411),
        (f"POST {PATH} HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (f"POST {PATH} HTTP/1.1\r\nContent-Length: ²\r\n\r\n", 400),
        (f"POST {PATH} HTTP/1.1\r\nX-Long: {'a' * 9000}\r\n\r\n", 431),
        ("POST /other HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 404),
        (f"GET {PATH} HTTP/1.1\r\n\r\n", 405),
        ("garbage\r\n\r\n", 400),
    ],
    ids=["too-large", "chunked", "no-length", "two-lengths", "odd-digit", "long-head", "path", "method", "garbage"],
)
def test_a_request_out_of_bounds_is_refused_before_its_body_is_read(served, request_head, status):
    with served.connect() as sock:
        sock.sendall(request_head.encode())
        assert answer(sock)[0] == status
    assert served.calls == []


@pytest.mark.parametrize("served", [Limits(connections=4, header_seconds=30)], indirect=True)
def test_at_the_connection_limit_the_oldest_slow_sender_gives_way_to_a_delivery(served):
    slow: list[socket.socket] = []
    before = counted("evicted")
    for round_ in range(3):  # the slots full of slow senders again; each delivery evicts the oldest of them
        while len(slow) - round_ < 4:
            slow.append(served.connect())
            slow[-1].sendall(b"POST ")
        wait_for(lambda: len(served.endpoint.open) == 4, 10, "4 connections open")
        with served.connect() as sock:
            sock.sendall(b"".join(delivery()))
            assert answer(sock)[::2] == (200, "unfollowed"), round_
        assert closed_without_answer(slow[round_])
        assert not any(closed_now(sock) for sock in slow[round_ + 1 :])
    assert len(served.calls) == 3 and len(served.endpoint.open) == 3
    wait_for(lambda: counted("evicted") == before + 3, 10, "3 evictions counted")
    for sock in slow:
        sock.close()


def closed_now(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)


@pytest.mark.parametrize("served", [Limits(connections=2, header_seconds=30)], indirect=True)
def test_with_every_slot_answering_a_new_connection_is_refused_503(served):
    gate = threading.Event()
    verifier_calls: list[int] = []

    def slow_handler(headers, body):
        verifier_calls.append(1)
        gate.wait(10)
        return 200, "ignored"

    served.endpoint.handler = slow_handler
    busy = [served.connect() for _ in range(2)]
    for sock in busy:
        sock.sendall(b"".join(delivery()))
    wait_for(lambda: verifier_calls and all(not c.receiving for c in served.endpoint.open), 10, "both answering")
    with served.connect() as sock:
        assert answer(sock)[::2] == (503, "overloaded")
    gate.set()
    assert [answer(sock)[0] for sock in busy] == [200, 200]


@pytest.mark.parametrize("served", [Limits(rate=1, burst=3)], indirect=True)
def test_past_the_rate_a_request_is_answered_429_with_retry_after_and_not_verified(served):
    results, before = [], counted("rate-limited")
    for _ in range(5):
        with served.connect() as sock:
            sock.sendall(b"".join(delivery()))
            status, headers, _ = answer(sock)
            results.append((status, headers.get("retry-after")))
    assert results[:3] == [(200, None)] * 3
    assert [status for status, _ in results[3:]] == [429, 429] and all(int(r or 0) >= 1 for _, r in results[3:])
    assert len(served.calls) == 3 and counted("rate-limited") == before + 2


def test_the_token_bucket_refills_at_its_rate():
    now = [0.0]
    bucket = TokenBucket(2.0, 2, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.5]
    now[0] = 0.5
    assert bucket.take() == 0.0 and bucket.take() == 0.5


def test_headers_are_read_case_insensitively_and_duplicates_of_what_decides_are_refused():
    head = b"POST /mlflow/webhook?x=1 HTTP/1.1\r\nX-MLflow-Timestamp: 1\r\nA: 1\r\nA: 2\r\n\r\n"
    assert parse_head(head) == ("POST", "/mlflow/webhook", {"x-mlflow-timestamp": "1", "a": "1, 2"})
    with pytest.raises(BadRequest):  # which timestamp would be checked, which signed?
        parse_head(b"POST / HTTP/1.1\r\nX-MLflow-Timestamp: 1\r\nx-mlflow-timestamp: 2\r\n\r\n")
