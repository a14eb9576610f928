"""kubectl slipway against a real rollout: the installed console script, run as a user would, with
the test cluster's kubeconfig and its kubectl on PATH (the plugin makes its requests through kubectl),
while the operator moves real serving pods. The transcripts of list -A, history, version and get -o json
are reported (run with -s to see them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localkube.cluster import CONTROLPLANE
from localkube.wait import wait_for
from slipway import __version__
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import (
    ERRORS,
    Versions,
    apply_object,
    condition,
    deployment,
    get_object,
    pods_of,
    serving,
    wait_status,
)
from slipway_testing.cluster import report

pytestmark = pytest.mark.cluster

PLUGIN = Path(sys.executable).with_name("kubectl-slipway")
KUBECTL = CONTROLPLANE.parent / "kubectl"
HOLD = "600s"  # each step holds far longer than the test: only the commands move the rollout


def with_kubectl(path: str = "") -> str:
    """PATH with the test cluster's kubectl first (and ``path`` before it)."""
    return os.pathsep.join(p for p in (path, str(KUBECTL.parent), os.environ.get("PATH", "")) if p)


class Plugin:
    """``kubectl-slipway`` as a subprocess: KUBECONFIG from the environment, or --kubeconfig."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), "PATH": with_kubectl()}

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(PLUGIN), *args, "-n", self.namespace], env=self.env(), capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    def ok(self, *args: str, timeout: float = 60) -> str:
        done = self(*args, timeout=timeout)
        assert done.returncode == 0, f"kubectl slipway {' '.join(args)}: rc {done.returncode}\n{done.stderr}"
        return done.stdout


def in_flight(version: str):
    def check(o: dict[str, Any]) -> bool:
        status = o.get("status") or {}
        canary = status.get("canary") or {}
        return (
            status.get("phase") == "Analyzing"
            and canary.get("modelVersion") == version
            and (canary.get("readyReplicas") or 0) >= 1
        )

    return check


def line_of(text: str, label: str) -> str:
    """The text of a detail line of ``get``, after its label."""
    found = [line.strip()[len(label) :].strip() for line in text.splitlines() if line.strip().startswith(label + " ")]
    assert found, f"no {label!r} line in:\n{text}"
    return found[0]


def test_steer_a_live_rollout(kube_api, namespace, operator, mlflow, trained, cluster):
    operator()
    plugin = Plugin(cluster, namespace)
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model, steps=[{"weight": 25, "pause": HOLD}, {"weight": 50, "pause": HOLD}])
    body["spec"]["rollout"].pop("analysis")
    apply_object(kube_api, namespace, body)
    serving(kube_api, namespace, v1)

    # get: the tracks and weights of a live canary, as its status has them.
    v2 = versions.publish()
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits", in_flight(v2), 90, "v2 canary in flight")
    shown = plugin.ok("get", "idep/digits")
    stable, canary = idep["status"]["stable"], idep["status"]["canary"]
    assert shown.startswith("InferenceDeployment/digits  Analyzing\n"), shown
    assert line_of(shown, "stable") == (
        f"{versions.model} v{v1}  revision {stable['revision']}  "
        f"{stable['readyReplicas']}/{stable['replicas']} ready  weight {stable['weight']}%"
    )
    assert line_of(shown, "canary") == (
        f"{versions.model} v{v2}  revision {canary['revision']}  "
        f"{canary['readyReplicas']}/{canary['replicas']} ready  weight {canary['weight']}% (requested 25%)  step 1 of 2"
    )
    assert stable["weight"] + canary["weight"] == 100 and 0 < canary["weight"] <= 50
    # kubectl itself finds the plugin on PATH.
    path = with_kubectl(str(PLUGIN.parent))
    via_kubectl = subprocess.run([str(KUBECTL), "slipway", "get", "inferencedeployment", "digits", "-n", namespace,
                                  f"--kubeconfig={cluster.kubeconfig}"], env={**os.environ, "PATH": path},
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
    assert via_kubectl.returncode == 0, via_kubectl.stderr
    assert "InferenceDeployment/digits  Analyzing" in via_kubectl.stdout

    # pause holds at the step (phase Paused); resume continues.
    assert "spec.rollout.paused=true" in plugin.ok("pause", "digits")
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits", lambda o: o["status"].get("phase") ==
                       "Paused", 30, "paused")  # fmt: skip
    assert condition(idep, "Ready")["reason"] == "Paused" and idep["status"]["currentStep"] == 0
    shown = plugin.ok("get", "idep/digits")
    assert "InferenceDeployment/digits  Paused" in shown and "spec.rollout.paused is true" in shown
    assert "already true" in plugin.ok("pause", "digits")
    plugin.ok("resume", "idep/digits")
    wait_status(kube_api, namespace, "InferenceDeployment", "digits", in_flight(v2), 30, "resumed")

    # retry with nothing rolled back is refused, naming the object and why.
    refused = plugin("retry", "digits")
    assert refused.returncode == 3, refused
    assert f"InferenceDeployment {namespace}/digits: nothing was rolled back" in refused.stderr

    # promote skips both 600 s steps; wait returns 0 once Promoted.
    plugin.ok("promote", "digits")
    started = time.monotonic()
    waited = plugin.ok("wait", "idep/digits", "--for=Promoted", "--timeout=2m", timeout=150)
    assert time.monotonic() - started < 100
    assert waited.rstrip().endswith("InferenceDeployment/digits is Promoted"), waited
    assert get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["stable"]["modelVersion"] == v2
    refused = plugin("promote", "digits")
    assert refused.returncode == 3 and f"it is Promoted, serving {versions.model} v{v2}" in refused.stderr, refused

    # abort rolls a canary back; wait on the rolled-back object fails at once with its Stalled message.
    v3 = versions.publish()
    wait_status(kube_api, namespace, "InferenceDeployment", "digits", in_flight(v3), 90, "v3 canary in flight")
    plugin.ok("abort", "digits")
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                       lambda o: o["status"].get("phase") == "RolledBack", 30, "aborted")  # fmt: skip
    assert idep["status"]["lastRollback"]["reason"] == "Aborted"
    assert idep["status"]["lastRollback"]["modelVersion"] == v3
    started = time.monotonic()
    failed = plugin("wait", "idep/digits", "--timeout=2m", timeout=150)
    assert failed.returncode == 4, failed
    assert time.monotonic() - started < 20
    assert f"InferenceDeployment {namespace}/digits is Stalled while waiting for Ready: " in failed.stderr
    assert f"version {v3} (revision {idep['status']['lastRollback']['revision']}) was rolled back (Aborted)" in (
        failed.stderr
    )
    shown = plugin.ok("get", "idep/digits")
    assert line_of(shown, "lastRollback").startswith(f"Aborted  {versions.model} v{v3}  revision ")

    # retry rolls the rolled-back version out again; a watching get redraws as it moves.
    watcher = subprocess.Popen([str(PLUGIN), "get", "idep/digits", "-w", "--timeout=25s", "-n", namespace,
                                f"--kubeconfig={cluster.kubeconfig}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=plugin.env())  # fmt: skip
    try:
        assert watcher.stdout is not None
        first = watcher.stdout.readline()  # the first frame is drawn (bounded by the watch's --timeout)
        assert first.startswith("--- "), first
        plugin.ok("retry", "digits")
        idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits", in_flight(v3), 90, "v3 retried")
        assert idep["status"]["lastRollback"]["retried"] is True
        out = first + watcher.stdout.read()  # to the end: the watch's --timeout
        assert watcher.stderr is not None
        err = watcher.stderr.read()
        watcher.wait(10)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    frames = [f for f in out.split("--- ") if f.strip()]
    assert len(frames) >= 2, out
    assert "InferenceDeployment/digits  RolledBack" in frames[0], frames[0]
    assert "InferenceDeployment/digits  RolledBack" not in frames[-1] and "(retried)" in frames[-1], frames[-1]
    assert versions.alias("production") == v2

    # list -A, history, get -o json and version, on what the API server holds now (v3 retried, held at step 1).
    idep = get_object(kube_api, namespace, "InferenceDeployment", "digits")
    listed_across_namespaces(plugin, namespace, versions.model, v2, v3)
    history_of_the_rollout(plugin, versions.model, v2, v3, idep)
    shown = plugin.ok("get", "idep/digits", "-o", "json")
    report(f"kubectl slipway get idep/digits -o json -n {namespace}\n{shown}")
    (item,) = json.loads(shown)["items"]  # the deployment follows an alias: no ModelArtifact in its tree
    assert (item["apiVersion"], item["kind"]) == ("slipway.dev/v1alpha1", "InferenceDeployment")
    assert item["metadata"]["uid"] == idep["metadata"]["uid"] and item["spec"] == idep["spec"]
    assert "managedFields" not in item["metadata"]
    assert item["status"]["stable"]["modelVersion"] == v2 and item["status"]["canary"]["modelVersion"] == v3
    assert item["status"]["lastRollback"]["reason"] == "Aborted"
    operator_version_from_its_deployment(plugin, kube_api, namespace)


def listed_across_namespaces(plugin: Plugin, namespace: str, model: str, stable: str, canary: str) -> None:
    listed = plugin.ok("list", "-A")
    report(f"kubectl slipway list -A\n{listed}")
    header, *rows = listed.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "PHASE", "PROGRESS", "VERSION", "AGE"]
    (mine,) = [row for row in rows if row.split()[:2] == [namespace, "idep/digits"]]
    expected = rf"{namespace} +idep/digits +Analyzing +step 1/2 \d+% +{model} v{stable} -> v{canary} +\S+"
    assert re.fullmatch(expected, mine), mine
    assert plugin.ok("list", "tr", "ma") == f"No TrainingRuns or ModelArtifacts found in namespace {namespace}.\n"


ROW = re.compile(r"(\S+) +(\S+) +(\S+ v\S+|-) +(.*)")


def history_of_the_rollout(plugin: Plugin, model: str, v2: str, v3: str, idep: dict[str, Any]) -> None:
    """From the deployment's Events and status: v2 promoted, v3 aborted, then retried."""
    shown = plugin.ok("history", "digits")
    report(f"kubectl slipway history digits -n {plugin.namespace}\n{shown}")
    head, table = shown.split("\nTIME ", 1)
    assert head.startswith("InferenceDeployment/digits  Analyzing\n")
    rows = [m.groups() for m in map(ROW.fullmatch, table.splitlines()[1:]) if m]
    assert len(rows) == len(table.splitlines()) - 1, table
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    events = [(event, version) for _, event, version, _ in rows]
    assert events.index(("Promoted", f"{model} v{v2}")) < events.index(("RolledBack", f"{model} v{v3}"))
    # status.lastRollback stands for the rollback's Events: its reason on the first of them.
    rollback = idep["status"]["lastRollback"]
    (rolled,) = [r for r in rows if r[1] == "RolledBack" and r[3].startswith("Aborted; ")]
    assert rolled[3].startswith(f"Aborted; revision {rollback['revision']}; retried since: "), rolled
    retried = events[events.index(("RolledBack", f"{model} v{v3}")) + 1 :]  # the canary again, in flight
    assert ("Progressing", f"{model} v{v3}") in retried and ("Analyzing", f"{model} v{v3}") in retried


def operator_version_from_its_deployment(plugin: Plugin, kube_api: Any, namespace: str) -> None:
    """An operator Deployment (no pods) labelled as manifests/ label it: its image's tag is its version."""
    labels = {"app.kubernetes.io/name": "slipway", "app.kubernetes.io/component": "operator"}
    image = "ghcr.io/slipway-dev/slipway-operator:0.1.0"
    pod = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "operator", "image": image}]}}
    body = {
        "metadata": {"name": "slipway-operator", "labels": labels},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": pod},
    }
    client.AppsV1Api(kube_api).create_namespaced_deployment(namespace, body)
    shown = plugin.ok("version")
    report(f"kubectl slipway version\n{shown}")
    lines = shown.splitlines()
    assert lines[0] == f"plugin: {__version__}"
    assert f"operator: 0.1.0 ({namespace}/slipway-operator, image {image}, 0/0 ready)" in lines[1:]


def test_a_failing_canary_with_on_failure_pause_is_held_for_a_person_and_a_dry_run_gate_only_shown(
    kube_api, namespace, operator, mlflow, trained, cluster
):
    """One canary, 30% errors and 200 ms a prediction, on real Prometheus figures: the deciding error
    gate fails and onFailure Pause holds it at its step with its pods, never rolled back, until
    `kubectl slipway abort`; the latency gate in dry run (at most 50 ms) is shown failing and is not
    what decided. The rules themselves (a dry-run metric never decides, a paused canary is never
    analysed again nor timed out) are unit tests of the rollout plan (tests/unit/inference/test_rollout.py)."""
    operator()
    plugin = Plugin(cluster, namespace)
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    dry_latency = {"name": "latencyP95Seconds", "max": 0.05, "dryRun": True}
    apply_object(kube_api, namespace, deployment(versions.model, metrics=(ERRORS, dry_latency), onFailure="Pause"))
    serving(kube_api, namespace, v1)
    with LoadDriver.for_service(kube_api, namespace, "digits", rate=10, max_duration=400) as load:
        v2 = versions.publish(errorRate="0.3", latencySeconds="0.2")
        breaches: list[dict[str, Any]] = []

        def held_on_failure(o: dict[str, Any]) -> bool:
            status = o.get("status") or {}
            breaches.extend(r for r in status.get("analysis") or [] if r.get("dryRun") and r["result"] == "Failed")
            return ((status.get("canary") or {}).get("modelVersion") == v2 and status.get("phase") == "Paused"
                    and condition(o, "Ready").get("reason") == "AnalysisFailed")  # fmt: skip

        held = wait_status(kube_api, namespace, "InferenceDeployment", "digits", held_on_failure, 90,
                           "held on failure")  # fmt: skip
        ready = condition(held, "Ready")["message"]
        assert "kubectl slipway abort" in ready and "errorRate" in ready and "latencyP95Seconds" not in ready, ready
        assert condition(held, "Stalled")["status"] == "True"
        assert breaches, "no dry-run breach was shown in status.analysis"
        assert breaches[0]["metric"] == "latencyP95Seconds" and breaches[0]["value"] > 0.05
        assert "dry run" in breaches[0]["message"]
        since = time.monotonic()
        wait_for(lambda: time.monotonic() - since > 10, 15, "two analysis intervals held", interval=1)
        still = get_object(kube_api, namespace, "InferenceDeployment", "digits")
        assert still["status"]["phase"] == "Paused"
        assert still["status"]["currentStep"] == held["status"]["currentStep"]
        assert (still["status"].get("lastRollback") or {}).get("modelVersion") != v2
        assert pods_of(kube_api, namespace, "canary"), "the held canary's pods were taken away"
        assert versions.alias("production") == v1
        plugin.ok("abort", "digits")
        aborted = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                              lambda o: o["status"].get("phase") == "RolledBack", 30, "aborted")  # fmt: skip
        stats = load.stats()
    assert aborted["status"]["lastRollback"]["reason"] == "Aborted"
    assert aborted["status"]["lastRollback"]["modelVersion"] == v2
    assert versions.alias("production") == v1
    assert stats.by_code.get(200), dict(stats.by_code)


def test_wait_fails_fast_on_a_stalled_object_and_errors_name_the_object(kube_api, namespace, operator, cluster):
    operator()
    plugin = Plugin(cluster, namespace)
    body = deployment(f"unpublished-{namespace}")  # no version yet: WaitingForModel, in progress, not Stalled
    body["metadata"]["name"] = "waiting"
    apply_object(kube_api, namespace, body)
    body = deployment(f"unpublished-{namespace}")
    body["metadata"]["name"] = "elsewhere"  # a Prometheus off the operator's allow-list: Stalled, InvalidSpec
    body["spec"]["rollout"]["analysis"]["prometheus"] = {"address": "http://prometheus.elsewhere.example:9090"}
    apply_object(kube_api, namespace, body)
    started = time.monotonic()
    failed = plugin("wait", "inferencedeployments/elsewhere", "--for=Ready", "--timeout=3m", timeout=200)
    elapsed = time.monotonic() - started
    assert failed.returncode == 4, failed
    assert elapsed < 30, elapsed
    assert (
        f"InferenceDeployment {namespace}/elsewhere is Stalled while waiting for Ready: InvalidSpec:" in failed.stderr
    )
    assert "prometheus.elsewhere.example" in failed.stderr

    missing = plugin("get", "tr/nope")
    assert missing.returncode == 1
    assert f"TrainingRun {namespace}/nope not found; check the name and -n/--namespace" in missing.stderr
    missing = plugin("promote", "nope")
    assert missing.returncode == 1 and f"InferenceDeployment {namespace}/nope not found" in missing.stderr
    waiting = lambda o: condition(o, "Ready").get("reason") == "WaitingForModel"  # noqa: E731
    wait_status(kube_api, namespace, "InferenceDeployment", "waiting", waiting, 30, "waiting for its model")
    timed_out = plugin("wait", "idep/waiting", "--for=Promoted", "--timeout=2s")
    assert timed_out.returncode == 5, timed_out
    assert f"timed out after 2s waiting for InferenceDeployment {namespace}/waiting to be Promoted" in timed_out.stderr
