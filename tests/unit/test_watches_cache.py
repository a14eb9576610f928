"""The operator's cache keeps objects without metadata.managedFields (no pass reads them)."""

from __future__ import annotations

from typing import Any

from slipway import watches


def _body(**meta: Any) -> dict[str, Any]:
    managed = [{"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0-abc", "namespace": "n", "uid": "u1", "managedFields": managed, **meta},
        "spec": {"containers": [{"name": "trainer"}]},
        "status": {"phase": "Running"},
    }


def test_cached_drops_managed_fields_and_leaves_the_event_body_alone() -> None:
    body = _body(labels={"slipway.dev/trainingrun": "train-0"})
    kept = watches.cached(body)
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"] == {"slipway.dev/trainingrun": "train-0"}
    assert kept["spec"] is body["spec"] and kept["status"] is body["status"]
    assert "managedFields" in body["metadata"]  # the watch's own object is not changed


def test_every_index_keeps_the_slim_body() -> None:
    pod = _body(labels={"slipway.dev/trainingrun": "train-0"})
    (kept,) = watches.pods(body=pod).values()
    assert "managedFields" not in kept["metadata"]
    deployment = {**_body(), "apiVersion": f"{watches.GROUP}/{watches.VERSION}", "kind": "InferenceDeployment",
                  "spec": {"model": {"name": "digits", "alias": "candidate"}}}  # fmt: skip
    keys = watches.inferencedeployments(body=deployment)
    assert keys[("model", "n", "digits")] is keys[("name", "n", "train-0-abc")]
    assert all("managedFields" not in obj["metadata"] for obj in keys.values())
