"""The child reconcilers' decision table: create, update, keep, refuse, delete (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from slipway import children
from slipway.inference import build
from slipway.inference.model import InferenceDeploymentSpec

OWNER = "uid-owner"
SPEC = InferenceDeploymentSpec.model_validate({"model": {"name": "digits", "alias": "candidate"}, "image": "srv:1"})


def owned(obj: dict[str, Any], uid: str | None = OWNER) -> dict[str, Any]:
    """``obj`` as the API server would return it after Slipway created it: owner, hash, defaults."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta["uid"] = "uid-child"
    meta["resourceVersion"] = "7"
    if uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment",
                                    "name": "x", "uid": uid, "controller": True}]  # fmt: skip
    meta.setdefault("annotations", {})[children.APPLIED_HASH] = children.desired_hash(obj)
    return out


def service() -> dict[str, Any]:
    return build.service("digits", "team-a", SPEC)


def with_server_defaults(svc: dict[str, Any]) -> dict[str, Any]:
    svc = copy.deepcopy(svc)
    svc["spec"]["clusterIP"] = "10.0.0.12"
    svc["spec"]["type"] = "ClusterIP"
    svc["spec"]["ports"][0]["protocol"] = "TCP"
    return svc


@pytest.mark.parametrize(
    ("observed", "action"),
    [
        (None, "Create"),
        (with_server_defaults(owned(service())), "Keep"),
        (owned(service(), uid="someone-else"), "Refuse"),
        (owned(service(), uid=None), "Refuse"),
    ],
    ids=["missing", "ours-equal-with-defaults", "owned-by-other", "no-owner"],
)
def test_decision_table(observed: dict[str, Any] | None, action: str) -> None:
    assert children.decide(service(), observed, OWNER).action == action


def test_refusal_names_the_object_and_the_fix() -> None:
    decision = children.decide(service(), owned(service(), uid=None), OWNER)
    assert "Service team-a/digits already exists" in decision.message
    assert "never adopts" in decision.message


def test_port_change_is_an_update_and_the_update_keeps_server_fields() -> None:
    observed = with_server_defaults(owned(service()))
    changed = build.service("digits", "team-a", SPEC.model_copy(update={"port": 9000}))
    assert children.decide(changed, observed, OWNER).action == "Update"
    body = children.updated(observed, changed)
    assert body["spec"]["ports"][0]["port"] == 9000
    assert body["spec"]["clusterIP"] == "10.0.0.12"  # immutable server field kept
    assert body["metadata"]["resourceVersion"] == "7"  # a concurrent change is a conflict
    assert body["metadata"]["ownerReferences"][0]["uid"] == OWNER


def test_drift_made_by_hand_is_an_update() -> None:
    observed = owned(service())
    observed["spec"]["selector"] = {"app": "other"}
    assert children.decide(service(), observed, OWNER).action == "Update"


def test_a_field_slipway_stopped_setting_is_removed() -> None:
    route_spec = SPEC.model_copy(update={"traffic": SPEC.traffic.model_copy(update={"hostnames": ["a.example"]})})
    before = build.http_route("digits", "team-a", route_spec, 0)
    after = build.http_route("digits", "team-a", SPEC, 0)
    observed = owned(before)
    assert children.decide(after, observed, OWNER).action == "Update"
    assert "hostnames" not in children.updated(observed, after)["spec"]


def test_replicas_left_to_the_hpa_are_kept_on_update() -> None:
    desired = build.deployment("digits", "team-a", SPEC, "stable", "3", "models:/digits/3", None, None)
    observed = owned(desired)
    observed["spec"]["replicas"] = 4  # the HPA scaled it
    assert children.decide(desired, observed, OWNER).action == "Keep"
    newer = build.deployment("digits", "team-a", SPEC, "stable", "4", "models:/digits/4", None, None)
    assert children.updated(observed, newer)["spec"]["replicas"] == 4


@pytest.mark.parametrize(
    ("desired", "observed", "equal"),
    [
        ("0.5", "500m", True),
        ("1024Mi", "1Gi", True),
        ("1", "1", True),
        ("2", "1", False),
        ("http", "http", True),
        ("http", "https", False),
        ({"a": 1}, {"a": 1, "defaulted": True}, True),
        ([{"a": 1}], [{"a": 1}, {"a": 2}], False),
        ([{"a": 1}], [{"a": 1, "b": 0}], True),
        ({"a": None}, {}, True),
        ({"value": ""}, {}, True),  # the API server omits empty values
        ({"n": 0, "b": False, "l": [], "d": {}}, {}, True),
        ({"value": "x"}, {}, False),
    ],
)
def test_covers_ignores_defaults_and_compares_quantities_by_value(desired: Any, observed: Any, equal: bool) -> None:
    assert children.covers(observed, desired) is equal


def test_hpa_with_a_quantity_the_server_rewrites_is_kept() -> None:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "digits", "alias": "candidate"},
            "image": "srv:1",
            "autoscaling": {"metrics": [{"type": "Pods", "name": "inflight", "targetAverageValue": "0.5"}]},
        }
    )
    desired = build.hpa("digits", "team-a", spec)
    observed = owned(desired)
    observed["spec"]["metrics"][0]["pods"]["target"]["averageValue"] = "500m"
    assert children.decide(desired, observed, OWNER).action == "Keep"


def test_create_only_kinds_are_kept_whatever_changed() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "r-train", "namespace": "n"}, "spec": {"x": 1}}
    observed = owned(job)
    observed["spec"]["x"] = 2
    assert children.decide(job, observed, OWNER).action == "Keep"


def test_stale_children_of_this_owner_only_are_deleted() -> None:
    mine = [owned(build.service("d", "n", SPEC, t)) for t in build.TRACKS]
    other = owned(build.service("e", "n", SPEC), uid="another-parent")
    decisions = children.stale([*mine, other], wanted=["d"], owner_uid=OWNER)
    assert sorted(d.name for d in decisions) == ["d-canary", "d-stable"]
    assert {d.action for d in decisions} == {"Delete"}


# --------------------------------------------------------------------------- writes outside the parent


PARENT = {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment",
          "metadata": {"name": "digits", "namespace": "team-a", "uid": OWNER}}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "refused_because"),
    [
        ({"metadata": {"namespace": "kube-system"}}, "outside the namespace team-a"),
        ({"kind": "Job", "apiVersion": "batch/v1"}, "not a kind InferenceDeployment makes"),
        ({"kind": "ClusterRoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1"}, "not a kind"),
        ({"apiVersion": "v2"}, "not a kind"),
        ({"kind": None}, "not a kind"),
    ],
)
def test_a_write_outside_the_parents_namespace_or_kinds_is_refused(change, refused_because):
    desired = service()
    for key, value in change.items():
        if isinstance(value, dict):
            desired[key].update(value)
        else:
            desired[key] = value
    with pytest.raises(children.ForeignWrite, match=refused_because):
        children.apply(None, PARENT, desired, None)  # type: ignore[arg-type]  # refused before any request


def test_a_child_under_another_name_is_refused():
    children.check_child(PARENT, service(), name="digits")
    with pytest.raises(children.ForeignWrite, match="its child is named other"):
        children.check_child(PARENT, service(), name="other")


def served_status(deployment: dict[str, Any]) -> dict[str, Any]:
    """status.previousStable as the operator records it when a promotion of ``deployment`` is decided."""
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    annotations = deployment["metadata"]["annotations"]
    return {"revision": labels[build.REVISION_LABEL], "modelVersion": labels[build.VERSION_LABEL],
            "modelName": annotations[build.MODEL_ANNOTATION], "uri": annotations[build.URI_ANNOTATION],
            **build.kept_for_revert(deployment)}  # fmt: skip


def test_the_revert_of_a_promotion_is_rebuilt_from_status_only():
    served = build.deployment("digits", "team-a", SPEC, "stable", "1", "models:/digits/1", None, None)
    reverted = build.previous_of("digits", "team-a", served_status(served))
    assert reverted is not None
    assert reverted["spec"]["template"] == served["spec"]["template"]
    assert reverted["spec"]["strategy"] == served["spec"]["strategy"]
    assert reverted["metadata"]["labels"] == served["metadata"]["labels"]
    assert reverted["metadata"]["annotations"] == served["metadata"]["annotations"]
    children.check_child(PARENT, reverted, name=build.deployment_name("digits", "stable"))


def test_the_revert_keeps_its_identity_whatever_the_kept_template_says():
    served = build.deployment("digits", "team-a", SPEC, "stable", "1", "models:/digits/1", None, None)
    status = served_status(served)
    status["podTemplate"]["metadata"]["labels"][build.REVISION_LABEL] = "forged"
    reverted = build.previous_of("digits", "team-a", status)
    assert reverted is not None
    assert (reverted["kind"], reverted["metadata"]["namespace"], reverted["metadata"]["name"]) == (
        "Deployment", "team-a", build.deployment_name("digits", "stable"))  # fmt: skip
    assert reverted["spec"]["selector"] == {"matchLabels": build.selector("digits", "stable")}
    assert reverted["spec"]["template"]["metadata"]["labels"][build.REVISION_LABEL] == status["revision"]
    assert build.previous_of("digits", "team-a", None) is None


@pytest.mark.parametrize("kept", [{}, {"podTemplate": "x"}, {"podTemplate": {"spec": "x"}}, {"podTemplate": []}])
def test_a_status_without_a_usable_template_gives_no_revert(kept):
    served = build.deployment("digits", "team-a", SPEC, "stable", "1", "models:/digits/1", None, None)
    status = {k: v for k, v in served_status(served).items() if k not in ("podTemplate", "strategy")}
    assert build.previous_of("digits", "team-a", {**status, **kept}) is None
