"""Who may use a TrainingRun's checkpoint claim (training/claim.verdict): its own, one it
adopts (labelled for its name, with no owner or an earlier TrainingRun of that name as owner), and
every other claim of that name refused."""

from __future__ import annotations

from typing import Any

import pytest

from slipway.training import build
from slipway.training.claim import owner_references, verdict
from slipway.training.model import TrainingRunSpec

UID, OLD, WORK = "uid-now", "uid-before", "work-key"
OWNER = {"apiVersion": "slipway.dev/v1alpha1", "kind": "TrainingRun",
         "metadata": {"name": "digits", "namespace": "team-a", "uid": UID}}  # fmt: skip


def ref(kind: str = "TrainingRun", name: str = "digits", uid: str = OLD, api: str = "slipway.dev/v1alpha1",
        controller: bool = True) -> dict[str, Any]:  # fmt: skip
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": controller}


def claim(
    refs: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None, **meta: Any
) -> dict[str, Any]:
    found: dict[str, Any] = {"name": "digits-checkpoints", "namespace": "team-a", "resourceVersion": "7",
                             "labels": build.labels("digits") if labels is None else labels, **meta}  # fmt: skip
    if refs is not None:
        found["ownerReferences"] = refs
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": found, "spec": {}}


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        (claim([ref(uid=UID)]), "Ours"),
        (claim(), "Adopt"),  # retained (whenDeleted: Retain) or restored by Velero: no ownerReferences
        (claim([]), "Adopt"),
        (claim([ref()]), "Adopt"),  # restored with the ownerReference of the TrainingRun it was backed up with
        (claim([ref(api="slipway.dev/v1beta1")]), "Adopt"),
        (claim([ref(controller=False)]), "Adopt"),
        (claim(labels={**build.labels("digits"), "velero.io/backup-name": "nightly"}), "Adopt"),
    ],
    ids=["own", "no-refs", "empty-refs", "stale-uid", "stale-uid-other-version", "stale-not-controller", "velero"],
)
def test_a_claim_left_by_an_earlier_trainingrun_of_the_same_name_is_adopted(
    observed: dict[str, Any], expected: str
) -> None:
    assert verdict(observed, OWNER, WORK)[0] == expected


@pytest.mark.parametrize(
    ("observed", "why"),
    [
        (claim([ref(kind="StatefulSet", api="apps/v1", name="db", uid="live")]), "owned by StatefulSet db"),
        (claim([ref(kind="TrainingRun", name="other")]), "owned by TrainingRun other"),
        (claim([ref(kind="TrainingRun", api="kubeflow.org/v1")]), "owned by TrainingRun digits"),
        (claim([ref(), ref(kind="Pod", api="v1", name="p", uid="live", controller=False)]), "owned by Pod p"),
        (claim(labels=build.labels("other")), "labelled for the TrainingRun 'other'"),
        (claim(labels={"app": "mine"}), "not labelled by Slipway"),
        (claim(labels={build.RUN_LABEL: "digits"}), "not labelled by Slipway"),  # no managed-by: not Slipway's
        (claim(namespace="team-b"), "not a PersistentVolumeClaim in the TrainingRun's namespace"),
        ({**claim(), "kind": "ConfigMap"}, "not a PersistentVolumeClaim"),
    ],
    ids=[
        "other-owner",
        "other-trainingrun",
        "other-group",
        "second-owner",
        "other-label",
        "no-label",
        "no-managed-by",
        "other-namespace",
        "other-kind",
    ],  # fmt: skip
)
def test_any_other_claim_of_that_name_is_refused(observed: dict[str, Any], why: str) -> None:
    found, message = verdict(observed, OWNER, WORK)
    assert found == "Refuse" and why in message


def test_a_claim_owned_by_this_trainingrun_is_its_own_whatever_its_labels() -> None:
    assert verdict(claim([ref(uid=UID)], labels={}), OWNER, WORK)[0] == "Ours"


def test_retain_means_no_owner_and_delete_or_unset_means_this_trainingrun_as_controller() -> None:
    def spec(when: str | None) -> TrainingRunSpec:
        checkpoint: dict[str, Any] = {"size": "1Gi", **({"whenDeleted": when} if when else {})}
        return TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "checkpoint": checkpoint})

    retained = [spec(w).checkpoint.retained for w in ("Retain", "Delete", None)]  # type: ignore[union-attr]
    assert retained == [True, False, False]
    assert owner_references(OWNER, True) == []
    [owned] = owner_references(OWNER, False)
    assert owned["uid"] == UID and owned["controller"] and owned["kind"] == "TrainingRun"
    with pytest.raises(ValueError):
        spec("Orphan")


def test_a_claim_being_deleted_is_waited_for_never_adopted_and_a_foreign_one_stays_refused() -> None:
    deleting = {"deletionTimestamp": "2026-01-01T00:00:00Z"}
    assert verdict(claim([ref()], **deleting), OWNER, WORK)[0] == "Deleting"  # the garbage collector's, at once
    assert verdict(claim(**deleting), OWNER, WORK)[0] == "Deleting"
    assert verdict(claim([ref(kind="Job", api="batch/v1", uid="live")], **deleting), OWNER, WORK)[0] == "Refuse"
    assert verdict(claim([ref(uid=UID)], **deleting), OWNER, WORK)[0] == "Ours"  # its own: kept, as before


def test_a_claim_made_for_other_work_is_refused_one_made_for_the_same_or_before_work_keys_adopted() -> None:
    def made_for(work: str) -> dict[str, Any]:
        return claim(annotations={"slipway.dev/work": work})

    found, why = verdict(made_for("another-spec"), OWNER, WORK)
    assert found == "Refuse" and "other work" in why
    assert verdict(made_for(WORK), OWNER, WORK)[0] == "Adopt"
    assert verdict(claim(), OWNER, WORK)[0] == "Adopt"  # made before the annotation
    assert verdict(claim([ref(uid=UID)], annotations={"slipway.dev/work": "x"}), OWNER, WORK)[0] == "Ours"
