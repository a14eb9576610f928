"""The cache heal (``slipway.resync``): what a fresh list shows is gone, and what the cache then stops
returning; the objects it concerned are woken."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from slipway import resync
from slipway.controller import Cache


def obj(kind: str, name: str, uid: str, version: str, owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "n", "uid": uid, "resourceVersion": version}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment",
                                    "name": owner, "uid": "p", "controller": True}]  # fmt: skip
    api = "slipway.dev/v1alpha1" if kind == "InferenceDeployment" else "apps/v1"
    return {"apiVersion": api, "kind": kind, "metadata": meta}


def test_a_list_answer_gives_its_uids_and_its_version() -> None:
    typed = SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(uid="a", resource_version="5"))],
                            metadata=SimpleNamespace(resource_version="90"))  # fmt: skip
    assert resync.listing(typed) == ({"a"}, 90)
    plain = {"items": [{"metadata": {"uid": "b"}}], "metadata": {"resourceVersion": "91"}}
    assert resync.listing(plain) == ({"b"}, 91)


def test_gone_means_absent_from_the_list_and_not_newer_than_it() -> None:
    kept, deleted, newer = (
        obj("Deployment", "a", "u1", "10"),
        obj("Deployment", "b", "u2", "20"),
        obj("Deployment", "c", "u3", "150"),
    )
    assert resync.stale([kept, deleted, newer], {"u1"}, 100) == [deleted]  # c was made after the list


def test_the_cache_stops_returning_what_is_gone_and_its_owner_and_itself_are_woken() -> None:
    async def scenario() -> tuple[list[Any], list[Any], list[tuple[str, str, str]]]:
        child = obj("Deployment", "digits-canary", "c1", "10", owner="digits")
        parent = obj("InferenceDeployment", "old", "p1", "11")
        indexes = {
            "deployments": {("name", "n", "digits-canary"): [child], ("owner", "p"): [child]},
            "inferencedeployments": {("name", "n", "old"): [parent]},
        }
        cache = Cache(indexes)
        cache.remember(("inferencedeployments", "n", "old"), parent)
        woken: list[tuple[str, str, str]] = []
        scheduler = SimpleNamespace(wake=lambda key: woken.append(key), forget=lambda key: None)
        healer = resync.Healer(None, cache, scheduler, ["n"], {"InferenceDeployment": "inferencedeployments"},  # type: ignore[arg-type]
                               "app.kubernetes.io/managed-by=slipway", delay=0)  # fmt: skip
        for stale in (*resync.stale(resync.cached_objects(cache, "deployments"), set(), 100),
                      *resync.stale(resync.cached_objects(cache, "inferencedeployments"), set(), 100)):  # fmt: skip
            healer._forget(stale)
        return cache.select("deployments", "owner", "p"), [cache.parent(("inferencedeployments", "n", "old"))], woken

    owned, parents, woken = asyncio.run(scenario())
    assert owned == [] and parents == [None]
    assert woken == [("inferencedeployments", "n", "digits"), ("inferencedeployments", "n", "old")]


def test_listing_events_are_debounced_into_one_round() -> None:
    async def scenario() -> int:
        healer = resync.Healer(None, Cache({}), None, [], {}, "", delay=0.05)  # type: ignore[arg-type]
        rounds = []

        async def heal() -> None:
            rounds.append(1)

        healer.heal = heal  # type: ignore[method-assign]
        for _ in range(100):
            healer.relisted()
        await asyncio.sleep(0.2)
        return len(rounds)

    assert asyncio.run(scenario()) == 1


def test_the_heal_unpacks_each_object_once_under_its_name_and_reads_indexes_without_names_whole() -> None:
    child = obj("Deployment", "digits-canary", "c1", "10", owner="digits")
    copies: list[tuple[str, ...]] = []

    class Store(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            copies.append(key)
            return super().get(key, default)

    named = Store({("name", "n", "digits-canary"): [child], ("owner", "p"): [child], ("ref", "n", "x"): [child]})
    unnamed = Store({("owner", "p"): [child]})
    cache = Cache({"deployments": named, "pods": unnamed})
    assert resync.cached_objects(cache, "deployments") == [child]
    assert copies == [("name", "n", "digits-canary")]  # the owner and ref entries are not unpacked
    assert resync.cached_objects(cache, "pods") == [child]
    tables = {"deployments": (None, ("deployments", "pods"), True)}
    assert resync.gone_from(cache, tables, {"deployments": (set(), 100)}) == [child, child]
    assert resync.gone_from(cache, tables, {"deployments": ({"c1"}, 100)}) == []
