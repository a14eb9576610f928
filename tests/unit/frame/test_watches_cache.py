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
    kept = watches.cached(body).unpack()
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["labels"] == {"slipway.dev/trainingrun": "train-0"}
    assert kept["spec"] == body["spec"] and kept["status"] == body["status"]
    assert "managedFields" in body["metadata"]  # the watch's own object is not changed


def test_every_read_is_a_copy_of_its_own_and_the_cache_stays_as_the_watch_delivered_it() -> None:
    """A pass stages its changes on what it read (a status, a resourceVersion): neither the cache
    nor another pass's read may see them."""
    from slipway.controller import Cache

    deployment = _body(labels={"app.kubernetes.io/managed-by": "slipway"}, resourceVersion="7")
    cache = Cache({"deployments": {k: [v] for k, v in watches.base_keys(deployment).items()}})
    first = cache.get("deployments", "n", "train-0-abc")
    assert first is not None and first["metadata"]["resourceVersion"] == "7"
    first["metadata"]["resourceVersion"] = "8"
    first["status"]["phase"] = "Failed"
    second = cache.get("deployments", "n", "train-0-abc")
    assert second == {
        **deployment,
        "metadata": {k: v for k, v in deployment["metadata"].items() if k != "managedFields"},
    }


def test_a_packed_object_is_a_fraction_of_its_dicts() -> None:
    """What the cache holds per object: deflated JSON, against the dicts the watch parsed (the
    sizes of every dict, list and string in it)."""
    import json
    import sys

    def deep(value: Any) -> int:
        size = sys.getsizeof(value)
        if isinstance(value, dict):
            return size + sum(deep(k) + deep(v) for k, v in value.items())
        if isinstance(value, list):
            return size + sum(deep(v) for v in value)
        return size

    container = {"name": "server", "image": "registry.example/digits-server@sha256:" + "a" * 64,
                 "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                 "env": [{"name": f"SLIPWAY_{i}", "value": f"value-{i}"} for i in range(8)],
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "250m", "memory": "512Mi"}},
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 2},
                 "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                     "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
                 "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}  # fmt: skip
    body = json.loads(json.dumps(_body(labels={"app.kubernetes.io/managed-by": "slipway"}) | {
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"slipway.dev/deployment": "d-1"}},
                                             "spec": {"containers": [container]}}},
        "status": {"replicas": 1, "readyReplicas": 1, "conditions": [
            {"type": t, "status": "True", "reason": "R", "message": "m" * 60} for t in ("Available", "Progressing")]},
    }))  # fmt: skip
    packed = watches.cached(body)
    assert len(packed.data) * 3 < deep(body), (len(packed.data), deep(body))
    assert packed.unpack()["spec"] == body["spec"]


def test_every_index_keeps_the_slim_body() -> None:
    pod = _body(labels={"slipway.dev/trainingrun": "train-0"})
    (kept,) = asyncio.run(training_watches.pods(body=pod)).values()
    assert "managedFields" not in kept.unpack()["metadata"]
    kind = inference_register.REGISTRATION.kind
    deployment = {**_body(), "apiVersion": kind.api_version, "kind": kind.kind,
                  "spec": {"model": {"name": "digits", "alias": "candidate"}}}  # fmt: skip
    keys = watches.own_keys(inference_register.REGISTRATION, deployment)
    assert keys[("model", "n", "digits")] is keys[("name", "n", "train-0-abc")]
    assert all("managedFields" not in obj.unpack()["metadata"] for obj in keys.values())


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
    index[("name", "n", "d")] = [parent_body("u1", "12", "Promoted")]  # a newer change: the watch wins
    assert cache.parent(key)["status"]["phase"] == "Promoted"
    assert key not in cache.written  # and the operator's older copy is not kept beside it
    # Deleted and re-created under the same name: the old write is never read for the new object.
    index[("name", "n", "d")] = [parent_body("u2", "5", "")]
    assert cache.parent(key)["metadata"]["uid"] == "u2"
    index.clear()
    assert cache.parent(key) is None


def test_the_operators_own_write_is_forgotten_once_the_watch_delivers_its_revision() -> None:
    """At rest the cache holds each object once: the answer to a status write is kept only until the
    watch delivers that revision (or a newer one), never older."""
    from slipway.controller import Cache

    key = ("inferencedeployments", "n", "d")
    index = {("name", "n", "d"): [parent_body("u1", "10", "Analyzing")]}
    cache = Cache({"inferencedeployments": index})
    cache.remember(key, parent_body("u1", "11", "RolledBack"))
    cache.caught_up(key, parent_body("u1", "10", "Analyzing"))  # an older event: the write stays
    assert cache.parent(key)["status"]["phase"] == "RolledBack"
    index[("name", "n", "d")] = [parent_body("u1", "11", "RolledBack")]
    cache.caught_up(key, parent_body("u1", "11", "RolledBack"))
    assert key not in cache.written and cache.parent(key)["status"]["phase"] == "RolledBack"


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


def test_a_write_the_watch_delivered_first_is_not_kept_beside_it() -> None:
    """The watch can deliver the operator's own write before the write's answer returns: then nothing
    is remembered (nothing would forget it at rest), and a copy at the cache's revision is dropped."""
    from slipway.controller import Cache

    key = ("inferencedeployments", "n", "d")
    index = {("name", "n", "d"): [parent_body("u1", "11", "RolledBack")]}
    cache = Cache({"inferencedeployments": index})
    cache.remember(key, parent_body("u1", "11", "RolledBack"))
    assert key not in cache.written
    cache.remember(key, parent_body("u1", "12", "Promoted"))  # newer than the watch: kept until it arrives
    assert cache.parent(key)["status"]["phase"] == "Promoted"
    index[("name", "n", "d")] = [parent_body("u1", "12", "Promoted")]
    assert cache.parent(key)["status"]["phase"] == "Promoted" and key not in cache.written
    cache.remember(key, parent_body("u2", "3", ""))  # another object of that name: kept, whatever the revisions
    assert key in cache.written
