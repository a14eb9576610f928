"""What an MLflow server, or a trainer writing to it, can make the operator do, against real local
HTTP servers: an answer is read to at most MAX_ANSWER_BYTES (a 40 MiB run is cut, not parsed), a
paginated answer stops at a repeated page token or MAX_PAGES, and no write starts after this
replica's renew deadline or outlasts it."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from slipway.leader import LeaderElector, Timing
from slipway.mlflow import (
    LeaseDeadlinePassed,
    MlflowAnswerTooLarge,
    MlflowClient,
    MlflowError,
    MlflowUnavailable,
    Run,
)
from slipway.mlflow import http as mlflow_http
from slipway.training import mlflowrun
from slipway.training.model import TrainingRunSpec
from slipway.training.state import progress_from_run

MiB = 2**20


class Server:
    """A real HTTP server in a thread; ``answer(handler)`` writes each reply. It records the paths
    asked, the bytes it managed to send, and whether the client hung up."""

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        self.asked: list[str] = []
        self.sent = 0
        self.hung_up = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # a reply in one segment (flushed after each request): no Nagle delays
            disable_nagle_algorithm = True

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.body = json.loads(self.rfile.read(length)) if length else {}
                server.asked.append(f"{self.command} {self.path.split('?')[0]}")
                try:
                    answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    server.hung_up.set()

            do_GET = do_POST = do_DELETE = _any

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True).start()

    def write(self, handler: http.server.BaseHTTPRequestHandler, data: bytes) -> None:
        handler.wfile.write(data)
        handler.wfile.flush()
        self.sent += len(data)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Server:
        started.append(Server(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def reply(handler: http.server.BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


# --- finding: a run with a metric key per step took the operator's memory ----------------------


def metrics_json(count: int) -> Iterator[bytes]:
    """A run's answer with ``count`` latest metrics, as MLflow streams it (about 80 bytes each)."""
    yield b'{"run": {"info": {"run_id": "big", "experiment_id": "1", "status": "RUNNING"}, "data": {"metrics": ['
    for start in range(0, count, 1000):
        rows = (f'{{"key": "loss_step_{i}", "value": 0.5, "timestamp": 1700000000000, "step": {i}}}'
                for i in range(start, min(count, start + 1000)))  # fmt: skip
        yield (", " if start else "").encode() + ", ".join(rows).encode()
    yield b"]}}}"


def test_a_40_mib_run_is_cut_at_the_limit_and_named_with_the_fix(serve) -> None:
    def big_run(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for part in metrics_json(500_000):  # 40 MiB
            if server.sent > 40 * MiB:
                break
            server.write(handler, f"{len(part):x}\r\n".encode() + part + b"\r\n")
        server.write(handler, b"0\r\n\r\n")

    server = serve(big_run)
    client = MlflowClient(server.url, timeout=10)
    with pytest.raises(MlflowAnswerTooLarge) as refused:
        client.get_run("big")
    message = str(refused.value)
    assert "GET /api/2.0/mlflow/runs/get (run_id='big') answered more than 4 MiB; Slipway reads no more" in message
    assert "mlflow.log_metric('loss', value, step=step)" in message
    assert not isinstance(refused.value, MlflowUnavailable)  # not retried: the same answer comes again
    assert server.hung_up.wait(10)  # the client hung up: the rest was never read
    assert server.sent < 4 * MiB + 8 * MiB  # what the sockets' buffers took beyond the limit, not 40 MiB


def test_a_run_within_the_limit_is_read(serve) -> None:
    server = serve(lambda h: [h.send_response(200), h.send_header("Content-Length", str(len(data))),
                              h.end_headers(), h.wfile.write(data)])  # fmt: skip
    data = b"".join(metrics_json(40_000))  # 3.3 MiB: a run with 40,000 metric keys is still read
    assert 3 * MiB < len(data) < mlflow_http.MAX_ANSWER_BYTES
    assert len(MlflowClient(server.url).get_run("big").metrics) == 40_000


def test_a_trainingrun_keeps_what_its_passes_use_not_the_run() -> None:
    metrics = {f"m{i}": mlflow_run_metric(f"m{i}", i) for i in range(50_000)}
    metrics["slipway.cost.total"] = mlflow_run_metric("slipway.cost.total", 3)
    tags = {"slipway.dev/attempts": "2", "slipway.dev/checkpoint": "/ckpt/7", **{f"t{i}": "x" for i in range(1000)}}
    run = Run("r1", "1", "n", "RUNNING", "", metrics=metrics, tags=tags, params={f"p{i}": "v" for i in range(100)})
    kept = mlflowrun.seen(run, ["slipway.cost.total"])
    assert (kept.progress, kept.checkpoint) == progress_from_run(run)  # status shows the same
    assert kept.tags == {"slipway.dev/attempts": "2"} and list(kept.metrics) == ["slipway.cost.total"]
    assert len(kept.progress["metrics"]) == 32 and kept.progress["metricsOmitted"] == 50_000 - 32 + 1


def mlflow_run_metric(key: str, step: int) -> Any:
    from slipway.mlflow import Metric

    return Metric(key, 0.5, step, 1700000000000)


def test_an_unreadable_run_is_a_condition_naming_it_and_the_fix_and_the_pass_goes_on() -> None:
    from slipway.training import runread

    class Client:
        def get_run(self, run_id: str) -> Run:
            raise MlflowAnswerTooLarge("MLflow GET ... answered more than 4 MiB", error_code="ANSWER_TOO_LARGE")

    recorded = {"mlflow": {"runId": "r1", "experimentId": "9"}}
    config = SimpleNamespace(progress_poll_seconds=15)
    ctx = SimpleNamespace(status=recorded, memory={}, config=config, namespace="team-a", name="sweep-3")
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "command": ["train"]})
    run, cached = runread.mlflow_run(ctx, spec, Client())
    assert (run.run_id, run.experiment_id, run.progress, cached) == ("r1", "9", None, False)
    [condition] = mlflowrun.read_condition(run, [])
    assert (condition.type, condition.status, condition.reason) == ("MlflowRunRead", "False", "MlflowRunTooLarge")
    assert "MLflow run r1 of TrainingRun team-a/sweep-3 is too large to read" in condition.message
    assert "over 4 MiB" in condition.message and "not a new key per step" in condition.message

    # Read again only every 10 polls; MLflow too slow to build the answer: still unreadable, the pass goes on.
    class Slow:
        def get_run(self, run_id: str) -> Run:
            raise MlflowUnavailable("MLflow did not answer GET .../runs/get in time")

    client = Slow()
    assert runread.mlflow_run(ctx, spec, client) == (run, True)
    ctx.memory[runread.RUN_READ] = (run, ctx.memory[runread.RUN_READ][1] - 10 * 15)
    assert runread.mlflow_run(ctx, spec, client) == (run, False)
    with pytest.raises(MlflowUnavailable):  # a run never found unreadable: an outage, as before
        runread.read_run(ctx, client, "r1", mlflowrun.RunSeen("r1", "9", "RUNNING"))
    # Readable again (the keys deleted): True, once it was False; nothing for a run always readable.
    readable = mlflowrun.RunSeen("r1", "9", "RUNNING")
    assert [c.status for c in mlflowrun.read_condition(readable, [{"type": "MlflowRunRead"}])] == ["True"]
    assert mlflowrun.read_condition(readable, [{"type": "Ready"}]) == []


# --- finding: a server repeating its page token kept a pass looping -----------------------------


def test_a_repeated_page_token_stops_the_search_at_the_second_page(serve) -> None:
    def again(handler: Any) -> None:  # after 1,000 pages it stops: a client without the bound fails, not hangs
        token = "" if len(server.asked) > 1000 else "again"
        reply(handler, {"runs": [{"info": {"run_id": "r"}}], "next_page_token": token})

    server = serve(again)
    with pytest.raises(MlflowError) as refused:
        MlflowClient(server.url).search_runs(["1"])
    assert refused.value.error_code == "PAGING_LOOP" and not isinstance(refused.value, MlflowUnavailable)
    assert "POST /api/2.0/mlflow/runs/search answered page 2 with a page token it had answered before" in str(
        refused.value
    )
    print(f"a repeated page token: {len(server.asked)} requests, then {refused.value.error_code}")
    assert server.asked == ["POST /api/2.0/mlflow/runs/search"] * 2


def test_endless_fresh_page_tokens_stop_at_max_pages(serve) -> None:
    def fresh(handler: Any) -> None:
        token = handler.path.split("page_token=")[1] if "page_token=" in handler.path else "0"
        reply(
            handler,
            {
                "model_versions": [{"name": "m", "version": token}],
                "next_page_token": str(int(token) + 1) if int(token) < 1000 else "",
            },
        )

    server = serve(fresh)
    with pytest.raises(MlflowError, match="answered more than 100 pages: Slipway reads no more") as refused:
        MlflowClient(server.url).search_model_versions("name='m'")
    print(f"endless fresh page tokens: {len(server.asked)} requests, then {refused.value.error_code}")
    assert refused.value.error_code == "TOO_MANY_PAGES"
    assert len(server.asked) == mlflow_http.MAX_PAGES == 100


# --- finding: an MLflow write outlived the lease ------------------------------------------------


def leader(left: float, renew_deadline: float = 10.0) -> LeaderElector:
    """A leader whose last renewal was sent ``renew_deadline - left`` seconds ago (a real clock)."""
    elector = LeaderElector(None, "a", Timing(15.0, renew_deadline, 2.0), on_lead=lambda: None, on_lost=lambda _: None)
    elector.leading = True
    elector.renewed_at = time.monotonic() - (renew_deadline - left)
    return elector


def test_time_left_counts_down_to_the_renew_deadline_and_is_zero_for_a_standby() -> None:
    assert 2.9 < leader(3.0).time_left() <= 3.0
    assert leader(-1.0).time_left() == 0.0  # past the deadline
    standby = leader(5.0)
    standby.leading = False
    assert standby.time_left() == 0.0
    lost = leader(5.0)
    lost.lost = "taken by 'b'"
    assert lost.time_left() == 0.0


def test_no_write_starts_after_the_deadline_and_reads_still_go(serve) -> None:
    server = serve(lambda h: reply(h, {"runs": [], "run": {"info": {"run_id": "r"}}}))
    client = MlflowClient(server.url, lease_left=leader(-0.5).time_left)
    with pytest.raises(LeaseDeadlinePassed, match=r"registered-models/alias .*not sent: this replica's Lease is past"):
        client.set_alias("m", "production", 3)
    with pytest.raises(LeaseDeadlinePassed):
        client.update_run("r", status="FINISHED")
    print(f"writes with the deadline passed: {len(server.asked)} reached the server")
    assert server.asked == []  # not one write reached the server
    assert client.get_run("r").run_id == "r" and client.search_runs(["1"]) == []  # reads: POST search too
    assert server.asked == ["GET /api/2.0/mlflow/runs/get", "POST /api/2.0/mlflow/runs/search"]


def test_a_write_in_flight_is_cut_at_the_deadline_however_slow_the_server(serve) -> None:
    release = threading.Event()

    def silent(handler: Any) -> None:  # takes the request, answers nothing for 30 s
        release.wait(30)

    def dripping(handler: Any) -> None:  # answers at once, then one byte every 50 ms for 30 s
        handler.send_response(200)
        handler.send_header("Content-Length", "600")
        handler.end_headers()
        for _ in range(600):
            if release.wait(0.05):
                return
            server.write(handler, b" ")

    try:
        for answer in (silent, dripping):
            server = serve(answer)
            client = MlflowClient(server.url, timeout=10, lease_left=leader(1.0).time_left)
            started = time.monotonic()
            with pytest.raises(MlflowUnavailable):
                client.set_alias("m", "production", 3)
            took = time.monotonic() - started
            print(f"a write in flight with 1 s of lease left, {answer.__name__} server: ended after {took:.2f} s")
            assert server.asked == ["POST /api/2.0/mlflow/registered-models/alias"]
            # The write ends by the deadline (1 s), well inside the margin before a standby may lead (5 s).
            assert took < 1.0 + 0.2, (answer.__name__, took)
    finally:
        release.set()


def test_without_a_lease_writes_keep_the_configured_timeout(serve) -> None:
    server = serve(lambda h: reply(h, {}))
    client = MlflowClient(server.url, timeout=10)
    client.set_alias("m", "production", 3)
    assert server.asked == ["POST /api/2.0/mlflow/registered-models/alias"]


def test_the_leader_elected_at_start_bounds_the_operators_mlflow_writes(serve) -> None:
    """operator.elect gives the operator's MLflow client the elector's time left: before this replica
    leads, a write is not sent."""
    import asyncio

    import kopf
    from kubernetes import client as k8s

    from slipway.config import OperatorConfig
    from slipway.controller import Cache, Scheduler
    from slipway.operator import elect

    server = serve(lambda h: reply(h, {}))

    async def started() -> LeaderElector:
        memo = kopf.Memo()
        memo.cache = Cache({})
        memo.scheduler = Scheduler(lambda key: None, workers=3)
        memo.kube = SimpleNamespace(api=k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9")))
        memo.mlflow = MlflowClient(server.url)
        elector = elect(memo, OperatorConfig(), lost=lambda why: None)
        try:
            assert memo.mlflow.lease_left == elector.time_left
            with pytest.raises(LeaseDeadlinePassed):  # standing by: not leading yet
                memo.mlflow.set_alias("m", "production", 3)
        finally:
            memo.fence.stop()
            await elector.resign()
        return elector

    asyncio.run(started())
    assert server.asked == []
