"""MLflow down for 20 s mid-registration and mid-rollback, for this test's operator alone: the
operator and the pods it makes reach MLflow through a relay of their own (``TcpRelay``), which the
test stops (new connections refused, open ones cut, as when the server's process is stopped) and
starts again on the same address. The cluster's MLflow keeps serving every other test, so these
share the cluster (no ``serial``). Nothing is made twice, nothing is lost, the rollback is decided
and carried out while MLflow is away, and the operator resumes by itself."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from urllib.parse import urlparse

import httpx
import pytest
from kubernetes import client

from faults import ledger
from faults.scenario import faulty_canary_analysed, phase, training, wait_artifact
from localkube.audit import audited_kubeconfig
from localkube.wait import wait_for
from slipway_testing import TcpRelay, apply_object, get_object, pods_of, read_or_none, wait_status

pytestmark = [pytest.mark.cluster]

USER = "slipway-faults-mlflow-outages"


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


class Outage:
    """The test's own way to MLflow cut, then restored; when each happened."""

    def __init__(self, relay: TcpRelay) -> None:
        self.relay = relay
        self.stopped = self.back = 0.0

    def __enter__(self) -> Outage:
        self.relay.stop()
        self.stopped = time.monotonic()
        assert not answers(f"{self.relay.url}/health"), "MLflow still answers through the relay"
        return self

    def lasted(self, seconds: float) -> bool:
        """A wait condition: the outage has lasted ``seconds``."""
        return time.monotonic() - self.stopped >= seconds

    def __exit__(self, *exc: object) -> None:
        self.relay.start()
        wait_for(lambda: answers(f"{self.relay.url}/health"), 30, "MLflow back through the relay", interval=0.2)
        self.back = time.monotonic()

    def since_back(self) -> float:
        return time.monotonic() - self.back


@pytest.fixture
def relay(cluster):
    """A relay to the cluster's MLflow, for this test's operator and pods alone."""
    url = urlparse(cluster.mlflow_url)
    found = TcpRelay((url.hostname or "127.0.0.1", url.port or 80))
    found.start()
    yield found
    found.stop()


def job_succeeded(kube_api, namespace: str, name: str) -> bool:
    job = read_or_none(client.BatchV1Api(kube_api).read_namespaced_job_status, name, namespace)
    return bool(job and job.status and job.status.succeeded)


def mlflow_condition(kube_api, namespace: str) -> str | None:
    """The condition of the run or its artifact that says MLflow is unavailable, if any."""
    for kind in ("TrainingRun", "ModelArtifact"):
        if phase(kube_api, namespace, kind, "run") == "-":
            continue
        for cond in get_object(kube_api, namespace, kind, "run")["status"].get("conditions") or []:
            if cond.get("reason") == "MlflowUnavailable":
                return f"{kind} {cond['type']}={cond['status']} MlflowUnavailable: {cond.get('message')}"
    return None


def test_mlflow_stopped_for_20s_mid_registration(cluster, kube_api, namespace, operators, figures, mlflow, relay):
    since = datetime.now(UTC)
    operators(standalone=True, kubeconfig=audited_kubeconfig(cluster, USER), env={"SLIPWAY_MLFLOW_URL": relay.url})
    model = f"digits-{namespace}"
    apply_object(kube_api, namespace, training("run", model, steps=4))
    # The trainer has written its model to MLflow and exited: what is left is the operator's part
    # (finish the run, register the version, quantize, validate, move the alias), all of it MLflow.
    wait_for(lambda: job_succeeded(kube_api, namespace, "run-train"), 180, "the training Job complete", interval=0.2)
    with Outage(relay) as outage:
        at_stop = {k: phase(kube_api, namespace, k, "run") for k in ("TrainingRun", "ModelArtifact")}
        held = wait_for(lambda: mlflow_condition(kube_api, namespace), 60, "a condition naming MLflow", interval=0.5)
        wait_for(lambda: outage.lasted(20), 30, "20 s without MLflow", interval=1)
        during = {k: phase(kube_api, namespace, k, "run") for k in ("TrainingRun", "ModelArtifact")}
    figures.inject(f"MLflow cut for {outage.back - outage.stopped:.1f}s once the training Job completed "
                   f"(phases then {at_stop})")  # fmt: skip
    figures.count(condition_during_outage=held, phases_at_the_end_of_the_outage=during)
    assert relay.url in held, held  # the condition names the MLflow the operator could not reach
    artifact = wait_artifact(kube_api, namespace, "run", 300)
    figures.took("MLflow back to the artifact validated", outage.since_back())
    candidate = mlflow.get_version_by_alias(model, "candidate")
    found = ledger.take(cluster, kube_api, namespace, USER, since)
    figures.count(ledger=found.summary(), made_twice=found.made_twice(),
                  candidate=candidate.version if candidate else None)  # fmt: skip
    assert found.made_twice() == {}
    assert set(found.versions) == {"ModelArtifact/run source", "ModelArtifact/run quantized"}
    assert found.created_of("jobs") == ["run-quantize", "run-train", "run-validate"]
    assert candidate is not None and candidate.version == artifact["status"]["quantizedVersion"]


def test_mlflow_stopped_for_20s_mid_rollback(kube_api, namespace, operators, figures, mlflow, trained, relay):
    operators(standalone=True, env={"SLIPWAY_MLFLOW_URL": relay.url})
    with faulty_canary_analysed(kube_api, namespace, mlflow, trained) as (versions, v1, v2, load):
        with Outage(relay) as outage:
            idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                               lambda o: (o["status"].get("lastRollback") or {}).get("modelVersion") == v2,
                               120, f"{v2} rolled back while MLflow is down")  # fmt: skip
            decided = time.monotonic() - outage.stopped
            pending = [u.get("key") or u.get("alias") for u in idep["status"].get("pendingRegistryUpdates") or []]
            wait_for(lambda: not pods_of(kube_api, namespace, "canary"), 60, "the canary pods gone")
            canary_gone = time.monotonic() - outage.stopped
            wait_for(lambda: outage.lasted(20), 30, "20 s without MLflow", interval=1)
            phase_at_end = get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["phase"]
        wait_for(lambda: "AnalysisFailed" in mlflow.get_model_version(versions.model, v2).tags.get(
            "slipway.dev/rollback", ""), 90, "the rollback tag once MLflow is back")  # fmt: skip
        recorded = outage.since_back()
        wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                    lambda o: not o["status"].get("pendingRegistryUpdates"), 30, "no update pending")  # fmt: skip
        stats = load.stats()
    figures.inject(f"MLflow cut for {outage.back - outage.stopped:.1f}s while canary {v2} (30% errors) "
                   f"was analysed")  # fmt: skip
    figures.took("MLflow down to the rollback decided", decided)
    figures.took("MLflow down to no canary pod", canary_gone)
    figures.took("MLflow back to the rollback recorded on the version", recorded)
    production = versions.alias("production")
    figures.count(pending_during_outage=pending, phase_at_the_end_of_the_outage=phase_at_end,
                  production=production, responses=dict(stats.by_code))  # fmt: skip
    assert pending and phase_at_end == "RolledBack"
    assert production == v1
