"""A status edited by hand into garbage is repaired field by field, never wiped: what validates is
kept (durable decisions first: lastRollback, previousStable, pendingRegistryUpdates), what does not
is dropped with a Warning Event naming the field (pure)."""

from __future__ import annotations

import copy
from typing import Any

from slipway.inference.model import InferenceDeploymentStatus
from slipway.status.conditions import ready
from slipway.status.writer import REPAIRED, next_status, repair

ROLLBACK = {"reason": "AnalysisFailed", "metric": "errorRate", "value": 0.4, "modelName": "digits",
            "modelVersion": "4", "revision": "abc1234567", "time": "2026-12-01T10:00:00Z"}  # fmt: skip
PREVIOUS = {"revision": "0123456789", "modelName": "digits", "modelVersion": "3", "uri": "models:/digits/3",
            "podTemplate": {"spec": {"containers": [{"name": "server", "image": "srv:1"}]}}}  # fmt: skip
PENDING = {"action": "SetAlias", "model": "digits", "version": "3", "alias": "production"}
GOOD_CONDITION = {"type": "Ready", "status": "True", "reason": "Promoted", "message": "serving 3",
                  "lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": 4}  # fmt: skip
STORED: dict[str, Any] = {
    "phase": "Exploding",  # not a phase
    "observedGeneration": "four",  # not an integer
    "canary": "gone",  # not an object
    "stable": {"revision": "0123456789", "modelName": "digits", "modelVersion": "3", "replicas": "many"},
    "currentStep": 2,
    "lastRollback": ROLLBACK,
    "previousStable": PREVIOUS,
    "pendingRegistryUpdates": [PENDING, {"action": "Teleport", "model": "digits", "version": "3"}],
    "conditions": [GOOD_CONDITION, {"type": "Ready", "status": "Perhaps"}],
    "fromANewerOperator": {"kept": True},  # a field this operator does not know: never touched
}


def dropped(events: list[tuple[str, str, str]]) -> dict[str, str]:
    out = {}
    for type_, reason, message in events:
        assert (type_, reason) == ("Warning", REPAIRED)
        out[message.split(" was dropped")[0]] = message
    return out


def test_a_garbage_status_keeps_what_validates_and_names_what_it_drops() -> None:
    stored = copy.deepcopy(STORED)
    kept, change = repair(InferenceDeploymentStatus, stored)
    assert stored == STORED  # the stored status is not changed in place
    assert kept["lastRollback"] == ROLLBACK and kept["previousStable"] == PREVIOUS
    assert kept["pendingRegistryUpdates"] == [PENDING]
    assert kept["conditions"] == [GOOD_CONDITION]
    assert kept["currentStep"] == 2 and kept["fromANewerOperator"] == {"kept": True}
    names = dropped(change.events)
    assert set(names) == {"status.phase", "status.observedGeneration", "status.canary", "status.stable",
                          "status.pendingRegistryUpdates[1]", "status.conditions[1]"}  # fmt: skip
    assert "replicas" in names["status.stable"] and "action" in names["status.pendingRegistryUpdates[1]"]
    assert not any("Exploding" in m or "four" in m for m in names.values())  # what was written is not echoed
    assert change.patch == {"phase": None, "observedGeneration": None, "canary": None, "stable": None,
                            "pendingRegistryUpdates": [PENDING], "conditions": [GOOD_CONDITION]}  # fmt: skip
    InferenceDeploymentStatus.model_validate(kept)


def test_a_valid_status_is_not_repaired() -> None:
    kept, change = repair(InferenceDeploymentStatus, {"lastRollback": ROLLBACK, "phase": "Promoted"})
    assert kept == {"lastRollback": ROLLBACK, "phase": "Promoted"}
    assert not change.patch and not change.events


def test_a_pass_writing_over_a_garbage_status_keeps_the_durable_decisions() -> None:
    """The writer itself (a status another path hands it): it repairs instead of rebuilding from nothing."""
    after, change = next_status(InferenceDeploymentStatus, STORED, 5, ready("Promoted", "serving 3"),
                                {"phase": "Promoted"})  # fmt: skip
    assert after["lastRollback"] == ROLLBACK and after["previousStable"] == PREVIOUS
    assert after["pendingRegistryUpdates"] == [PENDING] and after["currentStep"] == 2
    assert after["phase"] == "Promoted" and after["observedGeneration"] == 5
    assert "canary" not in after and "stable" not in after and after["fromANewerOperator"] == {"kept": True}
    assert change.patch["canary"] is None and "lastRollback" not in change.patch
    assert "status.canary" in dropped([e for e in change.events if e[1] == REPAIRED])
    assert [c["type"] for c in after["conditions"]] == ["Ready", "Reconciling", "Stalled"]
