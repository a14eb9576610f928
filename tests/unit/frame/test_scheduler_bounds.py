"""The scheduler's memory of which objects had a pass is bounded: wake-ups naming objects that do not
exist (a child's ownerReference names whatever owner a tenant writes) cannot grow it without end, and
an object that lives keeps the lane of an object already reconciled (pure)."""

from __future__ import annotations

import asyncio
from typing import Any

from slipway.controller import NEW, PASSED_LIMIT, URGENT, Key, RecentKeys, Scheduler


def test_recent_keys_keep_at_most_their_limit_forgetting_the_least_recently_added() -> None:
    keys = RecentKeys(3)
    for name in ("a", "b", "c"):
        keys.add(("x", "n", name))
    keys.add(("x", "n", "a"))  # added again: now the most recent
    keys.add(("x", "n", "d"))
    assert len(keys) == 3 and ("x", "n", "b") not in keys
    assert all(("x", "n", name) in keys for name in ("a", "c", "d"))
    keys.discard(("x", "n", "c"))
    keys.discard(("x", "n", "never"))
    assert len(keys) == 2 and ("x", "n", "c") not in keys


def test_passes_of_many_forged_owner_names_leave_the_memory_bounded_and_live_objects_urgent() -> None:
    limit, forged = 50, 5000
    assert PASSED_LIMIT >= 10_000  # the operator's own bound: far above the objects one replica serves

    async def scenario() -> tuple[int, int, list[tuple[str, str]], list[tuple[str, str]]]:
        lanes: list[tuple[str, str]] = []
        scheduler = Scheduler(lambda key: None, workers=4, passed_limit=limit)
        acquire = scheduler.slots.acquire

        async def spy(key: Key, lane: str) -> str:
            lanes.append((key[2], lane))
            return await acquire(key, lane)

        scheduler.slots.acquire = spy  # type: ignore[method-assign]
        live = ("inferencedeployments", "team", "live")
        scheduler.wake(live)
        assert await scheduler.idle(10)
        most = 0
        for batch in range(forged // 500):
            for i in range(500):  # children whose ownerReferences name owners that do not exist
                scheduler.wake(("inferencedeployments", "team", f"forged-{batch}-{i}"))
            scheduler.wake(live)  # the live object keeps changing meanwhile
            assert await scheduler.idle(30)
            most = max(most, len(scheduler.passed))
        scheduler.wake(live)
        assert await scheduler.idle(10)
        first = [(name, lane) for name, lane in lanes if name == "live"]
        forged_lanes = [(name, lane) for name, lane in lanes if name.startswith("forged-")]
        return most, scheduler.passes, first, forged_lanes

    most, passes, live, forged_lanes = asyncio.run(scenario())
    print(f"forged owner names: {forged}, passes: {passes}, most keys remembered: {most} (limit {limit})")
    assert passes == forged + len(live) and len(forged_lanes) == forged
    assert most <= limit
    # The live object: its first pass is new, every later one is a change of an object already reconciled.
    assert live[0] == ("live", NEW) and all(lane == URGENT for _, lane in live[1:]), live
    assert len(live) == forged // 500 + 2


def test_a_deleted_object_is_forgotten_and_its_next_pass_is_a_first_pass_again() -> None:
    async def scenario() -> list[Any]:
        lanes: list[str] = []
        scheduler = Scheduler(lambda key: None, workers=1, passed_limit=10)
        acquire = scheduler.slots.acquire

        async def spy(key: Key, lane: str) -> str:
            lanes.append(lane)
            return await acquire(key, lane)

        scheduler.slots.acquire = spy  # type: ignore[method-assign]
        key = ("trainingruns", "n", "gone")
        for _ in range(2):
            scheduler.wake(key)
            assert await scheduler.idle(5)
        scheduler.forget(key)
        remembered = key in scheduler.passed
        scheduler.wake(key)
        assert await scheduler.idle(5)
        return [lanes, remembered]

    lanes, remembered = asyncio.run(scenario())
    assert lanes == [NEW, URGENT, NEW] and remembered is False
