"""The operator SIGKILLed at 20 random moments of a lifecycle: two models trained, registered,
quantized, validated, the first deployed, the second canaried and promoted. Each kill is a new
process at a random point of its life (the seed is printed, SLIPWAY_FAULT_SEED replays it).
Afterwards every Job, MLflow run and model version exists exactly once, and the aliases and the
deployment are where a run without kills would have left them."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from faults import ledger
from faults.scenario import Clock, phase, promoted, serving, training, wait_artifact
from localkube.audit import audited_kubeconfig
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, condition, get_object, read_or_none, wait_status

pytestmark = pytest.mark.cluster

KILLS = 20
LIFETIME = (1.0, 5.0)  # seconds a new operator process lives before its SIGKILL, drawn uniformly
AUDITED_USER = "slipway-faults-killed"


def stage(kube_api, namespace: str) -> str:
    """Where the lifecycle is: the phase of each object, e.g. ``v1 Succeeded/Quantizing, digits -``."""
    runs = [f"{n} {phase(kube_api, namespace, 'TrainingRun', n)}/{phase(kube_api, namespace, 'ModelArtifact', n)}"
            for n in ("v1", "v2")]  # fmt: skip
    return ", ".join([*runs, f"digits {phase(kube_api, namespace, 'InferenceDeployment', 'digits')}"])


def runs_of(kills: list[tuple[float, str]]) -> list[tuple[float, float, str, int]]:
    """Consecutive kills in the same stage, folded: (first time, last time, stage, how many)."""
    folded: list[tuple[float, float, str, int]] = []
    for at, where in kills:
        if folded and folded[-1][2] == where:
            first, _, _, n = folded[-1]
            folded[-1] = (first, at, where, n + 1)
        else:
            folded.append((at, at, where, 1))
    return folded


class SecondModel:
    """TrainingRun v2, applied once v1's artifact is validated (as a user would publish a next model)."""

    def __init__(self, kube_api, namespace: str, model: str) -> None:
        self.kube_api, self.namespace, self.model = kube_api, namespace, model
        self.applied = False

    def advance(self) -> None:
        if self.applied:
            return
        ma = read_or_none(get_object, self.kube_api, self.namespace, "ModelArtifact", "v1")  # None: still training
        if ma is not None and condition(ma, "Ready").get("status") == "True":
            apply_object(self.kube_api, self.namespace, training("v2", self.model, SLIPWAY_STEP_SECONDS="1"))
            self.applied = True

    def advancing_until(self, deadline: float) -> Callable[[], bool]:
        """A wait condition: true at ``deadline`` (monotonic), applying v2 meanwhile when it is time."""

        def check() -> bool:
            self.advance()
            return time.monotonic() >= deadline

        return check


def test_operator_sigkilled_at_20_random_moments(cluster, kube_api, namespace, operators, figures):
    seed = int(os.environ.get("SLIPWAY_FAULT_SEED") or time.time())
    rng = random.Random(seed)
    model = f"digits-{namespace}"
    kubeconfig = audited_kubeconfig(cluster, AUDITED_USER)
    since = datetime.now(UTC)
    clock = Clock()
    apply_object(kube_api, namespace, training("v1", model, SLIPWAY_STEP_SECONDS="1"))
    apply_object(kube_api, namespace, serving(model))
    second = SecondModel(kube_api, namespace, model)
    kills: list[tuple[float, str]] = []  # (seconds since the first apply, stage)

    with LoadDriver.for_service(kube_api, namespace, "digits", rate=10, max_duration=900):
        for kill in range(KILLS):
            replica = operators(f"operator-{kill}", standalone=True, kubeconfig=kubeconfig)
            moment = rng.uniform(*LIFETIME)
            wait_for(second.advancing_until(replica.started + moment), moment + 30, f"kill {kill + 1}", interval=0.5)
            replica.stop(signal.SIGKILL)
            kills.append((clock(), stage(kube_api, namespace)))
        kills_over = clock()
        operators("operator-final", standalone=True, kubeconfig=kubeconfig)
        if not second.applied:
            wait_artifact(kube_api, namespace, "v1", 300)
            second.advance()
        v2 = wait_artifact(kube_api, namespace, "v2", 400)["status"]["quantizedVersion"]
        wait_status(kube_api, namespace, "InferenceDeployment", "digits", promoted(v2), 300, f"{v2} promoted")
    done = clock()

    v1 = get_object(kube_api, namespace, "ModelArtifact", "v1")["status"]["quantizedVersion"]
    found = ledger.take(cluster, kube_api, namespace, AUDITED_USER, since)
    with MlflowClient(cluster.mlflow_url) as mlflow:
        aliases = {a: mlflow.get_version_by_alias(model, a) for a in ("candidate", "production")}
    figures.inject(f"{KILLS} SIGKILLs of the operator, each {LIFETIME[0]:.0f}-{LIFETIME[1]:.0f} s into a new "
                   f"process's life (seed {seed}), while:")  # fmt: skip
    for first, last, where, n in runs_of(kills):
        figures.inject(f"  {n} x at {first:5.1f}-{last:5.1f}s  {where}")
    figures.count(ledger=found.summary(), jobs=found.created_of("jobs"), made_twice=found.made_twice(),
                  aliases={a: v.version if v else None for a, v in aliases.items()})  # fmt: skip
    figures.took("first apply to the last kill", kills_over)
    figures.took("first apply to v2 promoted", done)

    steps = ("train", "quantize", "validate")
    assert found.created_of("jobs") == sorted(f"{v}-{s}" for v in ("v1", "v2") for s in steps)
    assert found.made_twice() == {}
    assert not [k for k in found.deleted if not k.startswith(("deployments/", "services/"))], found.deleted
    expected_runs = {"TrainingRun/v1", "TrainingRun/v2"} | {f"ModelArtifact/{v} {s}" for v in ("v1", "v2")
                                                            for s in ("quantize", "validate")}  # fmt: skip
    assert set(found.runs) == expected_runs
    assert set(found.versions) == {f"ModelArtifact/{v} {r}" for v in ("v1", "v2") for r in ("source", "quantized")}
    assert aliases["candidate"] is not None and aliases["candidate"].version == v2
    assert aliases["production"] is not None and aliases["production"].version == v2
    assert v1 != v2
