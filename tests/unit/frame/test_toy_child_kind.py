"""A child kind Slipway has never heard of is one row of slipway.kinds (and its parent's builder and
pass, as docs/extending.md says): with only that row added, from the test tree, the frame serves it:
the child rule lets its parent write it and refuses any other, updates it by its rule, the watches
list it by Slipway's label and wake its owner on its changes, the cache heal lists it, the client
reaches it through the custom-objects API, and the generated RBAC grants it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from slipway import children, kinds, kube, rbacgen, resync, watches
from slipway.kinds import Kind, UpdateRule

# The row, as it would read in slipway.kinds.CHILDREN: a model card an InferenceDeployment publishes.
MODEL_CARD = Kind(
    "ModelCard",
    "cards.example.com",
    "v1",
    "modelcards",
    indexes=("modelcards",),
    managed=True,
    rule=UpdateRule(removable=frozenset({"notes"})),
    parents=("InferenceDeployment",),
    verbs=("get", "list", "watch", "create", "update", "delete"),
    uses="the model card each InferenceDeployment publishes",
)
OWNER = {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment",
         "metadata": {"namespace": "team", "name": "serve", "uid": "owner-uid"}}  # fmt: skip


@pytest.fixture
def with_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row added to the table, as an edit of kinds.py would add it."""
    monkeypatch.setattr(kinds, "CHILDREN", (*kinds.CHILDREN, MODEL_CARD))
    monkeypatch.setattr(kinds, "ALL", (*kinds.ALL, MODEL_CARD))


def card(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    owner = {"apiVersion": OWNER["apiVersion"], "kind": OWNER["kind"], "name": "serve", "uid": "owner-uid",
             "controller": True}  # fmt: skip
    metadata = {"namespace": "team", "name": "serve-card", "labels": {"app.kubernetes.io/managed-by": "slipway"},
                "ownerReferences": [owner], **meta}  # fmt: skip
    return {"apiVersion": MODEL_CARD.api_version, "kind": "ModelCard", "metadata": metadata, "spec": spec}


def test_without_the_row_the_frame_refuses_to_write_it():
    with pytest.raises(children.ForeignWrite, match="not a kind InferenceDeployment makes"):
        children.check_child(OWNER, card({}))


@pytest.mark.usefixtures("with_row")
def test_its_parent_may_write_it_and_no_other_kind_may():
    children.check_child(OWNER, card({}))
    run = {**OWNER, "apiVersion": "slipway.dev/v1alpha1", "kind": "TrainingRun"}
    with pytest.raises(children.ForeignWrite):
        children.check_child(run, card({}))


@pytest.mark.usefixtures("with_row")
def test_it_is_created_kept_and_updated_by_its_rule():
    desired = card({"summary": "digits v2"})
    assert children.decide(desired, None, "owner-uid").action == "Create"
    observed = card({"summary": "digits v1", "notes": "written once", "owner": "set by a person"})
    assert children.decide(desired, observed, "owner-uid").action == "Update"
    # its rule removes the notes Slipway no longer sets, and keeps what it never sets
    assert children.updated(observed, desired)["spec"] == {"summary": "digits v2", "owner": "set by a person"}
    assert children.decide(desired, card({}), "someone-else").action == "Refuse"


@pytest.mark.usefixtures("with_row")
def test_it_is_watched_by_slipways_label_and_its_changes_wake_its_owner():
    assert watches.server_selectors()[MODEL_CARD.resource] == watches.MANAGED_SELECTOR
    assert "modelcards" in watches.indexes()
    index, changed = watches.child_handlers(MODEL_CARD)
    keys = asyncio.run(index(body=card({})))
    assert set(keys) == {("name", "team", "serve-card"), ("owner", "owner-uid")}

    class Scheduler:
        woken: list[tuple[str, str, str]] = []

        def wake(self, key: tuple[str, str, str]) -> None:
            self.woken.append(key)

    memo = type("Memo", (), {"scheduler": Scheduler(), "get": lambda self, name: None})()
    asyncio.run(changed(body=card({}), type="MODIFIED", memo=memo))
    assert memo.scheduler.woken == [("inferencedeployments", "team", "serve")]


@pytest.mark.usefixtures("with_row")
def test_the_cache_heal_and_the_client_reach_it_and_the_rbac_grants_it():
    _, indexes, selected = resync.resources()["modelcards"]
    assert indexes == ("modelcards",) and selected
    assert kube.custom_kinds()["ModelCard"] == kube.Custom("cards.example.com", "v1", "modelcards")
    assert ("cards.example.com", "modelcards", "delete") in kinds.rbac_grants(kinds.ALL)
    assert "modelcards" in rbacgen.generated(kinds.ALL)[rbacgen.CLUSTER_ROLE]
