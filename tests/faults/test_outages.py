"""The API server stopped and started again with the same address and data, for 30 s mid-training
(past the leader's renew deadline: the leader exits and its replacement finishes): nothing is made
twice, nothing is lost, and the operator resumes by itself. Serial: every test shares the API
server. MLflow's outages are in ``test_mlflow_outages.py`` (a relay of the test's own, so they
share the cluster); Prometheus' outage is ``test_prometheus_outage_holds_the_rollout_then_it_resumes``
in ``tests/integration/test_inferencedeployment.py`` (the same way)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from faults import ledger
from faults.scenario import progress, training, wait_artifact
from localkube.audit import audited_kubeconfig
from localkube.cluster import start_process, stop_process
from localkube.testing import wait_controllers_serve
from localkube.wait import wait_for
from slipway_testing import apply_object, get_object, wait_status

# serial: stops the API server every test shares
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
