"""The operator's RBAC is generated from the registry of kinds (slipway.rbacgen): kustomize's ClusterRole
and Role and the chart's rules are what the tables make, grant what they need and nothing else (in
the operator's own namespace, only the objects it names), and a row added to the table is granted
with no other edit."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slipway import kinds, rbacgen
from slipway.config import OperatorConfig
from slipway.lease import LeaseStore
from slipway.mlflowhook.ledger import LeaseLedger

ROOT = Path(__file__).resolve().parents[3]
Grant = tuple[str, str, str]
Named = tuple[str, str, str, str]  # (group, resource, resourceName or "*", verb)


def granted(rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def granted_by_name(rules: list[dict[str, Any]]) -> set[Named]:
    return {
        (group, resource, name, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames", ["*"])
        for verb in rule["verbs"]
    }


def shipped_role() -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((ROOT / rbacgen.HOME_ROLE).read_text()) if d["kind"] == "Role")


def chart_define(text: str, name: str) -> list[dict[str, Any]]:
    """The rules of one named template of the chart's _rbac.tpl (plain YAML between define and end)."""
    start = '{{- define "' + name + '" -}}\n'
    found = re.search(re.escape(start) + r"(.*?)\{\{- end -\}\}", text, re.S)
    assert found is not None, name
    return yaml.safe_load(found.group(1))


def test_the_committed_rbac_is_what_the_registry_generates(tmp_path: Path):
    assert rbacgen.main([str(tmp_path)]) == 0
    assert set(rbacgen.generated()) == {rbacgen.CLUSTER_ROLE, rbacgen.HOME_ROLE, rbacgen.CHART_RULES}
    for relative in rbacgen.generated():
        committed = ROOT / relative
        assert committed.read_text() == (tmp_path / relative).read_text(), f"{committed} is stale: run `make crds`"
    assert rbacgen.main(["--check", str(ROOT)]) == 0


@pytest.mark.parametrize(
    ("relative", "old", "new"),
    [
        (rbacgen.CLUSTER_ROLE, '"list", "watch", "patch"]', '"list", "watch", "patch", "delete"]'),
        (rbacgen.HOME_ROLE, '["slipway-mlflow-proof"]', '["slipway-mlflow-proof", "other"]'),
        (rbacgen.CHART_RULES, '["slipway-mlflow-proof"]', '["slipway-mlflow-proof", "other"]'),
    ],
)
def test_the_check_fails_on_a_hand_edit(tmp_path: Path, relative: Path, old: str, new: str):
    assert rbacgen.main([str(tmp_path)]) == 0
    path = tmp_path / relative
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    assert rbacgen.main(["--check", str(tmp_path)]) == 1


def test_the_chart_grants_cluster_scoped_kinds_cluster_wide_and_the_rest_where_watched():
    text = (ROOT / rbacgen.CHART_RULES).read_text()
    cluster = granted(chart_define(text, "slipway.clusterRules"))
    namespaced = granted(chart_define(text, "slipway.namespacedRules"))
    assert cluster == kinds.rbac_grants(k for k in kinds.ALL if not k.namespaced)
    assert namespaced == kinds.rbac_grants(k for k in kinds.ALL if k.namespaced)
    cluster_scoped = {"nodes", "namespaces", "customresourcedefinitions", "clusterqueues", "cohorts"}
    assert {resource for _, resource, _ in cluster} == cluster_scoped


def test_every_rule_says_what_the_operator_does_with_it():
    unexplained = [k.kind for k in kinds.ALL if (k.verbs or k.subresources) and not k.uses]
    assert unexplained == []
    role = next(d for d in yaml.safe_load_all((ROOT / rbacgen.CLUSTER_ROLE).read_text()) if d["kind"] == "ClusterRole")
    assert granted(role["rules"]) == kinds.rbac_grants()
    assert "*" not in {part for grant in granted(role["rules"]) for part in grant}  # no wildcards


def test_kinds_share_a_rule_only_with_the_same_group_scope_verbs_and_reason():
    rules = rbacgen.rules()
    assert len({(r.group, r.namespaced, r.verbs, r.uses) for r in rules}) == len(rules)
    [own] = [r for r in rules if "trainingruns" in r.resources]
    assert own.resources == ("trainingruns", "inferencedeployments")  # ModelArtifacts also get create
    [quota] = [r for r in rules if "clusterqueues" in r.resources]
    assert quota.resources == ("clusterqueues", "cohorts") and not quota.namespaced


def test_a_new_row_is_granted_with_nothing_else_edited():
    row = kinds.Kind(
        "TrafficSplit",
        "split.example.com",
        "v1alpha1",
        "trafficsplits",
        verbs=("get", "list", "watch", "create", "update", "delete"),
        uses="A made-up router's weights.",
    )
    table = (*kinds.ALL, row)
    generated = rbacgen.generated(table)
    role = next(d for d in yaml.safe_load_all(generated[rbacgen.CLUSTER_ROLE]) if d["kind"] == "ClusterRole")
    added = granted(role["rules"]) - kinds.rbac_grants()
    assert added == {("split.example.com", "trafficsplits", verb) for verb in row.verbs}
    assert "# A made-up router's weights." in generated[rbacgen.CLUSTER_ROLE]
    namespaced = granted(chart_define(generated[rbacgen.CHART_RULES], "slipway.namespacedRules"))
    assert added <= namespaced


def home_needs() -> set[Named]:
    """What the kinds of the operator's own namespace need: their verbs on every object, their named
    verbs on the objects the operator names."""
    needed = {(k.group, k.plural, "*", verb) for k in kinds.HOME for verb in k.verbs}
    return needed | {
        (k.group, k.plural, name, verb)
        for k in kinds.HOME
        for name in rbacgen.HOME_NAMES[k.kind]
        for verb in k.named_verbs
    }


def test_the_shipped_role_grants_exactly_what_the_home_table_needs():
    assert granted_by_name(shipped_role()["rules"]) == home_needs()
    leases = {(name, verb) for name in ("slipway-operator", "slipway-mlflow-webhook") for verb in ("get", "update")}
    assert home_needs() == {
        ("coordination.k8s.io", "leases", "*", "create"),
        *{("coordination.k8s.io", "leases", name, verb) for name, verb in leases},
        ("", "secrets", "*", "create"),
        ("", "secrets", "slipway-mlflow-proof", "get"),
    }
    assert all(k.uses for k in kinds.HOME)
    # Granted in the operator's namespace only, never cluster-wide.
    assert not set(kinds.HOME) & set(kinds.ALL)
    cluster_resources = {resource for _, resource, _ in kinds.rbac_grants()}
    assert not cluster_resources & {k.plural for k in kinds.HOME}


def test_the_role_names_the_objects_the_operator_uses(monkeypatch: pytest.MonkeyPatch):
    """The names granted are those the operator's Lease, its webhook's ledger and its proof key use."""
    monkeypatch.delenv("SLIPWAY_MLFLOW_PROOF_SECRET", raising=False)
    lease = inspect.signature(LeaseStore).parameters["name"].default
    ledger = inspect.signature(LeaseLedger).parameters["name"].default
    assert rbacgen.HOME_NAMES["Lease"] == (lease, ledger)
    assert rbacgen.HOME_NAMES["Secret"] == (OperatorConfig().mlflow_proof_secret,)


def test_no_secret_but_the_proof_key_is_readable():
    secrets = {
        (name, verb)
        for group, resource, name, verb in granted_by_name(shipped_role()["rules"])
        if (group, resource) == ("", "secrets")
    }
    assert secrets == {("*", "create"), ("slipway-mlflow-proof", "get")}  # create cannot name an object
    cluster_role = next(d for d in yaml.safe_load_all((ROOT / rbacgen.CLUSTER_ROLE).read_text()))
    assert "secrets" not in {resource for _, resource, _ in granted(cluster_role["rules"])}


def test_the_chart_role_is_the_manifests_role():
    text = (ROOT / rbacgen.CHART_RULES).read_text()
    assert granted_by_name(chart_define(text, "slipway.homeRules")) == granted_by_name(shipped_role()["rules"])
    # The chart's Role writes no rule of its own: it includes the generated ones.
    chart_role = (ROOT / "charts" / "slipway" / "templates" / "role.yaml").read_text()
    assert '{{- include "slipway.homeRules" . | nindent 2 }}' in chart_role
    assert "apiGroups" not in chart_role


def test_named_verbs_without_names_are_refused():
    row = kinds.Kind("ConfigMap", "", "v1", "configmaps", named_verbs=("get",), uses="A made-up use.")
    with pytest.raises(ValueError, match="ConfigMap has named_verbs but no names"):
        rbacgen.rules([row])
    [rule] = rbacgen.rules([row], {"ConfigMap": ("a", "b")})
    assert (rule.resources, rule.names, rule.verbs) == (("configmaps",), ("a", "b"), ("get",))
