"""An InferenceDeployment deleted and applied again from the same YAML (as Argo CD does after a prune,
or a restore without status: a new uid, no status, its Deployments gone with the old one), on the
local cluster with real MLflow. It serves what production serves now: a version an earlier object
rolled back (MLflow's `slipway.dev/rollback` tag) is refused, not served, and `production` stays,
unless `slipway.dev/retry` asks for it, and then it is canaried; a healthy one serves the same
version again with no canary and no alias move. Counted: canaries, alias moves, versions."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client import REGISTRY

from localkube.wait import wait_for
from slipway.mlflow import model_version_filter
from slipway_testing import (
    Versions,
    apply_object,
    condition,
    custom,
    deployment,
    get_object,
    report,
    serving,
    status_of,
    wait_status,
)

pytestmark = pytest.mark.cluster

TAG = "slipway.dev/rollback"


def passes() -> float:
    """InferenceDeployment passes of the in-process operator so far (slipway_reconcile_total)."""
    return sum(s.value for m in REGISTRY.collect() if m.name == "slipway_reconcile" for s in m.samples
               if s.name.endswith("_total") and s.labels.get("kind") == "InferenceDeployment")  # fmt: skip


class Counts:
    """What a re-created `digits` (uid ``uid``) did: canaries started (its canary Deployment made, or
    a status naming a canary, sampled at every look), alias moves (its AliasMoved Events), versions."""

    def __init__(self, api: client.ApiClient, namespace: str, versions: Versions) -> None:
        self.api, self.namespace, self.versions = api, namespace, versions
        self.uid, self.canaries = "", set()
        self.registered = self.count_versions()

    def count_versions(self) -> int:
        return len(self.versions.mlflow.search_model_versions(model_version_filter(self.versions.model)))

    def sample(self, obj: dict[str, Any]) -> None:
        canary = ((obj.get("status") or {}).get("canary") or {}).get("modelVersion")
        if canary and obj["metadata"]["uid"] == self.uid:
            self.canaries.add(canary)
        made = client.AppsV1Api(self.api).list_namespaced_deployment(self.namespace).items
        for d in made:
            owners = {o.uid for o in d.metadata.owner_references or []}
            if d.metadata.name == "digits-canary" and self.uid in owners and d.spec.replicas:
                self.canaries.add(d.spec.template.metadata.labels["slipway.dev/model-version"])

    def alias_moves(self) -> list[str]:
        events = client.CoreV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.uid={self.uid}"
        )
        return [e.message for e in events.items if e.reason == "AliasMoved"]

    def table(self, how: str, served: str) -> str:
        return (f"| InferenceDeployment | {how} | canaries {len(self.canaries)} | alias moves "
                f"{len(self.alias_moves())} | versions {self.registered} -> {self.count_versions()} | serves "
                f"{served} |")  # fmt: skip


def exists(api: client.ApiClient, namespace: str) -> bool:
    try:
        get_object(api, namespace, "InferenceDeployment", "digits")
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def delete_and_wait(api: client.ApiClient, namespace: str) -> None:
    """Delete `digits` and wait until it and its stable Deployment are gone (the garbage collector)."""
    custom(api).delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "inferencedeployments", "digits")
    apps = client.AppsV1Api(api)

    def gone() -> bool:
        names = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
        return not exists(api, namespace) and not names & {"digits-stable", "digits-canary"}

    wait_for(gone, 60, "digits and its Deployments deleted")


def reapply(api: client.ApiClient, namespace: str, body: dict[str, Any], counts: Counts) -> dict[str, Any]:
    before = counts.uid
    again = apply_object(api, namespace, body)
    assert again["metadata"]["uid"] != before and not again.get("status")
    counts.uid, counts.canaries = again["metadata"]["uid"], set()
    return again


def settle(
    api: client.ApiClient, namespace: str, counts: Counts, check: Any, what: str, more: int = 3
) -> dict[str, Any]:
    """Wait for ``check``, then for ``more`` passes of the operator, sampling all along (a Stalled
    object's next pass comes a minute later)."""

    def sampled(obj: dict[str, Any]) -> bool:
        counts.sample(obj)
        return obj["metadata"]["uid"] == counts.uid and bool(check(obj))

    wait_status(api, namespace, "InferenceDeployment", "digits", sampled, 180, what)
    start = passes()
    wait_for(lambda: passes() >= start + more, 40 + 40 * more, f"{more} more passes")
    obj = get_object(api, namespace, "InferenceDeployment", "digits")
    counts.sample(obj)
    assert check(obj), yaml.safe_dump(obj.get("status"))
    return obj


def production_served(version: str, phase: str) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        stable = status.get("stable") or {}
        return status.get("phase") == phase and stable.get("modelVersion") == version and stable.get(
            "readyReplicas") == 2  # fmt: skip

    return check


def first_serving(kube_api, namespace: str, operator, mlflow, trained, **rollout: Any) -> tuple[Any, str, Any, Counts]:
    """The operator started, v1 published and served by `digits` as `production`: the versions, v1,
    the object's body and the counts (its uid recorded)."""
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model, **rollout)
    counts = Counts(kube_api, namespace, versions)
    counts.uid = apply_object(kube_api, namespace, body)["metadata"]["uid"]
    serving(kube_api, namespace, v1)
    versions.alias_becomes("production", v1)
    return versions, v1, body, counts


def test_a_version_rolled_back_before_is_not_served_again_unless_retried(
    kube_api, namespace, operator, mlflow, trained
):
    versions, v1, body, counts = first_serving(
        kube_api, namespace, operator, mlflow, trained, progressDeadlineSeconds=20
    )
    v2 = versions.publish(crashOnStart="true")  # `candidate` moves to a version whose pods crash
    wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                lambda o: (o["status"].get("lastRollback") or {}).get("modelVersion") == v2, 120,
                "v2 rolled back")  # fmt: skip
    wait_for(lambda: "ProgressDeadlineExceeded" in mlflow.get_model_version(versions.model, v2).tags.get(TAG, ""),
             30, "the rollback tag on v2")  # fmt: skip
    assert versions.alias("candidate") == v2 and versions.alias("production") == v1

    # Deleted and applied again from Git: v2 is refused from the tag, v1 (production) served.
    delete_and_wait(kube_api, namespace)
    counts.registered = counts.count_versions()
    reapply(kube_api, namespace, body, counts)
    idep = settle(kube_api, namespace, counts, production_served(v1, "RolledBack"), "v1 served, v2 refused")
    ready, record = condition(idep, "Ready"), idep["status"]["lastRollback"]
    report(counts.table("delete + re-apply, v2 rolled back before", f"v{v1}"))
    assert ready["reason"] == "RolledBack" and f"version {v2}" in ready["message"] and TAG in ready["message"]
    assert "slipway.dev/retry=true" in ready["message"]
    assert record["modelVersion"] == v2 and record["reason"] == "ProgressDeadlineExceeded"
    assert record["tag"] == mlflow.get_model_version(versions.model, v2).tags[TAG]
    assert (counts.canaries, counts.alias_moves(), counts.count_versions()) == (set(), [], counts.registered)
    assert versions.alias("production") == v1
    stable = client.AppsV1Api(kube_api).read_namespaced_deployment("digits-stable", namespace)
    assert stable.spec.template.metadata.labels["slipway.dev/model-version"] == v1

    # Applied again with slipway.dev/retry: v1 first, then v2 through a canary (rolled back again).
    delete_and_wait(kube_api, namespace)
    retried = {**body, "metadata": {**body["metadata"], "annotations": {"slipway.dev/retry": "true"}}}
    reapply(kube_api, namespace, retried, counts)
    wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                lambda o: counts.sample(o) or v2 in counts.canaries, 90, "a canary of v2")  # fmt: skip
    idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                       lambda o: counts.sample(o) or ((o.get("status") or {}).get("lastRollback") or {}).get(
                           "reason") == "ProgressDeadlineExceeded" and not o["status"]["lastRollback"].get("tag"),
                       120, "the canary of v2 rolled back again")  # fmt: skip
    report(
        counts.table(
            "delete + re-apply with slipway.dev/retry", f"v{status_of(kube_api, namespace)['stable']['modelVersion']}"
        )
    )
    assert "slipway.dev/retry" not in (idep["metadata"].get("annotations") or {})
    assert idep["status"]["stable"]["modelVersion"] == v1 and counts.canaries == {v2}
    assert (counts.alias_moves(), versions.alias("production")) == ([], v1)


def test_a_healthy_deployment_applied_again_serves_the_same_version_with_no_canary_and_no_alias_move(
    kube_api, namespace, operator, mlflow, trained
):
    versions, v1, body, counts = first_serving(kube_api, namespace, operator, mlflow, trained)
    wait_for(lambda: len(counts.alias_moves()) == 1, 30, "the first object's one move of production")

    delete_and_wait(kube_api, namespace)
    counts.registered = counts.count_versions()
    reapply(kube_api, namespace, body, counts)
    idep = settle(kube_api, namespace, counts, production_served(v1, "Promoted"), "v1 served again")
    report(counts.table("delete + re-apply, healthy", f"v{v1}"))
    assert condition(idep, "Ready")["status"] == "True" and not idep["status"].get("lastRollback")
    assert (counts.canaries, counts.alias_moves(), counts.count_versions()) == (set(), [], counts.registered)
    assert versions.alias("production") == v1 and versions.alias("candidate") == v1


def orphans(api: client.ApiClient, namespace: str) -> list[tuple[str, Any]]:
    """`digits`' Deployments, Services and HPA that no object owns (left behind), with their delete."""
    apps, core, scaling = client.AppsV1Api(api), client.CoreV1Api(api), client.AutoscalingV2Api(api)
    found = []
    for listing, delete in ((apps.list_namespaced_deployment, apps.delete_namespaced_deployment),
                            (core.list_namespaced_service, core.delete_namespaced_service),
                            (scaling.list_namespaced_horizontal_pod_autoscaler,
                             scaling.delete_namespaced_horizontal_pod_autoscaler)):  # fmt: skip
        for item in listing(namespace, label_selector="slipway.dev/deployment=digits").items:
            if not item.metadata.owner_references:
                found.append((item.metadata.name, delete))
    return found


def test_a_stable_left_behind_is_not_adopted_and_a_tagged_version_gets_no_canary(
    kube_api, namespace, operator, mlflow, trained
):
    versions, v1, body, counts = first_serving(kube_api, namespace, operator, mlflow, trained)

    # Deleted with its children left behind (--cascade=orphan): the garbage collector drops their owner.
    custom(kube_api).delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "inferencedeployments",
                                                     "digits", propagation_policy="Orphan")  # fmt: skip
    left = lambda: "digits-stable" in {n for n, _ in orphans(kube_api, namespace)}  # noqa: E731
    wait_for(lambda: left() and not exists(kube_api, namespace), 60, "digits deleted, its stable left behind")
    # Meanwhile `candidate` moved to a version an earlier `digits` of this namespace rolled back (its tag, as written).
    v2 = versions.publish()
    mlflow.set_model_version_tag(versions.model, v2, TAG, f"deployment={namespace}/digits, reason=AnalysisFailed, "
                                 "revision=r0, time=2026-12-05T01:00:00Z, metric=errorRate, value=0.3")  # fmt: skip
    counts.registered = counts.count_versions()
    reapply(kube_api, namespace, body, counts)
    taken = lambda o: condition(o, "Stalled").get("reason") == "OwnedByOther"  # noqa: E731
    idep = settle(
        kube_api, namespace, counts, lambda o: taken(o) and o["status"].get("lastRollback"), "refused", more=1
    )
    assert idep["status"]["lastRollback"]["modelVersion"] == v2 and idep["status"]["lastRollback"]["tag"]
    assert counts.canaries == set() and counts.alias_moves() == []

    # Once what was left behind is deleted, what status recorded comes back, and v2 stays refused.
    for name, delete in orphans(kube_api, namespace):
        delete(name, namespace)
    wait_for(lambda: not orphans(kube_api, namespace), 60, "what was left behind deleted")
    back = production_served(v1, "RolledBack")
    idep = settle(kube_api, namespace, counts, lambda o: back(o) and not taken(o), "v1 served again, v2 refused")
    report(counts.table("delete --cascade=orphan + re-apply, v2 tagged", f"v{v1}"))
    assert TAG in condition(idep, "Ready")["message"]
    assert (counts.canaries, counts.alias_moves(), counts.count_versions()) == (set(), [], counts.registered)
    assert versions.alias("production") == v1
