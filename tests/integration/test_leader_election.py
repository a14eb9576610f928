"""High availability on the local cluster: two operator replicas (processes, as two pods would be)
share the Lease slipway-operator; only its holder reconciles. SIGKILL of the leader mid-run: the
standby takes over within the lease duration and finishes the run, with one Job and one MLflow
run. A replica that stops cleanly releases the Lease and the standby takes over at once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, tag_filter
from slipway_testing import OperatorReplica, apply_object, get_object, read_or_none, report, training_run, wait_status

pytestmark = pytest.mark.cluster

LEASE = "slipway-operator"


@pytest.fixture
def replicas(cluster, slipway_crds, namespace, tmp_path) -> Iterator[Callable[[str], OperatorReplica]]:
    started: list[OperatorReplica] = []

    def start(name: str) -> OperatorReplica:
        replica = OperatorReplica(name, cluster, namespace, tmp_path)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()
    for replica in started:
        transitions = [line for line in replica.log().splitlines() if "slipway.leader" in line]
        report(f"--- {replica.name}: leader election\n" + "\n".join(transitions))


def holder(kube_api, namespace: str) -> str | None:
    lease = read_or_none(client.CoordinationV1Api(kube_api).read_namespaced_lease, LEASE, namespace)
    return None if lease is None else (lease.spec.holder_identity or "")


def wait_leader(kube_api, namespace: str, name: str, timeout: float) -> float:
    """Seconds until ``name`` holds the Lease."""
    start = time.monotonic()
    wait_for(lambda: holder(kube_api, namespace) == name, timeout, f"{name} to hold the Lease", interval=0.1)
    return time.monotonic() - start


def wait_standing_by(replica: OperatorReplica, timeout: float = 60) -> None:
    wait_for(lambda: replica.metric("slipway_leader") == 0 and "stands by" in replica.log(), timeout,
             f"{replica.name} to stand by")  # fmt: skip


def jobs(kube_api, namespace: str) -> list[Any]:
    return client.BatchV1Api(kube_api).list_namespaced_job(namespace).items


def step(obj: dict[str, Any]) -> int:
    return int(((obj.get("status") or {}).get("progress") or {}).get("step") or 0)


def test_the_standby_takes_over_a_killed_leader_and_finishes_its_run(kube_api, namespace, replicas, cluster):
    a = replicas("replica-a")
    wait_leader(kube_api, namespace, "replica-a", 60)
    b = replicas("replica-b")
    wait_standing_by(b)

    created = apply_object(kube_api, namespace, training_run("ha", steps=24, env={"SLIPWAY_STEP_SECONDS": "1.5"}))
    running = wait_status(kube_api, namespace, "TrainingRun", "ha", lambda o: step(o) >= 2, 120, "step 2")
    # Only the leader reconciles: the standby ran no pass and holds no lease.
    assert (a.metric("slipway_leader"), b.metric("slipway_leader")) == (1, 0)
    assert (a.metric("slipway_reconcile_total") or 0) > 0
    assert b.metric("slipway_reconcile_total") == 0
    assert (a.health()["reconciliation"]["leader"], b.health()["reconciliation"]["leader"]) == (True, False)
    [job] = jobs(kube_api, namespace)

    a.stop(signal.SIGKILL)  # no clean shutdown: the Lease stays held until it expires
    killed = time.monotonic()
    took_lease = wait_leader(kube_api, namespace, "replica-b", 60)
    wait_for(lambda: (b.metric("slipway_reconcile_total") or 0) > 0, 30, "a pass on replica-b", interval=0.1)
    first_pass = time.monotonic() - killed
    moved = wait_status(kube_api, namespace, "TrainingRun", "ha", lambda o: step(o) > step(running), 120, "progress")
    progressed = time.monotonic() - killed
    done = wait_status(kube_api, namespace, "TrainingRun", "ha", lambda o: o["status"].get("phase") in
                       ("Succeeded", "Failed"), 180, "finish")  # fmt: skip
    finished = time.monotonic() - killed
    report(
        f"\nleader SIGKILLed at step {step(running)}: replica-b took the Lease after {took_lease:.1f}s, "
        f"ran its first pass after {first_pass:.1f}s, wrote progress (step {step(moved)}) after {progressed:.1f}s, "
        f"the run {done['status']['phase']} after {finished:.1f}s (lease 15s, renew 5s, retry 2s)"
    )
    assert done["status"]["phase"] == "Succeeded"
    assert step(get_object(kube_api, namespace, "TrainingRun", "ha")) == 24
    assert took_lease < 30 and first_pass < 30
    # Nothing done twice: the same Job, one MLflow run, and replica-b says it leads.
    assert [j.metadata.uid for j in jobs(kube_api, namespace)] == [job.metadata.uid]
    with MlflowClient(cluster.mlflow_url) as mlflow:
        experiment = mlflow.get_or_create_experiment("digits-ha")
        runs = mlflow.search_runs([experiment], filter=tag_filter("slipway.dev/uid", created["metadata"]["uid"]))
    assert len(runs) == 1
    assert b.metric("slipway_leader") == 1
    assert "'replica-b' leads" in b.log()
    lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(LEASE, namespace)
    assert lease.spec.lease_transitions == 1


def test_a_leader_that_stops_cleanly_hands_over_at_once(kube_api, namespace, replicas):
    a = replicas("replica-a")
    wait_leader(kube_api, namespace, "replica-a", 60)
    b = replicas("replica-b")
    wait_standing_by(b)
    start = time.monotonic()
    a.stop(signal.SIGTERM)
    stopped = time.monotonic() - start
    took = wait_leader(kube_api, namespace, "replica-b", 30)
    report(f"\nleader stopped (SIGTERM) in {stopped:.1f}s; replica-b took the released Lease {took:.1f}s later")
    assert "released" in a.log()
    assert took < 10  # the released Lease is taken at the standby's next read, not after 15 s
