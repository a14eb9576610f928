"""A tenant's trainer cannot take the operator's memory through MLflow: the namespace editor's
TrainingRun trains while its trainer logs 40,000 metric keys to the run (a metric key per step, by
accident or not), and the operator (``python -m slipway`` as a process, as its pod runs it),
reading that run every progress poll, stays far below its 512 Mi limit (its RSS sampled every
50 ms throughout); the TrainingRun says why its progress stopped, naming the run and the fix, and
trains on.

(A server repeating its page token is attacked with a real local server in
tests/unit/mlflow/test_mlflow_bounds.py: the fault proxy forwards bytes and cannot rewrite an answer.)"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client

from localkube.mlflow_server import start_mlflow
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_testing import OperatorReplica, condition, training_run, wait_status

pytestmark = pytest.mark.cluster

GROUP, VERSION = "slipway.dev", "v1alpha1"
# An answer of about 5.6 MiB, over the operator's 4 MiB cap, that MLflow still builds within the operator's
# 10 s on a loaded machine (100,000 keys, 14 MiB, took longer in CI: the read timed out instead of being cut).
KEYS = 40_000
LIMIT_MIB = 512  # the operator's memory limit in the chart
MiB = 2**20


class RssSampler:
    """The resident set of process ``pid`` (the operator's), every ``period`` seconds in a thread."""

    def __init__(self, pid: int, period: float = 0.05) -> None:
        self.status = Path(f"/proc/{pid}/status")
        self.period = period
        self.peak = self.first = self.now()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self.thread.start()

    def now(self) -> int:
        lines = self.status.read_text().splitlines()
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith("VmRSS:"))

    def _sample(self) -> None:
        while not self.stopped.wait(self.period):
            self.peak = max(self.peak, self.now())

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


def cut_reads(replica: OperatorReplica) -> float:
    """The operator's MLflow requests that ended in an error (its /metrics): its reads of the run, cut
    at the limit or not answered in time."""
    wanted = ('service="mlflow"', 'outcome="error"')
    lines = replica.metrics_text().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("slipway_external_requests_total{") and all(w in line for w in wanted))  # fmt: skip


@pytest.mark.timeout(900)  # 40 batches into a local MLflow (SQLite), then 2 reads 20 s apart: 5 minutes at full load
def test_a_trainer_logging_40000_metric_keys_leaves_the_operator_far_below_its_limit(
    cluster, slipway_crds, namespace, kube_api, tenant, tmp_path
):
    restricted = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    client.CoreV1Api(kube_api).patch_namespace(namespace, restricted)
    # An MLflow of its own: the attack keeps a one-worker server busy for minutes (16 s per read of the
    # run), which would starve every other test sharing the cluster's MLflow.
    server = start_mlflow(tmp_path / "mlflow")
    replica = OperatorReplica("memory", cluster, namespace, tmp_path, standalone=True,
                              env={"SLIPWAY_MLFLOW_URL": server.url})  # fmt: skip
    try:
        wait_for(lambda: replica.metrics_text() != "", 60, "the operator's /metrics")
        attack(server.url, namespace, kube_api, tenant, replica)
    finally:
        replica.stop()
        server.stop()


def attack(mlflow_url: str, namespace: str, kube_api, tenant, replica: OperatorReplica) -> None:
    body = training_run("many-keys", steps=600, env={"SLIPWAY_STEP_SECONDS": "1"})
    client.CustomObjectsApi(tenant.api).create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns", body)
    obj = wait_status(kube_api, namespace, "TrainingRun", "many-keys",
                      lambda o: o.get("status", {}).get("phase") == "Running", 120, "training")  # fmt: skip
    run_id = obj["status"]["mlflow"]["runId"]
    sampler = RssSampler(replica.proc.pid)
    started = time.monotonic()
    try:
        # As the trainer would: one key per step, 1,000 keys a request (MLflow's limit), 2 at a time; the
        # local MLflow (SQLite) takes seconds per batch as the run grows (62 s for all 40 beside two CPU
        # hogs and a busy machine). MLflow answers 503 when a write waited 20 s for SQLite's lock (its
        # busy timeout): each batch is retried through 10 such answers, minutes in all, far longer than
        # another batch or a read holds the lock.
        def batch(n: int) -> None:  # made in the worker: the test's own keys are never all in memory at once
            mlflow.log_batch(run_id, metrics=[(f"loss_step_{i}", 0.5, i, 1700000000000) for i in range(n, n + 1000)])

        with (
            MlflowClient(mlflow_url, timeout=60, retries=10) as mlflow,
            concurrent.futures.ThreadPoolExecutor(2) as pool,
        ):
            list(pool.map(batch, range(0, KEYS, 1000)))
            logged = time.monotonic() - started
            assert len(mlflow.get_metric_history(run_id, f"loss_step_{KEYS - 1}")) == 1  # all of them are there

        def unreadable(o: dict) -> bool:
            return condition(o, "MlflowRunRead").get("reason") == "MlflowRunTooLarge"

        obj = wait_status(kube_api, namespace, "TrainingRun", "many-keys", unreadable, 120, "MlflowRunRead=False")
        # Read again every 10 progress polls (20 s here), and cut at the limit (or, on a machine slow enough,
        # not answered in the operator's 10 s): either way abandoned, never held whole.
        cuts = cut_reads(replica)
        wait_for(lambda: cut_reads(replica) >= cuts + 2, 120, "2 more reads of the run, abandoned")
    finally:
        sampler.stop()
    peak, first = sampler.peak / MiB, sampler.first / MiB
    shown = (f"{KEYS} metric keys logged in {logged:.0f} s; the operator's RSS {first:.0f} MiB before, "
             f"peak {peak:.0f} MiB (+{peak - first:.0f}) against the operator's {LIMIT_MIB} Mi limit")  # fmt: skip
    print(f"\n{shown}", file=sys.__stderr__)

    read = condition(obj, "MlflowRunRead")
    assert read["status"] == "False", read
    assert read["message"].startswith(f"MLflow run {run_id} of TrainingRun {namespace}/many-keys is too large"), read
    assert "over 4 MiB" in read["message"] and "mlflow.log_metric('loss', value, step=step)" in read["message"]
    # It trains on: Running, its passes not failing on MLflow, not Stalled.
    obj = wait_status(kube_api, namespace, "TrainingRun", "many-keys", lambda o: True, 10, "its status")
    assert obj["status"]["phase"] == "Running" and condition(obj, "Stalled").get("status") != "True", obj["status"]
    assert condition(obj, "Reconciling").get("reason") != "MlflowUnavailable", obj["status"]
    # The run (about 5.6 MiB as MLflow answers it) is never held: a read costs at most a few MiB.
    assert peak - first < 64, (first, peak)
    assert peak < LIMIT_MIB / 2, (first, peak)
