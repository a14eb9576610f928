"""A traffic router added from the test tree alone: one class and one row of traffic.ROUTERS. The
planner runs a canary through its step and its promotion with it, taking every share of traffic
from the router (the step's split, what the canary carries, what both tracks share while the
promotion moves pods), never computing one itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slipway.inference import traffic
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.base import Desired, Observed, Track
from slipway.inference.rollout.planner import plan
from slipway.inference.traffic import Objects, Sizing

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")


class Fixed:
    """A router Slipway has never heard of: any step gets 2 canary pods carrying 25% once both are
    ready (none before), and while both tracks serve with no step the canary gets 30%."""

    mode = "Fixed"
    weights_apart_from_pods = False

    def __init__(self) -> None:
        self.asked: list[str] = []

    def check(self, spec: Any, namespace: str, tenancy: Any) -> None:
        return None

    def split(self, weight: int, total: int, max_surge: int) -> Sizing:
        self.asked.append("split")
        return Sizing(2, 25, "", total - 2)

    def carried(self, sizing: Sizing, weight: int, canary_ready: int, stable_ready: int) -> int:
        self.asked.append("carried")
        return sizing.share if canary_ready >= sizing.pods else 0

    def shared(self, canary_ready: int, stable_ready: int) -> int:
        self.asked.append("shared")
        return 30

    def objects(self, name: str, namespace: str, spec: Any, canary_weight: int, held_out: bool = False) -> Objects:
        return Objects()


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> Fixed:
    router = Fixed()
    monkeypatch.setitem(traffic.ROUTERS, router.mode, router)  # the row, in this test only
    return router


def fixed_spec() -> InferenceDeploymentSpec:
    spec = InferenceDeploymentSpec.model_validate({
        "model": {"name": "m", "alias": "candidate"}, "image": "i", "replicas": 4,
        "autoscaling": {"minReplicas": 4, "maxReplicas": 4},
        "rollout": {"steps": [{"weight": 20}], "interval": "30s", "maxSurgeReplicas": 2},
    })  # fmt: skip
    # The CRD's enum would name a real router's mode; the test's row is reached without it.
    return spec.model_copy(update={"traffic": spec.traffic.model_copy(update={"mode": "Fixed"})})


def track(d: Desired, ready: int, replicas: int) -> Track:
    return Track(d.version, d.uri, replicas, ready, replicas, True, replicas, revision=d.revision, model=d.model,
                 available=ready)  # fmt: skip


def observe(stable: Track, canary: Track | None, status: dict[str, Any], now: datetime = NOW) -> Observed:
    return Observed(fixed_spec(), V2, None, stable, canary, status, {}, now)


def test_a_router_added_by_a_test_drives_a_canary_step_and_its_promotion(fixed: Fixed):
    stable = track(V1, 4, 4)
    # A new revision: the canary's pods start as the router split the step, carrying nothing yet.
    starting = plan(observe(stable, None, {"phase": "Promoted", "stable": {"revision": "rev1"}}))
    assert (starting.phase, starting.canary_replicas, starting.stable_target) == ("Progressing", 2, 2)
    assert (starting.weight, starting.route_weight, starting.requested_weight) == (0, 0, 20)
    assert fixed.asked[:2] == ["split", "carried"]

    # Both canary pods ready: the step's share is the router's 25% (the step asked for 20%).
    step = {"phase": "Analyzing", "canary": {"revision": "rev2", "readyReplicas": 2}, "currentStep": 0,
            "stepStartTime": NOW.isoformat(), "canaryStartTime": NOW.isoformat()}  # fmt: skip
    serving = plan(observe(stable, track(V2, 2, 2), step, NOW + timedelta(seconds=10)))
    assert (serving.phase, serving.weight, serving.route_weight, serving.requested_weight) == ("Analyzing", 25, 25, 20)

    # The step held its 30 s: promoted, both tracks share traffic as the router says (30%).
    promoting = plan(observe(stable, track(V2, 2, 2), step, NOW + timedelta(seconds=31)))
    assert (promoting.phase, promoting.weight, promoting.route_weight) == ("Promoting", 30, 30)
    assert promoting.durable and promoting.status["previousStable"]["revision"] == "rev1"

    # The promotion rolls the stable while the canary's pods keep serving their router's share.
    rolling = {**step, "phase": "Promoting", "previousStable": promoting.status["previousStable"],
               "lastProgressTime": (NOW + timedelta(seconds=31)).isoformat()}  # fmt: skip
    p = plan(observe(stable, track(V2, 2, 2), rolling, NOW + timedelta(seconds=35)))
    assert (p.phase, p.stable, p.weight, p.route_weight) == ("Promoting", V2, 30, 30)
    assert fixed.asked.count("shared") == 2
