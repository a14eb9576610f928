"""A version one InferenceDeployment rolled back is refused by that deployment alone: the
`slipway.dev/rollback` tag names it (namespace/name), so a deployment of another namespace serving
the same version (production beside staging) serves it. And a tag stuffed to ~100,000 characters by
whoever may tag the model's versions in MLflow reaches status, conditions, Events and metric labels
only as bounded text. Counted: the other deployment's refusals and what it serves; the length of
every field, message and label the stuffed tag reached."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import REGISTRY

from localkube.wait import wait_for
from slipway.inference.rollout.rollbacktag import MAX_TEXT
from slipway_testing import (
    Versions,
    apply_object,
    condition,
    deployment,
    events_for,
    get_object,
    patch_object,
    report,
    serving,
    wait_status,
)

pytestmark = pytest.mark.cluster

TAG = "slipway.dev/rollback"
MESSAGE_BOUND = 2 * MAX_TEXT  # a refusal's words, the names in it and the tag as read back
STUFFED = 99_990  # MLflow takes a model version tag of at most 100,000 characters


@pytest.fixture
def other_namespace(kube_api, namespace) -> Iterator[str]:
    """A second namespace (another team's, or production beside staging), deleted afterwards."""
    core, name = client.CoreV1Api(kube_api), f"{namespace}-c"
    meta = client.V1ObjectMeta(name=name, labels={"localkube.slipway.dev/test": "true"})
    core.create_namespace(client.V1Namespace(metadata=meta))
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30, f"{name}'s default service account")
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def named(body: dict[str, Any], name: str, **rollout: Any) -> dict[str, Any]:
    body["metadata"]["name"] = name
    body["spec"]["rollout"].update(rollout)
    return body


def stuffed(owner: str) -> str:
    """A tag naming ``owner`` whose reason, metric and an unknown field are stuffed to STUFFED characters."""
    head = f"deployment={owner}, reason={'R' * 30_000}, metric={'m' * 30_000}, value=0.5, note="
    return head + "n" * (STUFFED - len(head))


def metric_labels(namespace: str, name: str) -> list[dict[str, str]]:
    """The labels of the in-process operator's last-rollback series of ``namespace/name``."""
    series = "slipway_inferencedeployment_last_rollback_timestamp_seconds"
    return [s.labels for m in REGISTRY.collect() if m.name == series for s in m.samples
            if s.labels.get("namespace") == namespace and s.labels.get("name") == name]  # fmt: skip


def test_a_rollback_refuses_the_version_only_where_it_happened_and_a_stuffed_tag_stays_bounded(
    kube_api, namespace, other_namespace, operator, mlflow, trained
):
    operator(also=(other_namespace,))
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    # A (staging): v1 served, then v2's canary aborted: a real rollback, and its tag on v2.
    apply_object(kube_api, namespace, deployment(versions.model, steps=[{"weight": 50, "pause": "30m"}]))
    serving(kube_api, namespace, v1)
    v2 = versions.publish()
    wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                lambda o: ((o.get("status") or {}).get("canary") or {}).get("modelVersion") == v2, 120,
                f"the canary of v{v2}")  # fmt: skip
    patch_object(kube_api, namespace, "InferenceDeployment", "digits",
                 {"metadata": {"annotations": {"slipway.dev/abort": "true"}}})  # fmt: skip
    wait_for(lambda: mlflow.get_model_version(versions.model, v2).tags.get(TAG, "").startswith(
        f"deployment={namespace}/digits, reason=Aborted"), 60, f"A's rollback tag on v{v2}")  # fmt: skip

    # C (another namespace, no promote alias: nothing else to serve) follows the same `candidate`: v2.
    refusals: list[str] = []

    def c_serves_v2(obj: dict[str, Any]) -> bool:
        status = obj.get("status") or {}
        if status.get("phase") == "RolledBack" or status.get("lastRollback"):
            refusals.append(condition(obj, "Ready").get("message", ""))
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == v2

    apply_object(kube_api, other_namespace, named(deployment(versions.model), "digits", promoteAlias=""))
    c = wait_status(kube_api, other_namespace, "InferenceDeployment", "digits", c_serves_v2, 120, f"C serves v{v2}")
    a = get_object(kube_api, namespace, "InferenceDeployment", "digits")
    report(f"| rollback tag of {namespace}/digits | A: {a['status']['phase']}, refuses v{v2} | C ({other_namespace}): "
           f"refusals {len(refusals)}, serves v{c['status']['stable']['modelVersion']} |")  # fmt: skip
    assert a["status"]["phase"] == "RolledBack" and a["status"]["lastRollback"]["modelVersion"] == v2
    assert refusals == [] and not c["status"].get("lastRollback")

    # A stuffed tag naming a deployment of C's namespace: refused, and every trace of it bounded.
    hostile = Versions(mlflow, f"hostile-{namespace}", trained)
    h1 = hostile.publish()
    mlflow.set_model_version_tag(hostile.model, h1, TAG, stuffed(f"{other_namespace}/hostile"))
    assert len(mlflow.get_model_version(hostile.model, h1).tags[TAG]) == STUFFED
    apply_object(kube_api, other_namespace, named(deployment(hostile.model), "hostile", promoteAlias=""))
    refused = wait_status(kube_api, other_namespace, "InferenceDeployment", "hostile",
                          lambda o: (o.get("status") or {}).get("phase") == "RolledBack", 60, "h1 refused")  # fmt: skip
    wait_for(lambda: metric_labels(other_namespace, "hostile"), 30, "the last-rollback series of `hostile`")
    record = refused["status"]["lastRollback"]
    messages = [c.get("message") or "" for c in refused["status"].get("conditions") or []]
    events = [message or "" for _, message in events_for(kube_api, other_namespace, "hostile")]
    labels = metric_labels(other_namespace, "hostile")
    counts = {"lastRollback field": max(len(str(v)) for v in record.values()),
              "condition message": max(map(len, messages)), "Event message": max(map(len, events), default=0),
              "metric label": max(len(v) for s in labels for v in s.values())}  # fmt: skip
    longest = ", ".join(f"{k} {v}" for k, v in counts.items())
    report(f"| stuffed rollback tag of {STUFFED} characters | longest: {longest} (bound {MESSAGE_BOUND}), "
           f"Events {len(events)} |")  # fmt: skip
    assert record["reason"] == "RolledBack" and "metric" not in record and len(record["tag"]) <= MAX_TEXT
    assert max(counts.values()) <= MESSAGE_BOUND, counts
    assert counts["lastRollback field"] <= MAX_TEXT and counts["metric label"] <= 64
