"""The operator's cache keeps objects without metadata.managedFields (no pass reads them)."""

from __future__ import annotations

import asyncio
from typing import Any

from slipway import watches
from slipway.inference import register as inference_register
from slipway.training import watches as training_watches


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
    assert kept["spec"] == body["spec"] and kept["status"] == body["status"]
    assert "managedFields" in body["metadata"]  # the watch's own object is not changed


def test_two_objects_cached_from_separately_parsed_events_share_their_strings() -> None:
    """Every event is parsed into strings of its own; the cache keeps one of each, so that ten
    thousand copies of the same keys and labels are not held ten thousand times."""
    import json

    raw = json.dumps(_body(labels={"app.kubernetes.io/managed-by": "slipway", "slipway.dev/deployment": "d-1"}))
    first, second = watches.cached(json.loads(raw)), watches.cached(json.loads(raw))
    assert first == second
    key_a = next(k for k in first["metadata"]["labels"] if k.startswith("app."))
    key_b = next(k for k in second["metadata"]["labels"] if k.startswith("app."))
    assert key_a is key_b
    assert first["metadata"]["labels"][key_a] is second["metadata"]["labels"][key_b]
    assert first["spec"]["containers"][0]["name"] is second["spec"]["containers"][0]["name"]
    assert first["spec"] is not second["spec"]  # copies: a change to one never shows in the other


def test_every_index_keeps_the_slim_body() -> None:
    pod = _body(labels={"slipway.dev/trainingrun": "train-0"})
    (kept,) = asyncio.run(training_watches.pods(body=pod)).values()
    assert "managedFields" not in kept["metadata"]
    kind = inference_register.REGISTRATION.kind
    deployment = {**_body(), "apiVersion": kind.api_version, "kind": kind.kind,
                  "spec": {"model": {"name": "digits", "alias": "candidate"}}}  # fmt: skip
    keys = watches.own_keys(inference_register.REGISTRATION, deployment)
    assert keys[("model", "n", "digits")] is keys[("name", "n", "train-0-abc")]
    assert all("managedFields" not in obj["metadata"] for obj in keys.values())


def parent_body(uid: str, version: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "namespace": "n", "uid": uid, "resourceVersion": version},
        "status": {"phase": phase},
    }


def test_a_pass_never_reads_its_object_older_than_its_own_last_write() -> None:
    from slipway.controller import Cache

    key = ("inferencedeployments", "n", "d")
    index: dict[tuple[str, ...], list[dict[str, Any]]] = {("name", "n", "d"): [parent_body("u1", "10", "Analyzing")]}
    cache = Cache({"inferencedeployments": index})
    assert cache.parent(key) == parent_body("u1", "10", "Analyzing")
    cache.remember(key, parent_body("u1", "11", "RolledBack"))  # the answer to its own status write
    assert cache.parent(key)["status"]["phase"] == "RolledBack"  # the watch has not caught up
    # The watch delivers that same revision (or a pass mutated the entry's resourceVersion in place):
    # still the operator's write, never the older status.
    index[("name", "n", "d")] = [parent_body("u1", "11", "Analyzing")]
    assert cache.parent(key)["status"]["phase"] == "RolledBack"
    index[("name", "n", "d")] = [parent_body("u1", "12", "Promoted")]  # a newer change: the watch wins
    assert cache.parent(key)["status"]["phase"] == "Promoted"
    # Deleted and re-created under the same name: the old write is never read for the new object.
    index[("name", "n", "d")] = [parent_body("u2", "5", "")]
    assert cache.parent(key)["metadata"]["uid"] == "u2"
    index.clear()
    assert cache.parent(key) is None


class ChangingStore:
    """A store whose first ``failures`` iterations are interrupted, as kopf's dict is when the event loop
    changes it while a worker thread copies it."""

    def __init__(self, values: list[dict[str, Any]], failures: int) -> None:
        self.values, self.failures = values, failures

    def __bool__(self) -> bool:
        return bool(self.values)

    def __iter__(self) -> Any:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("dictionary changed size during iteration")
        return iter(self.values)


def test_a_read_interrupted_by_kopfs_change_is_made_again() -> None:
    from slipway.controller import READ_ATTEMPTS, Cache

    body = parent_body("u1", "3", "Promoted")
    cache = Cache({"inferencedeployments": {("name", "n", "d"): ChangingStore([body], failures=3)}})
    assert cache.select("inferencedeployments", "name", "n", "d") == [body]
    stuck = Cache({"inferencedeployments": {("name", "n", "d"): ChangingStore([body], failures=READ_ATTEMPTS)}})
    try:
        stuck.select("inferencedeployments", "name", "n", "d")
    except RuntimeError:
        pass
    else:
        raise AssertionError("a store changing at every read must not be read as empty")
