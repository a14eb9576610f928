"""After a downgrade, an older operator's passes keep what a newer one wrote and its models do not
know: a nested field of a record it leaves as it is (status.lastRollback.tag, written since 62de949
and dropped by that release's writer), an unknown field of a list item, a whole unknown field; a
record it replaces, and a field it removes, carry nothing of the old ones (pure)."""

from __future__ import annotations

from typing import Any

from slipway.inference.model import InferenceDeploymentStatus
from slipway.status.conditions import ready
from slipway.status.writer import next_status

ROLLBACK = {"reason": "Aborted", "modelName": "digits", "modelVersion": "2", "revision": "360b8ed043",
            "time": "2026-12-01T00:00:00Z", "fromANewerOperator": "reason=Aborted, revision=r0"}  # fmt: skip
PENDING = {"action": "SetAlias", "model": "digits", "version": "1", "alias": "production", "newerField": 7}
STABLE = {"revision": "0123456789", "modelName": "digits", "modelVersion": "1", "replicas": 2}
STORED: dict[str, Any] = {"phase": "RolledBack", "lastRollback": ROLLBACK, "pendingRegistryUpdates": [PENDING],
                          "stable": {**STABLE, "newerTrackField": {"a": 1}}, "newerTopLevel": {"b": 2}}  # fmt: skip


def write(fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    after, change = next_status(InferenceDeploymentStatus, STORED, 3, ready("RolledBack", "refused"), fields)
    return after, change.patch


def test_fields_a_newer_operator_wrote_survive_a_pass_that_leaves_their_objects_as_they_are() -> None:
    after, patch = write({"phase": "RolledBack"})
    assert after["lastRollback"] == ROLLBACK and "lastRollback" not in patch
    assert after["pendingRegistryUpdates"] == [PENDING] and "pendingRegistryUpdates" not in patch
    assert after["newerTopLevel"] == {"b": 2} and "newerTopLevel" not in patch


def test_an_object_that_changes_is_written_as_the_models_describe_it_the_records_beside_it_keep_theirs() -> None:
    after, patch = write({"stable": {**STABLE, "replicas": 3}})
    assert after["stable"]["replicas"] == 3 and patch["stable"]["replicas"] == 3
    assert "newerTrackField" not in after["stable"] and patch["stable"]["newerTrackField"] is None
    assert after["lastRollback"] == ROLLBACK


def test_a_record_replaced_carries_nothing_of_the_old_one() -> None:
    newer = {"reason": "Aborted", "modelName": "digits", "modelVersion": "4", "revision": "ffff000011",
             "time": "2026-12-02T00:00:00Z"}  # fmt: skip
    after, patch = write({"lastRollback": newer, "pendingRegistryUpdates": None})
    assert after["lastRollback"] == newer and patch["lastRollback"]["fromANewerOperator"] is None
    assert "pendingRegistryUpdates" not in after and patch["pendingRegistryUpdates"] is None
