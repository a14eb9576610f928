"""A fresh operator is held until kopf has indexed every watched object once; that wait must be
linear in the number of objects (kopf 1.45 woke every waiter on every object indexed)."""

from __future__ import annotations

import asyncio

from kopf._cogs.aiokits.aiotoggles import ToggleSet

from slipway.kopfpatch import wake_index_waiters_only_on_change


def test_index_waiters_wake_once_the_last_object_is_indexed_not_on_every_one() -> None:
    assert wake_index_waiters_only_on_change()
    objects = 600

    async def scenario() -> int:
        checks = 0
        indexed = ToggleSet(all)
        original = indexed.is_on

        def counted() -> bool:
            nonlocal checks
            checks += 1
            return original()

        indexed.is_on = counted  # type: ignore[method-assign]
        blocker = await indexed.make_toggle(name="startup")
        toggles = [await indexed.make_toggle(name=f"object {i}") for i in range(objects)]
        done = 0

        async def worker(index: int, toggle: object) -> None:  # as kopf's per-object worker: index, drop, wait
            nonlocal done
            for _ in range(index):  # objects are indexed one after the other, while earlier ones wait
                await asyncio.sleep(0)
            await indexed.drop_toggle(toggle)  # type: ignore[arg-type]
            await indexed.wait_for(True)
            done += 1

        tasks = [asyncio.create_task(worker(i, t)) for i, t in enumerate(toggles)]

        async def all_indexed() -> None:  # every object's toggle dropped: only the startup one is left
            while len(indexed._toggles) > 1:
                await asyncio.sleep(0.001)

        await asyncio.wait_for(all_indexed(), 10)
        assert done == 0  # still held by the startup toggle
        await indexed.drop_toggle(blocker)
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert done == objects
        return checks

    assert asyncio.run(scenario()) < 10 * objects  # O(objects); unpatched kopf 1.45: objects² / 2


def test_the_patch_is_refused_on_a_kopf_it_was_not_tested_with(monkeypatch) -> None:
    from slipway import kopfpatch

    assert kopfpatch.kopf_refusal() is None  # the installed kopf is the pinned one (constraints.txt)
    message = kopfpatch.kopf_refusal("1.99.0")
    assert message is not None and "kopf 1.99.0" in message and "constraints.txt" in message
    monkeypatch.setattr(kopfpatch, "kopf_version", lambda: "1.99.0")
    assert kopfpatch.wake_index_waiters_only_on_change() is False


def test_no_kopf_handler_needs_the_diff_base_the_operator_does_not_keep() -> None:
    """slipway.kopfpatch.NoDiffBase keeps no last-handled configuration: right only while no handler
    detects changes (on.create/update/delete/resume/field) or spawns daemons and timers. Every
    handler of a watched resource is an index or an on.event one, and both are async (a sync one
    costs a hop to kopf's thread pool on every event)."""
    import inspect

    import kopf

    import slipway.kopfpatch
    import slipway.operator
    import slipway.watches  # noqa: F401 - registers the handlers

    registry = kopf.get_default_registry()
    assert not registry._changing.get_all_handlers() and not registry._spawning.get_all_handlers()
    watched = [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]
    assert len(watched) >= 20
    sync = [h.id for h in watched if not inspect.iscoroutinefunction(h.fn)]
    assert not sync, sync
    settings = kopf.OperatorSettings()
    slipway.operator.apply_settings(settings)
    assert isinstance(settings.persistence.diffbase_storage, slipway.kopfpatch.NoDiffBase)


def test_listed_objects_reach_kopfs_workers_without_managed_fields(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """At a start every object's worker holds its body until all kinds are indexed; the bodies kopf
    queues carry no metadata.managedFields (kopf's own listing, with the API server's answer faked)."""
    import kopf
    from kopf._cogs.clients import fetching, watching
    from kopf._cogs.structs import references

    from slipway.kopfpatch import drop_managed_fields_as_they_arrive

    assert drop_managed_fields_as_they_arrive()
    managed = [{"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    listed = [{"metadata": {"name": f"d-{i}", "namespace": "n", "managedFields": managed}, "spec": {"replicas": 1}}
              for i in range(3)]  # fmt: skip

    async def fetch_objs(**_: object):  # type: ignore[no-untyped-def]
        yield listed, "42"

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)

    async def scenario() -> list[object]:
        paused = asyncio.get_running_loop().create_future()
        paused.set_result(None)  # the operator pauses right after its listing: no watch is opened
        resource = references.Resource(group="apps", version="v1", plural="deployments", namespaced=True)
        stream = watching.continuous_watch(settings=kopf.OperatorSettings(), resource=resource,
                                           namespace="n", operator_pause_waiter=paused)  # fmt: skip
        return [event async for event in stream]

    events = asyncio.run(scenario())
    bodies = [e["object"] for e in events if isinstance(e, dict)]  # type: ignore[index]
    assert [b["metadata"]["name"] for b in bodies] == ["d-0", "d-1", "d-2"]
    assert all("managedFields" not in b["metadata"] and b["spec"] == {"replicas": 1} for b in bodies)
    assert events[-1] is watching.Bookmark.LISTED


def test_a_body_kopf_has_indexed_keeps_only_what_the_handlers_read_and_the_index_has_it_whole() -> None:
    """At a start every worker holds its event until all kinds are indexed: once kopf's own indexing
    has run (with Slipway's index handlers), a child's body keeps its metadata only, a Slipway object's
    its spec too, and the cache's copy is the whole object."""
    import logging

    import kopf
    from kopf._cogs.structs import bodies, references
    from kopf._core.engines import indexing

    import slipway.watches  # noqa: F401 - registers the handlers
    from slipway.kopfpatch import slim_bodies_once_indexed
    from slipway.packed import unpacked

    assert slim_bodies_once_indexed()
    registry = kopf.get_default_registry()
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    owner = {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment", "name": "d", "uid": "p",
             "controller": True}  # fmt: skip
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "d-stable", "namespace": "n", "uid": "c", "ownerReferences": [owner],
                               "labels": {"app.kubernetes.io/managed-by": "slipway"}},
                  "spec": {"replicas": 2}, "status": {"readyReplicas": 2}}  # fmt: skip
    idep = {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment",
            "metadata": {"name": "d", "namespace": "n", "uid": "p"},
            "spec": {"model": {"name": "m"}}, "status": {"phase": "Promoted"}}  # fmt: skip
    cases = ((deployment, "deployments", "apps"), (idep, "inferencedeployments", "slipway.dev"))
    for body, plural, group in cases:
        index = plural
        whole = dict(body)
        resource = references.Resource(group=group, version=body["apiVersion"].split("/")[1], plural=plural,
                                       namespaced=True)  # fmt: skip
        event = {"type": None, "object": body}
        asyncio.run(indexing.index_resource(indexers=indexers, registry=registry, settings=kopf.OperatorSettings(),
                                            resource=resource, raw_event=event, memory=indexing.IndexingMemory(),
                                            logger=logging.getLogger("test"), memo=kopf.Memo(),
                                            body=bodies.Body(body)))  # fmt: skip
        assert [unpacked(v) for v in indexers.indices[index][("name", "n", body["metadata"]["name"])]] == [whole]
        kept = {"apiVersion", "kind", "metadata", *(("spec",) if group == "slipway.dev" else ())}
        assert set(event["object"]) == kept, event["object"]


def test_a_discovery_that_misses_slipways_kinds_is_repeated_until_the_api_serves_them() -> None:
    """An API server just started answers discovery before it serves its CRDs: kopf's one scan would
    leave the operator never watching its own kinds. The scan is repeated until it finds them (and
    gives up, with what it found, after its deadline); a group of optional kinds is never waited for."""
    from types import SimpleNamespace

    from kopf._cogs.clients import scanning

    from slipway import kopfpatch

    assert kopfpatch.rescan_until_served()
    assert getattr(scanning.scan_resources, "_slipway_rescans", False)
    full = [SimpleNamespace(group=g, plural=p) for g, p in kopfpatch.REQUIRED_RESOURCES]
    partial = [r for r in full if r.group != "slipway.dev"]
    assert kopfpatch.missing_resources(partial, None) == [
        "trainingruns.slipway.dev", "modelartifacts.slipway.dev", "inferencedeployments.slipway.dev"]  # fmt: skip
    assert kopfpatch.missing_resources(partial, {"kueue.x-k8s.io"}) == []

    def scans(*answers: list[SimpleNamespace]) -> tuple[list[object], object]:
        calls: list[object] = []

        async def scan(**kwargs: object) -> list[SimpleNamespace]:
            calls.append(kwargs.get("groups"))
            return answers[min(len(calls), len(answers)) - 1]

        return calls, scan

    calls, scan = scans(partial, partial, full)
    found = asyncio.run(kopfpatch.scan_until_served(scan, {"groups": None}, deadline=30, retry=0.01))
    assert found == full and len(calls) == 3
    calls, scan = scans(partial)  # never served: given up at the deadline, with what was found
    found = asyncio.run(kopfpatch.scan_until_served(scan, {"groups": None}, deadline=0.05, retry=0.01))
    assert found == partial and len(calls) >= 2
    calls, scan = scans([])  # a rescan of an optional group: answered at once
    assert asyncio.run(kopfpatch.scan_until_served(scan, {"groups": {"kueue.x-k8s.io"}}, deadline=30, retry=1)) == []
    assert len(calls) == 1
