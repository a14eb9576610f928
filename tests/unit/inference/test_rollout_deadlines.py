"""progressDeadlineSeconds counts time without progress, not a step's age: pass after pass, each
fed the status the one before wrote, as the operator runs them. (The cluster test that waited out
the deadline with a real pod deleted and a real pause took 95 s; this is its rule.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from slipway.inference import traffic
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.base import Desired, Observed, Track
from slipway.inference.rollout.planner import plan

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")
DEADLINE = 20


def spec(**rollout: Any) -> InferenceDeploymentSpec:
    """One step of 25% held 10 minutes, no analysis, a 20-s deadline (the cluster test's)."""
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "m", "alias": "candidate"}, "image": "i",
        "autoscaling": {"minReplicas": 2, "maxReplicas": 2},
        "rollout": {"steps": [{"weight": 25, "pause": "10m"}], "progressDeadlineSeconds": DEADLINE,
                    "maxSurgeReplicas": 1, **rollout},
    })  # fmt: skip


def track(d: Desired, ready: int, replicas: int) -> Track:
    return Track(d.version, d.uri, replicas, ready, replicas, True, revision=d.revision, model=d.model,
                 available=ready, pods=replicas)  # fmt: skip


ROUTER = traffic.router("Replicas")  # spec()'s traffic mode


class Passes:
    """The operator's passes over one InferenceDeployment: each plan's status is the next one's input."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}

    def at(self, seconds: float, canary_ready: int, **rollout: Any) -> Any:
        observed = Observed(spec(**rollout), V2, None, track(V1, 2, 2), track(V2, canary_ready, 1), self.status, {},
                            NOW + timedelta(seconds=seconds), None, router=ROUTER)  # fmt: skip
        p = plan(observed)
        self.status = {**self.status, **p.status, "phase": p.phase}
        if p.canary is not None:
            self.status["canary"] = {"revision": p.canary.revision, "modelVersion": p.canary.version,
                                     "readyReplicas": canary_ready}  # fmt: skip
        return p


def test_a_canary_pod_replaced_long_after_its_step_began_is_not_rolled_back():
    passes = Passes()
    assert passes.at(0, canary_ready=0).phase in ("Progressing", "Analyzing")  # the canary starting
    assert passes.at(5, canary_ready=1).phase == "Analyzing"  # ready at its step
    for t in range(10, 300, 10):  # the step grows far older than the deadline while its pod serves
        assert passes.at(t, canary_ready=1).phase == "Analyzing", t
    # Its pod is deleted and its replacement is ready 15 s later, within the deadline: no rollback.
    for t in (300, 305, 310):
        p = passes.at(t, canary_ready=0)
        assert p.phase != "RolledBack" and not p.status.get("lastRollback"), (t, p.status)
    assert passes.at(315, canary_ready=1).phase == "Analyzing"
    # And progress counts from the replacement: another restart within the deadline is no rollback either.
    assert passes.at(330, canary_ready=0).phase != "RolledBack"
    assert passes.at(334, canary_ready=1).phase == "Analyzing"


def test_a_replacement_that_never_becomes_ready_is_rolled_back_once_the_deadline_passed_without_progress():
    passes = Passes()
    passes.at(0, canary_ready=0)
    passes.at(5, canary_ready=1)
    passes.at(290, canary_ready=1)
    assert passes.at(290 + DEADLINE - 1, canary_ready=0).phase != "RolledBack"  # not yet: within the deadline
    p = passes.at(290 + DEADLINE + 1, canary_ready=0)
    assert p.phase == "RolledBack" and p.status["lastRollback"]["reason"] == "ProgressDeadlineExceeded", p.status


def test_paused_longer_than_the_deadline_is_never_rolled_back_and_promote_goes_on():
    passes = Passes()
    passes.at(0, canary_ready=0)
    passes.at(5, canary_ready=1)
    for t in range(10, 120, 5):  # paused six deadlines long, its pod replaced meanwhile
        p = passes.at(t, canary_ready=0 if 40 <= t < 90 else 1, paused=True)
        assert p.phase == "Paused" and not p.status.get("lastRollback"), (t, p.status)
    # Resumed with its pod ready: the deadline counts from the pause, not the step.
    assert passes.at(125, canary_ready=1).phase == "Analyzing"
