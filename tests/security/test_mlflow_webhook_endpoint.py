"""The MLflow webhook endpoint under attack, on the operator as processes (``python -m slipway``) against
the local cluster's API server: a delivery replayed after a failover, and a slow-header flood.

- Failover: a delivery believed by one replica (sent in two TCP segments, headers then body a moment
  later) is refused as replayed by the replica that leads after it is SIGKILLed: the ids believed are
  in the Lease slipway-mlflow-webhook, which a new leader reads. Two ledgers writing the same Lease
  show its compare-and-swap: one working from a stale read is refused by the API server (409), reads
  again, and finds the id.
- Flood: many connections sending their headers a byte at a time (slowloris, twice as many as the
  endpoint holds) while the operator leads: every renewal of its Lease (watched on the API server)
  comes on time, genuine deliveries sent meanwhile are served, and the connections and file
  descriptors the flood costs the operator stay bounded.

Deliveries are signed by MLflow's own signing function, for a model nobody follows (answered 200
``unfollowed``, no MLflow call)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, watch

from localkube.wait import wait_for
from slipway.mlflowhook.ledger import ANNOTATION, LEDGER_NAME, LeaseLedger
from slipway.mlflowhook.server import Limits
from slipway.mlflowhook.verify import Refused
from slipway_testing import OperatorReplica, free_port, read_or_none, report

pytestmark = pytest.mark.cluster

SECRET = "endpoint-secret-of-the-test"
LEASE = "slipway-operator"
PATH = "/mlflow/webhook"


def signed(at: float | None = None) -> tuple[dict[str, str], bytes]:
    """A delivery as MLflow makes it (its own signing function), for a model nobody follows."""
    from mlflow.webhooks.delivery import _generate_hmac_signature

    data = {"name": f"nobody-follows-{uuid.uuid4().hex[:6]}", "alias": "candidate", "version": "1"}
    body = json.dumps({"entity": "model_version_alias", "action": "created", "timestamp": "", "data": data})
    delivery, stamp = str(uuid.uuid4()), str(int(time.time() if at is None else at))
    headers = {"Content-Type": "application/json", "X-MLflow-Delivery-Id": delivery, "X-MLflow-Timestamp": stamp,
               "X-MLflow-Signature": _generate_hmac_signature(SECRET, delivery, stamp, body)}  # fmt: skip
    return headers, body.encode()


class Hooked:
    """An operator replica (leader election in the test's namespace) serving the webhook on a port of its own."""

    def __init__(self, name: str, cluster: Any, namespace: str, logs: Path) -> None:
        self.port = free_port()
        env = {"SLIPWAY_MLFLOW_WEBHOOK_SECRET": SECRET, "SLIPWAY_MLFLOW_WEBHOOK_PORT": str(self.port)}
        self.replica = OperatorReplica(name, cluster, namespace, logs, env=env)
        self.url = f"http://127.0.0.1:{self.port}{PATH}"

    def listening(self, timeout: float = 60) -> None:
        wait_for(lambda: socket.create_connection(("127.0.0.1", self.port), timeout=2).close() or True, timeout,
                 f"{self.replica.name}'s webhook endpoint")  # fmt: skip

    def post(self, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        answer = httpx.post(self.url, content=body, headers=headers, timeout=15)
        return answer.status_code, answer.text.strip()

    def segmented(self, headers: dict[str, str], body: bytes, pause: float = 0.5) -> tuple[int, str]:
        """POST over a raw socket: the request line and headers, then ``pause`` later the body."""
        head = f"POST {PATH} HTTP/1.1\r\nHost: operator\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        with socket.create_connection(("127.0.0.1", self.port), timeout=15) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(head.encode())
            time.sleep(pause)  # the body comes in a second segment, later: what a real network may do
            sock.sendall(body)
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode().strip()

    def outcome(self, outcome: str) -> float:
        return self.replica.metric(f'slipway_mlflow_webhook_deliveries_total{{outcome="{outcome}"}}') or 0.0


def lease(kube_api, namespace: str, name: str = LEASE) -> Any:
    return read_or_none(client.CoordinationV1Api(kube_api).read_namespaced_lease, name, namespace)


def holder(kube_api, namespace: str) -> str | None:
    found = lease(kube_api, namespace)
    return None if found is None else found.spec.holder_identity


def recorded(kube_api, namespace: str) -> dict[str, int]:
    found = lease(kube_api, namespace, LEDGER_NAME)
    return {} if found is None else json.loads((found.metadata.annotations or {}).get(ANNOTATION, "{}"))


@pytest.mark.timeout(300)
def test_a_delivery_believed_before_a_failover_is_refused_as_replayed_by_the_new_leader(
    cluster, slipway_crds, namespace, kube_api, tmp_path
):
    a = Hooked("replica-a", cluster, namespace, tmp_path)
    b: Hooked | None = None
    try:
        wait_for(lambda: holder(kube_api, namespace) == "replica-a", 60, "replica-a to lead")
        a.listening()
        b = Hooked("replica-b", cluster, namespace, tmp_path)
        b.listening()
        wait_for(lambda: b.replica.metric("slipway_leader") == 0 and "stands by" in b.replica.log(), 60,
                 "replica-b to stand by")  # fmt: skip
        captured = signed()
        delivery = captured[0]["X-MLflow-Delivery-Id"]
        answers = {"standby, before": b.post(*captured)}  # kept unspent: MLflow retries a 503
        answers["leader, in two segments"] = a.segmented(*captured)
        answers["leader, replayed"] = a.post(*captured)
        assert delivery in recorded(kube_api, namespace)

        a.replica.stop(signal.SIGKILL)  # no clean shutdown: nothing is handed over but what the API server has
        killed = time.monotonic()
        wait_for(lambda: holder(kube_api, namespace) == "replica-b" and b.replica.metric("slipway_leader") == 1,
                 60, "replica-b to lead")  # fmt: skip
        took_over = time.monotonic() - killed
        answers["new leader, replayed"] = b.post(*captured)
        fresh = signed()
        answers["new leader, a new delivery"] = b.post(*fresh)
        answers["new leader, that one replayed"] = b.post(*fresh)
        counted = {o: b.outcome(o) for o in ("replayed", "unfollowed", "standby")}
        ids = recorded(kube_api, namespace)
    finally:
        for hooked in (a, b):
            if hooked is not None:
                hooked.replica.stop()
    report(f"\nwebhook replay across a failover: {answers}; replica-b took the Lease {took_over:.1f} s after "
           f"replica-a was killed; replica-b counted {counted}; the ledger holds {len(ids)} ids")  # fmt: skip
    assert answers == {
        "standby, before": (503, "standby"),
        "leader, in two segments": (200, "unfollowed"),
        "leader, replayed": (409, "replayed"),
        "new leader, replayed": (409, "replayed"),
        "new leader, a new delivery": (200, "unfollowed"),
        "new leader, that one replayed": (409, "replayed"),
    }
    assert counted == {"replayed": 2, "unfollowed": 1, "standby": 1}
    assert set(ids) == {delivery, fresh[0]["X-MLflow-Delivery-Id"]}


def test_two_ledgers_on_one_lease_never_both_believe_an_id(cluster, namespace, kube_api):
    """The compare-and-swap on the real API server: ``first`` writes from a read ``second`` has made stale."""
    now = time.time()
    first, second = LeaseLedger(kube_api, namespace), LeaseLedger(kube_api, namespace)
    first.record("x", int(now), now)  # creates the Lease
    second.record("y", int(now), now)  # reads it (x), writes x and y
    stale = first.mine.metadata.resource_version
    outcomes = {}
    for ledger, delivery in ((first, "y"), (second, "x"), (first, "z")):
        try:
            ledger.record(delivery, int(now), now)
            outcomes[delivery] = "recorded"
        except Refused as refused:
            outcomes[delivery] = refused.reason
    assert outcomes == {"y": "replayed", "x": "replayed", "z": "recorded"}
    assert stale != first.mine.metadata.resource_version  # first's write from its stale read was refused (409)
    assert set(recorded(kube_api, namespace)) == {"x", "y", "z"}
    # An id older than twice the window is dropped with the next write; a recent one stays.
    second.record("w", int(now), now + 601)
    assert set(recorded(kube_api, namespace)) == {"w"}


class SlowFlood:
    """``senders`` connections to ``port``, each sending a request line and headers that never end, one byte
    every ``pace`` seconds; one the endpoint closes is opened again ``pace`` later. Its own thread and loop."""

    HEAD = f"POST {PATH} HTTP/1.1\r\nHost: operator\r\n".encode() + b"X-Slow: " + b"a" * 100_000

    def __init__(self, port: int, senders: int, pace: float) -> None:
        self.port, self.senders, self.pace = port, senders, pace
        self.opened = self.closed_by_server = self.bytes_sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> SlowFlood:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)

    async def _main(self) -> None:
        await asyncio.gather(*(self._sender(i * self.pace / self.senders) for i in range(self.senders)))

    async def _sender(self, offset: float) -> None:
        await asyncio.sleep(offset)
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(self.pace)
                continue
            self.opened += 1
            try:
                for byte in self.HEAD:
                    if self.stop.is_set():
                        break
                    writer.write(bytes([byte]))
                    self.bytes_sent += 1
                    try:  # the pause, watching for the endpoint's answer or close
                        await asyncio.wait_for(reader.read(1024), self.pace)
                        self.closed_by_server += 1
                        break
                    except TimeoutError:
                        continue
            except OSError:
                self.closed_by_server += 1
            finally:
                writer.close()
            await asyncio.sleep(self.pace)


class Renewals:
    """The renewTime of every write of the Lease, as the API server's watch delivers them."""

    def __init__(self, kube_api, namespace: str) -> None:
        self.times: list[datetime] = []
        self.holders: set[str] = set()
        self.transitions: set[int] = set()
        self.stopped = threading.Event()
        self.watch = watch.Watch()
        self.api, self.namespace = client.CoordinationV1Api(kube_api), namespace
        self.version: str | None = None  # a watch cut short resumes from the last version seen: no write missed
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self._watch()
            except Exception:  # noqa: BLE001 - the connection cut: watch again
                continue

    def _watch(self) -> None:
        for event in self.watch.stream(self.api.list_namespaced_lease, self.namespace, resource_version=self.version,
                                       field_selector=f"metadata.name={LEASE}", timeout_seconds=60):  # fmt: skip
            self.version = event["object"].metadata.resource_version
            spec = event["object"].spec
            if spec.renew_time is not None and spec.renew_time not in self.times:
                self.times.append(spec.renew_time)
                self.holders.add(spec.holder_identity)
                self.transitions.add(spec.lease_transitions or 0)

    def gaps(self, since: datetime, until: datetime) -> list[float]:
        inside = [t for t in self.times if since <= t <= until]
        return [(b - a).total_seconds() for a, b in zip(inside, inside[1:], strict=False)]

    def stop(self) -> None:
        self.stopped.set()
        self.watch.stop()


class FdPeak:
    """The most file descriptors a process held, read from /proc every 20 ms while in its ``with``."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.samples = pid, 0, 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def _sample(self) -> None:
        while not self.stopped.wait(0.02):
            self.peak, self.samples = max(self.peak, self.count()), self.samples + 1

    def __enter__(self) -> FdPeak:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(5)


SENDERS = 64  # twice the connections the endpoint holds (32)
FLOOD_SECONDS = 20.0  # ten renewals at the default 2 s
RETRY = 2.0  # the operator's renewal period (lease_retry_seconds' default)


@pytest.mark.timeout(300)
def test_a_slow_header_flood_delays_no_lease_renewal_and_keeps_no_delivery_out(
    cluster, slipway_crds, namespace, kube_api, tmp_path
):
    from datetime import UTC

    hooked = Hooked("flooded", cluster, namespace, tmp_path)
    renewals = Renewals(kube_api, namespace)
    try:
        wait_for(lambda: holder(kube_api, namespace) == "flooded", 60, "the replica to lead")
        hooked.listening()
        fds = FdPeak(hooked.replica.proc.pid)
        fds_before, served, refused = fds.count(), 0, []
        peak = {"connections": 0.0, "fds": fds_before}
        start = datetime.now(UTC)
        with SlowFlood(hooked.port, SENDERS, pace=0.25) as flood, fds:
            deadline = time.monotonic() + FLOOD_SECONDS
            while time.monotonic() < deadline:
                began = time.monotonic()
                try:
                    status, outcome = hooked.post(*signed())
                except httpx.HTTPError as exc:
                    status, outcome = 0, type(exc).__name__
                if (status, outcome) == (200, "unfollowed"):
                    served += 1
                else:
                    refused.append((status, outcome))
                connections = hooked.replica.metric("slipway_mlflow_webhook_connections") or 0.0
                peak["connections"] = max(peak["connections"], connections)
                time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))  # one genuine delivery a second
        end = datetime.now(UTC)
        peak["fds"] = fds.peak
        wait_for(lambda: len([t for t in renewals.times if t > end]) >= 1, 30, "a renewal after the flood")
        gaps = renewals.gaps(start, end)
        counted = {o: hooked.outcome(o) for o in ("unfollowed", "timeout", "evicted", "overloaded", "rate-limited")}
        alive = hooked.replica.proc.poll() is None and hooked.replica.metric("slipway_leader") == 1
    finally:
        renewals.stop()
        hooked.replica.stop()
    report(f"\nslow-header flood, {SENDERS} senders for {FLOOD_SECONDS:.0f} s: {flood.opened} connections opened, "
           f"{flood.closed_by_server} closed by the endpoint, {flood.bytes_sent} header bytes sent; the endpoint "
           f"counted {counted}, held at most {peak['connections']:.0f} connections, the operator's fds "
           f"{fds_before} -> at most {peak['fds']} ({fds.samples} samples); "
           f"genuine deliveries: {served} served, refused {refused}; "
           f"Lease renewals during the flood: {len(gaps) + 1}, gaps {min(gaps):.2f}-{max(gaps):.2f} s "
           f"(period {RETRY:g} s), holders {renewals.holders}, transitions {renewals.transitions}")  # fmt: skip
    # The flood was one: it opened far more connections than the endpoint holds, and they were cut.
    assert flood.opened > 2 * SENDERS and counted["timeout"] + counted["evicted"] > SENDERS
    # Renewals on time: every 2 s (a renewal late by a second would show; the renew deadline is 10 s).
    assert len(gaps) >= FLOOD_SECONDS / RETRY - 2 and max(gaps) < RETRY + 1.5, gaps
    assert alive and renewals.holders == {"flooded"} and len(renewals.transitions) == 1
    # Genuine deliveries got in: the oldest slow sender gives way to a new connection.
    assert served >= 0.8 * (served + len(refused)) and served >= 10, refused
    # Bounded: the endpoint's connections (32 at most) and the operator's file descriptors, sampled every 20 ms:
    # the 32 held, plus what one turn of the endpoint's loop accepts (its backlog) and as many it has just
    # closed, plus a few for the operator's own clients; not one per sender (64) nor per connection (thousands).
    limits = Limits()
    assert peak["connections"] <= limits.connections
    assert peak["fds"] <= fds_before + limits.connections + 2 * limits.backlog + 8, (peak, fds.samples)
