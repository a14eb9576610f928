"""The fate of the MLflow updates an InferenceDeployment decides (``status/registry.py``): refused
ones parked with MLflow's answer, tried again on a new generation or after 10 minutes, bounded, and
named in the RegistrySynced condition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from slipway.inference import registry
from slipway.inference.model import InferenceDeploymentStatus
from slipway.status.writer import next_status

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
TAG = {"action": "SetTag", "model": "digits", "version": "3", "key": "slipway.dev/rollback", "value": "reason=x"}
ALIAS = {"action": "SetAlias", "model": "digits", "version": "3", "alias": "production"}


def test_a_refusal_keeps_the_update_mlflows_answer_when_and_at_which_generation() -> None:
    entry = registry.refused(TAG, "MLflow ...: permission denied (HTTP 403)", 4, NOW)
    assert entry == {**TAG, "error": "MLflow ...: permission denied (HTTP 403)", "refusedTime": "2026-12-02T10:00:00Z",
                     "refusedGeneration": 4}  # fmt: skip
    assert registry.update_of(entry) == TAG
    assert len(registry.refused(TAG, "x" * 5000, 4, NOW)["error"]) == registry.MAX_ERROR


def test_a_parked_update_waits_for_a_new_generation_or_ten_minutes() -> None:
    status = {"refusedRegistryUpdates": [registry.refused(TAG, "no", 4, NOW)]}
    parked, retried = registry.due_again(status, 4, NOW + timedelta(minutes=9))
    assert (len(parked), retried) == (1, [])
    assert registry.due_again(status, 5, NOW + timedelta(seconds=1)) == ([], [TAG])  # the spec changed
    assert registry.due_again(status, 4, NOW + timedelta(minutes=10)) == ([], [TAG])  # the slow timer
    assert registry.next_retry(parked, NOW + timedelta(minutes=9)) == 60.0


def test_a_hand_edited_refusal_without_a_time_is_retried_not_kept_for_ever() -> None:
    status = {"refusedRegistryUpdates": [{**TAG, "error": "no", "refusedGeneration": 4}]}
    assert registry.due_again(status, 4, NOW) == ([], [TAG])


def test_parking_the_same_update_again_replaces_it_and_the_list_is_bounded() -> None:
    first = registry.refused(TAG, "403", 4, NOW)
    again = registry.refused(TAG, "404", 5, NOW + timedelta(minutes=10))
    assert registry.park([first], again) == [again]
    many: list[dict[str, object]] = []
    for version in range(30):
        many = registry.park(many, registry.refused({**TAG, "version": str(version)}, "no", 1, NOW))
    assert len(many) == registry.MAX_REFUSED and many[-1]["version"] == "29"


def test_the_condition_names_the_refused_update_or_what_waits() -> None:
    refused = registry.condition([], [registry.refused(ALIAS, "permission denied (HTTP 403)", 1, NOW)])
    assert (refused.type, refused.status, refused.reason) == ("RegistrySynced", "False", "RegistryUpdateRefused")
    assert "alias production of digits -> version 3: permission denied (HTTP 403)" in refused.message
    pending = registry.condition([TAG], [])
    assert (pending.status, pending.reason) == ("False", "Pending") and "1 MLflow update(s)" in pending.message
    assert registry.condition([], []).status == "True"
    assert registry.describe(TAG) == "tag slipway.dev/rollback=reason=x on digits version 3"


def test_a_refused_update_round_trips_through_the_status_schema() -> None:
    entry = registry.refused(TAG, "no", 2, NOW)
    after, change = next_status(InferenceDeploymentStatus, {}, 2, [registry.condition([], [entry])],
                                {"refused_registry_updates": [entry]})  # fmt: skip
    assert after["refusedRegistryUpdates"] == [entry]
    assert [c["type"] for c in after["conditions"]] == ["RegistrySynced"]


# -- a refused alias move never lands after the decisions that followed it ------------------------

BACK = {**ALIAS, "version": "2"}  # production moved back to version 2 (a bake of version 3 reverted)


def test_a_newer_decision_for_the_same_alias_drops_the_parked_and_pending_moves():
    parked = [registry.refused(ALIAS, "permission denied (HTTP 403)", 4, NOW), registry.refused(TAG, "no", 4, NOW)]
    other = {**ALIAS, "alias": "staging"}
    stored, still, dropped = registry.sift([ALIAS, other], parked, [BACK], "production", ("digits", "2"))
    assert dropped == [ALIAS, other, parked[0]]  # staging is no alias of this deployment's spec: not written either
    assert (stored, [registry.update_of(p) for p in still]) == ([], [TAG])
    assert registry.superseded(ALIAS, [BACK]) and not registry.superseded(ALIAS, [{**BACK, "model": "other"}])
    assert not registry.superseded(TAG, [BACK])


def test_a_stored_move_is_written_only_while_status_still_holds_it():
    assert registry.sift([ALIAS], [], [], "production", ("digits", "3")) == ([ALIAS], [], [])
    assert registry.sift([ALIAS], [], [], "production", None) == ([ALIAS], [], [])  # nothing known: kept
    assert registry.sift([ALIAS], [], [], "production", ("digits", "2")) == ([], [], [ALIAS])
    assert registry.sift([ALIAS], [], [], "", ("digits", "3")) == ([], [], [ALIAS])  # promoteAlias emptied
    assert registry.wanted(TAG, "", None)


def test_a_move_refused_while_its_version_baked_is_not_replayed_after_the_revert():
    """The finding: production -> 3 refused (403) at the promotion and parked; version 3's bake fails
    and is reverted to version 2. Ten minutes (or a spec change) later the parked move is due again:
    status holds version 2 for the alias, so it is dropped, never written."""
    from slipway.inference.rollout.records import alias_target
    from unit.inference.test_rollout import ABORT, V1, V2, baked_spec, baking, observe, plan, track

    parked = [registry.refused({**ALIAS, "model": "m", "version": "2"}, "permission denied (HTTP 403)", 1, NOW)]
    s = baked_spec()
    # The newer decision: the bake of version 2 aborted, production back to version 1.
    revert = plan(observe(s, stable=track(V2), annotations=ABORT, status=baking(canary={"revision": "rev2"})))
    target = alias_target(observe(s, stable=track(V2)), revert)
    stored, still, dropped = registry.sift([], parked, revert.registry, "production", target)
    assert (stored, still, [registry.update_of(d) for d in dropped]) == ([], [], [registry.update_of(parked[0])])
    # Without that decision (no alias move back), the retry re-checks status: version 1 serves.
    later = observe(s, desired=V2, stable=track(V1), status={"phase": "RolledBack", "lastRollback": revert.status[
        "lastRollback"]})  # fmt: skip
    _, retried = registry.due_again({"refusedRegistryUpdates": parked}, 2, NOW + timedelta(minutes=10))
    stored, _, dropped = registry.sift(retried, [], [], "production", alias_target(later, plan(later)))
    assert (stored, len(dropped)) == ([], 1)
