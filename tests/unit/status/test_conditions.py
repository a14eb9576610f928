"""Conditions move their transition time only on a status change, so status is quiet at rest."""

from __future__ import annotations

from slipway.status.conditions import (
    Cond,
    get_condition,
    is_true,
    ready,
    reconciling,
    set_conditions,
    stalled,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def test_new_conditions_get_time_and_generation():
    conds = set_conditions(None, reconciling("Training", "step 3/10"), generation=2, now=T0)
    ready_cond = get_condition(conds, "Ready")
    assert ready_cond == {
        "type": "Ready",
        "status": "False",
        "reason": "Training",
        "message": "step 3/10",
        "lastTransitionTime": T0,
        "observedGeneration": 2,
    }
    assert is_true(conds, "Reconciling")
    assert not is_true(conds, "Stalled")


def test_same_status_keeps_transition_time_and_is_idempotent():
    first = set_conditions(None, reconciling("Training", "step 3/10"), generation=1, now=T0)
    second = set_conditions(first, reconciling("Training", "step 4/10"), generation=1, now=T1)
    assert get_condition(second, "Ready")["lastTransitionTime"] == T0
    assert get_condition(second, "Ready")["message"] == "step 4/10"
    assert set_conditions(second, reconciling("Training", "step 4/10"), generation=1, now=T1) == second


def test_status_change_moves_transition_time():
    first = set_conditions(None, reconciling("Training", ""), generation=1, now=T0)
    second = set_conditions(first, ready("Succeeded"), generation=1, now=T1)
    assert get_condition(second, "Ready")["lastTransitionTime"] == T1
    assert get_condition(second, "Ready")["status"] == "True"
    assert not is_true(second, "Reconciling")


def test_stalled_is_abnormal_true_and_others_are_kept():
    first = set_conditions(None, [Cond("Trained", "True", "Succeeded")], generation=1, now=T0)
    second = set_conditions(first, stalled("InvalidSpec", "spec.nodes: must be >= 1"), generation=2, now=T1)
    assert is_true(second, "Stalled")
    assert not is_true(second, "Ready")
    assert get_condition(second, "Trained")["observedGeneration"] == 1
    assert [c["type"] for c in second] == ["Trained", "Ready", "Reconciling", "Stalled"]


def test_parse_time_reads_the_api_servers_times_and_refuses_nothing() -> None:
    from datetime import UTC, datetime

    from slipway.status.conditions import parse_time

    assert parse_time("2026-12-01T10:00:00Z") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parse_time("2026-12-01T10:00:00.250000Z") == datetime(2026, 12, 1, 10, 0, 0, 250000, tzinfo=UTC)
    assert parse_time(None) is None
    assert parse_time("") is None
    assert parse_time("yesterday") is None  # a hand-edited status: no time, not an exception
