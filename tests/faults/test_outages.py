"""Outages of what the operator depends on, each a real process of the local cluster stopped and
started again with the same address and data: the kube-apiserver for 30 s mid-training (past the
leader's renew deadline: the leader exits and its replacement finishes), MLflow for
20 s mid-registration and mid-rollback, Prometheus for 20 s mid-analysis (each window the shortest
that still spans several of the operator's retries and analysis intervals). Nothing is made twice, nothing is
lost, nothing is promoted without evidence, and the operator resumes by itself."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from faults import ledger
from faults.scenario import faulty_canary_analysed, phase, progress, promoted, serving, training, wait_artifact
from integration.test_inferencedeployment import Versions, pods_of
from localkube.audit import audited_kubeconfig
from localkube.cluster import start_process, stop_process
from localkube.testing import wait_controllers_serve
from localkube.wait import wait_for
from slipway_e2e.lifecycle import condition
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, get_object, read_or_none, wait_status

# serial: stops the API server, MLflow and Prometheus every test shares
pytestmark = [pytest.mark.cluster, pytest.mark.serial]

USER = "slipway-faults-outages"


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2, verify=False).status_code < 500
    except httpx.HTTPError:
        return False


class Outage:
    """One component of the cluster stopped, then started again; when each happened."""

    def __init__(self, cluster, name: str, health: str) -> None:
        self.directory, self.name, self.health = Path(cluster.directory), name, health
        self.stopping = self.stopped = self.back = 0.0

    def __enter__(self) -> Outage:
        self.stopping = time.monotonic()  # SIGTERM sent: a server may take seconds to shut down
        stop_process(self.directory, self.name)
        self.stopped = time.monotonic()
        assert not answers(self.health), f"{self.name} still answers"
        return self

    def lasted(self, seconds: float) -> bool:
        """A wait condition: the outage has lasted ``seconds``."""
        return time.monotonic() - self.stopped >= seconds

    def __exit__(self, *exc: object) -> None:
        start_process(self.directory, self.name)
        wait_for(lambda: answers(self.health), 90, f"{self.name} back", interval=0.2)
        self.back = time.monotonic()

    def since_back(self) -> float:
        return time.monotonic() - self.back


@pytest.fixture
def controllers_recover(kube_api, figures):
    """After the test (passed or not): the controller manager and the scheduler serve again before the
    next test makes its namespace (their watches come back on client-go's backoff)."""
    yield
    figures.took("after the test, until the controller manager and the scheduler serve again",
                 wait_controllers_serve(kube_api))  # fmt: skip


def test_kube_apiserver_stopped_for_30s_mid_training(
    cluster, kube_api, controllers_recover, namespace, operators, figures
):
    """Longer than the leader's renew deadline: the leader exits with status 1 (it can no longer prove it
    holds the Lease) and is started again as its pod would be, while the API server is still away. Once
    the API server is back it takes the expired Lease and finishes the run: nothing made twice."""
    since = datetime.now(UTC)
    kubeconfig = audited_kubeconfig(cluster, USER)
    leader = operators("operator", kubeconfig=kubeconfig)
    model = f"digits-{namespace}"
    apply_object(kube_api, namespace, training("run", model, steps=20, SLIPWAY_STEP_SECONDS="1"))
    before = wait_status(kube_api, namespace, "TrainingRun", "run", lambda o: progress(o) >= 3, 120, "step 3")
    with Outage(cluster, "kube-apiserver", f"{cluster.apiserver_url}/readyz") as outage:
        wait_for(lambda: leader.proc.poll() is not None, 20, "the leader exits", interval=0.2)
        exited = time.monotonic() - outage.stopping
        restarted = operators("operator-restarted", kubeconfig=kubeconfig)  # the pod's container, again
        wait_for(lambda: outage.lasted(30), 40, "30 s without the API server", interval=0.5)
    assert leader.proc.returncode == 1, leader.proc.returncode
    assert "exiting with status 1 so that no pass writes again: lost the Lease: not renewed" in leader.log()
    figures.took("API server's shutdown (SIGTERM to gone)", outage.stopped - outage.stopping)
    figures.took("SIGTERM to the API server to the leader's exit (status 1), at most", exited)
    figures.inject(
        f"kube-apiserver stopped for {outage.back - outage.stopped:.1f}s at step {progress(before)} of 20; "
        "the leader exits, its replacement starts while the API server is away"
    )
    moved = wait_status(kube_api, namespace, "TrainingRun", "run",
                        lambda o: progress(o) > progress(before), 120, "progress written again")  # fmt: skip
    figures.took("API server back to the run's progress written again", outage.since_back())
    wait_status(kube_api, namespace, "TrainingRun", "run",
                lambda o: o["status"].get("phase") in ("Succeeded", "Failed"), 180, "finished")  # fmt: skip
    artifact = wait_artifact(kube_api, namespace, "run", 240)
    figures.took("API server back to the artifact validated", outage.since_back())
    found = ledger.take(cluster, kube_api, namespace, USER, since)
    run = get_object(kube_api, namespace, "TrainingRun", "run")["status"]
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="job-name=run-train").items
    figures.count(first_step_written_after=progress(moved), run=run["phase"], artifact=artifact["status"]["phase"],
                  training_pods=len(pods), restarts=run.get("restarts", 0), ledger=found.summary(),
                  made_twice=found.made_twice())  # fmt: skip
    assert run["phase"] == "Succeeded" and progress({"status": run}) == 20
    assert restarted.proc.poll() is None, "the restarted replica exited"
    # The pod that finished while the API server was away is reported once it is back: not run twice.
    assert len(pods) == 1 and not run.get("restarts")
    assert found.created_of("jobs") == ["run-quantize", "run-train", "run-validate"]
    assert found.made_twice() == {}
    assert set(found.runs) == {"TrainingRun/run", "ModelArtifact/run quantize", "ModelArtifact/run validate"}


def test_mlflow_stopped_for_20s_mid_registration(cluster, kube_api, namespace, operators, figures, mlflow):
    since = datetime.now(UTC)
    operators(standalone=True, kubeconfig=audited_kubeconfig(cluster, USER))
    model = f"digits-{namespace}"
    apply_object(kube_api, namespace, training("run", model, steps=4))
    # The trainer has written its model to MLflow and exited: what is left is the operator's part
    # (finish the run, register the version, quantize, validate, move the alias), all of it MLflow.
    wait_for(lambda: job_succeeded(kube_api, namespace, "run-train"), 180, "the training Job complete", interval=0.2)
    with Outage(cluster, "mlflow", f"{cluster.mlflow_url}/health") as outage:
        at_stop = {k: phase(kube_api, namespace, k, "run") for k in ("TrainingRun", "ModelArtifact")}
        held = wait_for(lambda: mlflow_condition(kube_api, namespace), 60, "a condition naming MLflow", interval=0.5)
        wait_for(lambda: outage.lasted(20), 30, "20 s without MLflow", interval=1)
        during = {k: phase(kube_api, namespace, k, "run") for k in ("TrainingRun", "ModelArtifact")}
    figures.inject(f"MLflow stopped for {outage.back - outage.stopped:.1f}s once the training Job completed "
                   f"(phases then {at_stop})")  # fmt: skip
    figures.count(condition_during_outage=held, phases_at_the_end_of_the_outage=during)
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


def test_mlflow_stopped_for_20s_mid_rollback(cluster, kube_api, namespace, operators, figures, mlflow, trained):
    operators(standalone=True)
    with faulty_canary_analysed(kube_api, namespace, mlflow, trained) as (versions, v1, v2, load):
        with Outage(cluster, "mlflow", f"{cluster.mlflow_url}/health") as outage:
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
    figures.inject(f"MLflow stopped for {outage.back - outage.stopped:.1f}s while canary {v2} (30% errors) "
                   f"was analysed")  # fmt: skip
    figures.took("MLflow down to the rollback decided", decided)
    figures.took("MLflow down to no canary pod", canary_gone)
    figures.took("MLflow back to the rollback recorded on the version", recorded)
    production = versions.alias("production")
    figures.count(pending_during_outage=pending, phase_at_the_end_of_the_outage=phase_at_end,
                  production=production, responses=dict(stats.by_code))  # fmt: skip
    assert pending and phase_at_end == "RolledBack"
    assert production == v1


def test_prometheus_stopped_mid_analysis_holds_and_never_promotes(
    cluster, kube_api, namespace, operators, figures, mlflow, trained
):
    operators(standalone=True)
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    apply_object(kube_api, namespace, serving(versions.model))
    wait_status(kube_api, namespace, "InferenceDeployment", "digits", promoted(v1), 120, f"{v1} serving")
    with LoadDriver.for_service(kube_api, namespace, "digits", rate=10, max_duration=600):
        v2 = versions.publish()
        wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                    lambda o: o["status"].get("phase") == "Analyzing", 120, "the canary analysed")  # fmt: skip
        seen: set[tuple[str, int]] = set()

        def held_for(seconds: float) -> bool:
            status = get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]
            seen.add((status.get("phase"), int((status.get("canary") or {}).get("weight") or 0)))
            assert status.get("phase") != "Promoted", "promoted without analysis data"
            return outage.lasted(seconds)

        with Outage(cluster, "prometheus", f"{cluster.prometheus_url}/-/ready") as outage:
            weight = int(get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["canary"]["weight"])
            ready = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                                lambda o: condition(o, "Ready").get("reason") == "AnalysisInconclusive", 60,
                                "the rollout held for lack of data")  # fmt: skip
            held_at = time.monotonic() - outage.stopped
            wait_for(lambda: held_for(20), 40, "20 s without Prometheus", interval=0.5)
        idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits", promoted(v2), 180, f"{v2} promoted")
        resumed = outage.since_back()
    figures.inject(f"Prometheus stopped for {outage.back - outage.stopped:.1f}s while canary {v2} was analysed "
                   f"at {weight}%")  # fmt: skip
    figures.took("Prometheus down to the rollout held", held_at)
    figures.took("Prometheus back to promoted", resumed)
    figures.count(held=condition(ready, "Ready").get("message"), phases_and_weights_during_outage=sorted(seen),
                  production=versions.alias("production"))  # fmt: skip
    assert max(w for _, w in seen) <= weight, "the canary advanced without analysis"
    assert idep["status"]["stable"]["modelVersion"] == v2
    versions.alias_becomes("production", v2)
