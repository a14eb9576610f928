"""Two Slipway releases on one cluster, for the upgrade and downgrade tests: the previous release's
operator and CRDs from a fixed commit (``git archive``), each operator run as ``python -m slipway``;
what an InferenceDeployment's serving side looks like at a moment (pods, canaries, durable decisions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from localkube.wait import wait_for
from slipway_testing.cluster import ROOT, get_object
from slipway_testing.processes import OperatorReplica

# The previous release. There is no tag yet: the commit the day-two work (re-apply adoption, restore
# reads, the CRD chart, status.lastRollback.tag) started from, main after the last fresh-clone
# rehearsal (make test and .ci/run, 1,807 passed): the nearest thing to a released build.
PREVIOUS = "62de949"

# Status fields added since PREVIOUS (git diff PREVIOUS -- crds/): what the previous release does not know.
NEWER_FIELDS = {"lastRollback": ("tag",)}
# PREVIOUS's status writer sends null for a nested field its models do not know whenever it writes
# the status (status.lastRollback.tag is lost on its first pass); the current writer keeps them
# (tests/unit/status/test_status_writer_downgrade.py). True once PREVIOUS is a release with that writer.
PREVIOUS_KEEPS_NEWER_FIELDS = False
# Spec fields the current CRDs default and PREVIOUS's spec models refuse ("Extra inputs are not
# permitted"): the API server would write them into every stored object, and the previous operator
# would stall each such object until the current one runs again. None: a spec field PREVIOUS's CRDs
# do not have gets no schema default (tests/unit/models/test_crd_defaults.py).
PREVIOUS_REFUSES: tuple[str, ...] = ()

SERVING = ("stable", "canary")
# What an object decided that no pass may forget, by kind (status fields).
DURABLE = {
    "InferenceDeployment": ("lastRollback", "previousStable", "pendingRegistryUpdates", "bakeStartTime"),
    "TrainingRun": ("mlflow",),
    "ModelArtifact": ("modelVersion",),
}


def previous_tree(directory: Path) -> Path:
    """The previous release's operator/ and crds/ in ``directory`` (git archive of PREVIOUS)."""
    archive = subprocess.run(["git", "archive", PREVIOUS, "operator", "crds"], cwd=ROOT, check=True,
                             capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    found = subprocess.run([sys.executable, "-c", "import slipway; print(slipway.__file__)"], cwd=directory,
                           env={**os.environ, "PYTHONPATH": str(directory / "operator")}, check=True,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert found.startswith(str(directory)), f"PYTHONPATH does not reach the previous release: {found}"
    return directory


def apply_crds(cluster: Any, crds: Path) -> None:
    """The upgrade guide's step 3: ``kubectl apply --server-side`` of a release's crds/, Established."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    files = [a for f in sorted(crds.glob("slipway.dev_*.yaml")) for a in ("-f", str(f))]  # not kustomization.yaml
    for verb in (["apply", "--server-side", "--force-conflicts"], ["wait", "--for=condition=Established"]):
        done = subprocess.run(["kubectl", *verb, *files], env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"kubectl {' '.join(verb)} of {crds}: {done.stderr}"


def start_operator(cluster: Any, namespace: str, logs: Path, tree: Path | None, name: str) -> OperatorReplica:
    """``python -m slipway`` watching ``namespace`` alone: the previous release's code (``tree``) or the
    current one (None), in the tests' venv; returned once it answers its liveness probe."""
    env = {"PYTHONPATH": str(tree / "operator")} if tree else {}
    replica = OperatorReplica(name, cluster, namespace, logs, standalone=True, env=env)

    def alive() -> bool:
        assert replica.proc.poll() is None, f"operator {name} exited:\n{replica.log()[-3000:]}"
        try:
            return bool(replica.health())
        except OSError:
            return False

    wait_for(alive, 60, f"operator {name} alive")
    return replica


def passes(replica: OperatorReplica) -> float:
    """Reconciliations the replica ran so far (slipway_reconcile_total, every kind)."""
    return replica.metric("slipway_reconcile_total") or 0.0


def serving_pods(api: client.ApiClient, namespace: str, name: str) -> dict[str, int]:
    """The serving pods of InferenceDeployment ``name``: uid -> restarts of its containers."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"slipway.dev/deployment={name}")
    return {
        p.metadata.uid: sum(c.restart_count for c in (p.status.container_statuses or []))
        for p in pods.items
        if p.metadata.deletion_timestamp is None and (p.metadata.labels or {}).get("slipway.dev/track") in SERVING
    }


def canaries(api: client.ApiClient, namespace: str, name: str) -> set[tuple[str, str]]:
    """The canary Deployments of ``name`` as (uid, model version): a new pair is a canary started."""
    found = client.AppsV1Api(api).list_namespaced_deployment(
        namespace, label_selector=f"slipway.dev/deployment={name},slipway.dev/track=canary"
    )
    return {(d.metadata.uid, d.spec.template.metadata.labels.get("slipway.dev/model-version", "")) for d in found.items}


def rollouts_started(api: client.ApiClient, namespace: str, name: str) -> int:
    """Progressing Events of ``name`` so far (a canary started), repeats counted."""
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return sum(e.count or 1 for e in events.items if e.reason == "Progressing")


class Snapshot:
    """One object at a moment: its phase, its durable decisions and, for an InferenceDeployment, its
    serving pods, canaries and rollouts started."""

    def __init__(self, api: client.ApiClient, namespace: str, kind: str, name: str) -> None:
        status = get_object(api, namespace, kind, name).get("status") or {}
        self.kind, self.name, self.phase = kind, name, status.get("phase")
        self.decisions = {k: status.get(k) for k in DURABLE[kind]}
        serving = kind == "InferenceDeployment"
        self.pods = serving_pods(api, namespace, name) if serving else {}
        self.canaries = canaries(api, namespace, name) if serving else set()
        self.rollouts = rollouts_started(api, namespace, name) if serving else 0

    def restarted(self, later: Snapshot) -> int:
        """Serving pods of this moment gone or restarted since."""
        return sum(1 for uid, count in self.pods.items() if later.pods.get(uid) != count)

    def canaries_started(self, later: Snapshot) -> int:
        return len(later.canaries - self.canaries) + max(0, later.rollouts - self.rollouts)

    def kept(self, later: Snapshot, ignoring: dict[str, tuple[str, ...]] | None = None) -> list[str]:
        """Durable decisions that differ later (empty: all kept), ``ignoring`` fields of them."""

        def known(name: str, value: Any) -> Any:
            drop = (ignoring or {}).get(name, ())
            return {k: v for k, v in value.items() if k not in drop} if isinstance(value, dict) else value

        return [k for k, v in self.decisions.items() if known(k, later.decisions.get(k)) != known(k, v)]
