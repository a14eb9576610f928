"""The private copies of Slipway's CRDs the CRD upgrade test installs, and its comparison of objects."""

from __future__ import annotations

import pytest

from slipway_testing.crdcopies import (
    KINDS,
    PREVIOUS,
    added,
    current_crds,
    git_crd,
    lost,
    previous_commit,
    previous_crds,
    privatize,
)


@pytest.mark.parametrize("kind", KINDS)
def test_a_private_copy_changes_the_group_and_names_only(kind):
    crd = current_crds()[kind]
    copy = privatize(crd, "upgrade-u1a2b3c.slipway.dev", "u1a2b3c")
    assert copy["spec"]["group"] == "upgrade-u1a2b3c.slipway.dev"
    names = copy["spec"]["names"]
    assert names["kind"] == f"U1a2b3c{kind}" and names["plural"] == f"u1a2b3c{kind.lower()}s"
    assert "shortNames" not in names and "categories" not in names  # `kubectl get tr` never finds the copy
    assert copy["metadata"] == {"name": f"u1a2b3c{kind.lower()}s.upgrade-u1a2b3c.slipway.dev"}
    assert copy["spec"]["versions"] == crd["spec"]["versions"] and copy["spec"]["scope"] == crd["spec"]["scope"]
    assert crd["spec"]["group"] == "slipway.dev"  # the original is untouched


def test_the_previous_crds_are_those_of_the_commit_they_name():
    commit = previous_commit()
    assert len(commit) == 40
    assert set(previous_crds()) == set(KINDS)
    texts = {p.name: git_crd(commit, p.name) for p in PREVIOUS.glob("slipway.dev_*.yaml")}
    assert None not in texts.values(), f"git history with {commit} is not at hand (a clone with its history)"
    for name, text in texts.items():
        assert (PREVIOUS / name).read_text() == text, name


def test_lost_names_pruned_and_changed_fields_and_added_names_defaults():
    stored = {"status": {"lastRollback": {"reason": "AnalysisFailed"}, "gates": [{"passed": True}], "phase": "X"}}
    read = {"status": {"gates": [{"passed": False}], "phase": "X", "replicas": 1}}
    assert lost(stored, read) == [
        "status.lastRollback.reason: 'AnalysisFailed' -> '<missing>'",
        "status.gates[0].passed: True -> False",
    ]
    assert added(stored, read) == ["status.replicas"]
    assert lost(stored, stored) == [] and added(stored, stored) == []
