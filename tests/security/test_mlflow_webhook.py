"""Alias moves in a second, and only when MLflow said so: a real MLflow server (3.17.2, SQLite) delivers
its registry webhook to the operator (``python -m slipway`` as a process): a move of the followed alias
starts the canary at once; a delivery with a wrong signature, a genuine delivery of MLflow's replayed,
one signed too long ago, and one for a model nobody follows change nothing and cost the operator no
MLflow request (its /metrics). Then alias move -> canary started is measured with the webhook and with
polling alone.

MLflow's server refuses webhook URLs that resolve to private addresses (its SSRF guard, at create time
and again at connect time) unless started with ``MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS=true``, and URLs that
are not https unless ``MLFLOW_WEBHOOK_ALLOWED_SCHEMES`` allows http: the operator listens on plain HTTP
on 127.0.0.1 here, so the test runs an MLflow of its own with both (the cluster's MLflow starts without
them)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from localkube.mlflow_server import MlflowServer, start_mlflow
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_testing import (
    ROOT,
    OperatorReplica,
    Versions,
    apply_object,
    deployment,
    free_port,
    report,
    serving,
    status_of,
    train_run,
)

pytestmark = pytest.mark.cluster

SECRET = "webhook-secret-of-the-test"
EVENTS = ["model_version_alias.created", "model_version_alias.deleted"]
MOVES = 10
POLLING_MOVES = 5  # at the default 30 s a poll: each waits 15 s on average


class Recorder:
    """The URL registered in MLflow: records each delivery as MLflow sent it (headers, bytes), then
    forwards it unchanged to the operator and answers with the operator's answer."""

    def __init__(self, target: str) -> None:
        self.deliveries: list[tuple[dict[str, str], bytes]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower().startswith(("x-mlflow", "content-type"))}
                recorder.deliveries.append((headers, body))
                answer = httpx.post(target, content=body, headers=headers, timeout=10)
                self.send_response(answer.status_code)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/mlflow/webhook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


def registration_script() -> str:
    """The Python block after ``<!-- register-webhook -->`` in the how-to."""
    text = (ROOT / "docs" / "how-to" / "mlflow-webhook.md").read_text()
    block = text.split("<!-- register-webhook -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    return textwrap.dedent(block)


class Setup:
    """A private MLflow (webhooks to 127.0.0.1 allowed), a trained run in it, the operator as a process."""

    def __init__(self, namespace: str, cluster: Any, tmp_path: Path, monkeypatch, webhook: bool) -> None:
        # Read by the server started below: deliveries to 127.0.0.1, over plain HTTP.
        monkeypatch.setenv("MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS", "true")
        monkeypatch.setenv("MLFLOW_WEBHOOK_ALLOWED_SCHEMES", "http,https")
        self.server: MlflowServer = start_mlflow(tmp_path / "mlflow")
        self.hook_port = free_port()
        env = {"SLIPWAY_MLFLOW_URL": self.server.url, "SLIPWAY_ALIAS_POLL_SECONDS": "30"}  # the default
        if webhook:  # the ids believed are recorded in a Lease of the test's namespace (its operator's)
            env |= {"SLIPWAY_MLFLOW_WEBHOOK_SECRET": SECRET, "SLIPWAY_MLFLOW_WEBHOOK_PORT": str(self.hook_port),
                    "SLIPWAY_LEADER_ELECTION_NAMESPACE": namespace}  # fmt: skip
        self.replica = OperatorReplica("hooked", cluster, namespace, tmp_path, standalone=True, env=env)
        self.endpoint = f"http://127.0.0.1:{self.hook_port}/mlflow/webhook"
        self.recorder: Recorder | None = None
        self.mlflow = MlflowClient(self.server.url)

    def register(self) -> None:
        """The script docs/how-to/mlflow-webhook.md gives an MLflow admin (MLflow's own client), run
        twice (it is idempotent), registering the recorder's URL."""
        import mlflow

        self.recorder = Recorder(self.endpoint)
        env = {**os.environ, "MLFLOW_TRACKING_URI": self.server.url, "SLIPWAY_WEBHOOK_URL": self.recorder.url,
               "SLIPWAY_WEBHOOK_SECRET": SECRET}  # fmt: skip
        for _ in range(2):
            subprocess.run([sys.executable, "-c", registration_script()], env=env, check=True, timeout=60)
        hooks = mlflow.MlflowClient(tracking_uri=self.server.url).list_webhooks()
        assert [(h.name, h.url, sorted(str(e) for e in h.events)) for h in hooks] == [
            ("slipway", self.recorder.url, sorted(EVENTS))
        ]

    def stop(self) -> None:
        self.replica.stop()
        if self.recorder is not None:
            self.recorder.stop()
        self.mlflow.close()
        self.server.stop()

    def mlflow_requests(self) -> float:
        text = self.replica.metrics_text()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("slipway_external_requests_total{") and 'service="mlflow"' in line)  # fmt: skip

    def deliveries(self, outcome: str) -> float:
        wanted = f'slipway_mlflow_webhook_deliveries_total{{outcome="{outcome}"}}'
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.replica.metrics_text().splitlines()
                   if line.startswith(wanted))  # fmt: skip


def following(setup: Setup, kube_api, namespace: str) -> Versions:
    """`digits` follows `candidate` of a model with one version, served as stable."""
    run_id = train_run(setup.server.url, "webhook-tests", steps=4)
    versions = Versions(setup.mlflow, f"digits-{namespace}", run_id)
    v1 = versions.publish()
    wait_for(lambda: setup.replica.metrics_text() != "", 60, "the operator's /metrics")
    apply_object(kube_api, namespace, deployment(versions.model))
    serving(kube_api, namespace, v1, timeout=180)
    return versions


def canary_of(kube_api, namespace: str) -> str | None:
    return (status_of(kube_api, namespace).get("canary") or {}).get("modelVersion")


def move_and_time(setup: Setup, versions: Versions, kube_api, namespace: str, timeout: float) -> float:
    """Register a version, move `candidate` to it, and time until status shows its canary."""
    version = setup.mlflow.create_model_version(versions.model, f"runs:/{versions.run_id}/model", versions.run_id)
    started = time.monotonic()
    setup.mlflow.set_alias(versions.model, "candidate", version.version)
    wait_for(lambda: canary_of(kube_api, namespace) == version.version, timeout, f"canary of {version.version}",
             interval=0.05)  # fmt: skip
    return time.monotonic() - started


def quiet(setup: Setup, seconds: float = 2.0, timeout: float = 30.0) -> None:
    """Until the operator's MLflow request count has stayed the same for ``seconds``: a woken pass may
    read MLflow more than once, and under load its reads come seconds apart."""
    last = {"count": setup.mlflow_requests(), "since": time.monotonic()}

    def still() -> bool:
        count = setup.mlflow_requests()
        if count != last["count"]:
            last.update(count=count, since=time.monotonic())
        return time.monotonic() - last["since"] >= seconds

    wait_for(still, timeout, f"{seconds:.0f} s without an MLflow request", interval=0.1)


def unchanged_for(setup: Setup, kube_api, namespace: str, seconds: float) -> None:
    """Over ``seconds``: no MLflow request by the operator and the same canary (raises otherwise)."""
    requests, canary = setup.mlflow_requests(), canary_of(kube_api, namespace)
    changed = None
    try:
        changed = wait_for(lambda: setup.mlflow_requests() != requests or canary_of(kube_api, namespace) != canary,
                           seconds, "a change", interval=0.1)  # fmt: skip
    except TimeoutError:
        return
    raise AssertionError(f"the operator acted: MLflow requests {requests} -> {setup.mlflow_requests()} ({changed})")


def signed(data: dict[str, Any], at: float, secret: str = SECRET) -> tuple[dict[str, str], bytes]:
    """A delivery as MLflow makes it (its own signing function)."""
    from mlflow.webhooks.delivery import _generate_hmac_signature

    body = json.dumps({"entity": "model_version_alias", "action": "created", "timestamp": "", "data": data})
    delivery, stamp = str(uuid.uuid4()), str(int(at))
    headers = {"Content-Type": "application/json", "X-MLflow-Delivery-Id": delivery, "X-MLflow-Timestamp": stamp,
               "X-MLflow-Signature": _generate_hmac_signature(secret, delivery, stamp, body)}  # fmt: skip
    return headers, body.encode()


def attack(setup: Setup, kube_api, namespace: str, headers: dict[str, str], body: bytes, outcome: str) -> int:
    """Send one delivery straight to the operator; it is refused (or wakes nothing) as ``outcome`` and,
    over the next 3 s, costs no MLflow request and changes no canary. The HTTP status."""
    before = setup.deliveries(outcome)
    requests = setup.mlflow_requests()
    answer = httpx.post(setup.endpoint, content=body, headers=headers, timeout=10)
    wait_for(lambda: setup.deliveries(outcome) == before + 1, 10, f"the delivery counted as {outcome}")
    unchanged_for(setup, kube_api, namespace, 3.0)
    assert setup.mlflow_requests() == requests
    return answer.status_code


def assert_secret_nowhere(setup: Setup, kube_api, namespace: str) -> None:
    """Not in the operator's log, its /metrics, the deployment (status) or the namespace's events."""
    from kubernetes import client

    from slipway_testing import get_object

    events = client.CoreV1Api(kube_api).list_namespaced_event(namespace).to_dict()
    deployed = get_object(kube_api, namespace, "InferenceDeployment", "digits")
    for where, text in [("log", setup.replica.log()), ("/metrics", setup.replica.metrics_text()),
                        ("object", json.dumps(deployed)), ("events", json.dumps(events, default=str))]:  # fmt: skip
        assert SECRET not in text, where


@pytest.mark.timeout(900)
def test_an_alias_move_starts_the_canary_at_once_and_forged_replayed_stale_or_unfollowed_deliveries_change_nothing(
    cluster, slipway_crds, namespace, kube_api, tmp_path, monkeypatch
):
    setup = Setup(namespace, cluster, tmp_path, monkeypatch, webhook=True)
    try:
        setup.register()
        versions = following(setup, kube_api, namespace)
        assert setup.recorder is not None
        recorder = setup.recorder
        # MLflow delivers at its own pace: `candidate` set by publish and `production` moved by the
        # operator's promotion may still be on their way; both are in before the count starts.
        wait_for(lambda: {json.loads(body)["data"]["alias"] for _, body in recorder.deliveries}
                 >= {"candidate", "production"}, 30, "MLflow's deliveries of v1's aliases")  # fmt: skip
        quiet(setup)
        # A genuine delivery, served: `candidate` set again where it is (the pass reads MLflow, no change).
        requests, woke, delivered = setup.mlflow_requests(), setup.deliveries("woke"), len(recorder.deliveries)
        setup.mlflow.set_alias(versions.model, "candidate", "1")
        wait_for(lambda: setup.deliveries("woke") == woke + 1, 10, "MLflow's delivery served")
        wait_for(lambda: setup.mlflow_requests() > requests, 10, "the woken pass reading the alias")  # seen here
        quiet(setup)  # that pass over
        assert len(recorder.deliveries) == delivered + 1, recorder.deliveries[delivered:]
        genuine = recorder.deliveries[-1]
        assert json.loads(genuine[1])["data"] == {"name": versions.model, "alias": "candidate", "version": "1"}
        unchanged_for(setup, kube_api, namespace, 3.0)  # settled: nothing reads MLflow on its own
        now = time.time()
        move = {"name": versions.model, "alias": "candidate", "version": "2"}
        forged = signed(move, now, "not the secret")
        old, unfollowed = signed(move, now - 600), signed({**move, "name": "nobody-follows"}, now)
        results = {
            "wrong signature": attack(setup, kube_api, namespace, *forged, "bad-signature"),
            "MLflow's delivery replayed": attack(setup, kube_api, namespace, *genuine, "replayed"),
            "signed 10 minutes ago": attack(setup, kube_api, namespace, *old, "stale"),
            "model nobody follows": attack(setup, kube_api, namespace, *unfollowed, "unfollowed"),
        }
        # The one signed 10 minutes ago: its skew in the gauge and in a warning (what clocks apart would show).
        skew = setup.replica.metric("slipway_mlflow_webhook_clock_skew_seconds")
        warned = [line for line in setup.replica.log().splitlines() if "refused as stale" in line]
        times = [move_and_time(setup, versions, kube_api, namespace, 10) for _ in range(MOVES)]
        assert setup.deliveries("woke") >= woke + 1 + MOVES
        assert_secret_nowhere(setup, kube_api, namespace)
    finally:
        setup.stop()
    assert results == {"wrong signature": 401, "MLflow's delivery replayed": 409, "signed 10 minutes ago": 401,
                       "model nobody follows": 200}, results  # fmt: skip
    assert skew is not None and -700 < skew <= -600 and len(warned) == 1 and "WARNING" in warned[0], (skew, warned)
    p50 = statistics.median(times)
    report(f"\nalias move -> canary started, MLflow webhook: p50 {p50:.2f} s, max {max(times):.2f} s over {MOVES} "
           f"moves ({', '.join(f'{t:.2f}' for t in times)}); attacks {results}, each 0 MLflow requests")  # fmt: skip
    assert p50 < 2.0, times


@pytest.mark.timeout(900)
def test_without_a_webhook_an_alias_move_is_seen_by_polling(
    cluster, slipway_crds, namespace, kube_api, tmp_path, monkeypatch
):
    setup = Setup(namespace, cluster, tmp_path, monkeypatch, webhook=False)
    try:
        versions = following(setup, kube_api, namespace)
        times = [move_and_time(setup, versions, kube_api, namespace, 45) for _ in range(POLLING_MOVES)]
        with pytest.raises(httpx.ConnectError):  # no secret, no endpoint
            httpx.post(setup.endpoint, content=b"{}", timeout=5)
    finally:
        setup.stop()
    p50 = statistics.median(times)
    report(f"\nalias move -> canary started, polling every 30 s: p50 {p50:.2f} s, max {max(times):.2f} s over "
           f"{POLLING_MOVES} moves ({', '.join(f'{t:.2f}' for t in times)})")  # fmt: skip
    assert max(times) <= 30 + 10, times
