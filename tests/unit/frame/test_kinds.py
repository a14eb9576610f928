"""The registry of kinds (slipway.kinds) is the one list: the RBAC the operator ships grants what it
says and nothing else, and every table derived from it agrees with it."""

from __future__ import annotations

from pathlib import Path

import yaml

from slipway import children, kinds, kube, resync, watches

ROOT = Path(__file__).resolve().parents[3]


def granted(path: Path, name: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every rule of the ClusterRole ``name`` in ``path``."""
    roles = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "ClusterRole"]
    (role,) = [r for r in roles if r["metadata"]["name"] == name]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_shipped_cluster_role_grants_exactly_what_the_registry_needs():
    shipped = granted(ROOT / "manifests" / "clusterrole.yaml", "slipway-operator")
    needed = kinds.rbac_grants()
    assert needed - shipped == set(), "the registry needs grants manifests/clusterrole.yaml lacks"
    assert shipped - needed == set(), "manifests/clusterrole.yaml grants what no kind in the registry needs"


def test_every_child_is_cached_watched_with_the_managed_by_selector_and_healed():
    selectors = watches.server_selectors()
    for child in kinds.CHILDREN:
        assert child.rule is not None and child.parents, child.kind
        assert child.managed and selectors[child.resource] == watches.MANAGED_SELECTOR
        assert child.index in watches.indexes() and child.index in resync.resources()
        assert child.kind in kube.typed_kinds() or child.kind in kube.custom_kinds()


def test_each_parent_may_write_only_the_kinds_the_registry_gives_it():
    assert children.child_kinds()["InferenceDeployment"] == {
        "Deployment": "apps/v1",
        "Service": "v1",
        "HorizontalPodAutoscaler": "autoscaling/v2",
        "HTTPRoute": "gateway.networking.k8s.io/v1",
        "InferencePool": "inference.networking.k8s.io/v1",
        "ServiceAccount": "v1",
        "Role": "rbac.authorization.k8s.io/v1",
        "RoleBinding": "rbac.authorization.k8s.io/v1",
    }
    assert children.child_kinds()["ModelArtifact"] == {"Job": "batch/v1"}
    assert set(children.child_kinds()["TrainingRun"]) == {"Job", "JobSet", "PersistentVolumeClaim", "Service",
                                                        "ModelArtifact"}  # fmt: skip
    assert children.rules()["ModelArtifact"].create_only and not children.rules()["Deployment"].create_only


def test_typed_lists_are_named_as_the_client_names_them():
    from kubernetes import client

    for kind in kinds.ALL:
        if kind.typed and kind.indexes:
            api = {"core": client.CoreV1Api, "batch": client.BatchV1Api, "apps": client.AppsV1Api,
                   "autoscaling": client.AutoscalingV2Api}[kind.typed[0]]  # fmt: skip
            suffix = kind.typed[1]
            assert hasattr(api, f"list_{suffix}"), kind.kind
            assert hasattr(api, f"list_{suffix.removeprefix('namespaced_')}_for_all_namespaces"), kind.kind
