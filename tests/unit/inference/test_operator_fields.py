"""What the operator's own settings put in a serving pod (its image, the fetch-model image, the MLflow
address) is no part of a revision: an operator upgrade or a move of MLflow keeps every existing
Deployment as it is (Keep, no write, no pod restarted, no canary), and a new fetch image reaches
the pods with the next revision (pure)."""

from __future__ import annotations

import copy
from typing import Any

from slipway import children
from slipway.inference import build, revision
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.operatorfields import keeping_operator_fields, revision_for
from slipway.inference.rollout.base import Desired
from slipway.podspec import with_credentials

OWNER = "uid-owner"
SPEC = InferenceDeploymentSpec.model_validate(
    {"model": {"name": "digits", "alias": "candidate"}, "image": "srv:1", "modelLoad": {}}
)
OLD = {"mlflow": "http://mlflow.old:5000", "workload": "ghcr.io/slipway-dev/slipway:0.1.0", "fetch": ""}
NEW = {"mlflow": "http://mlflow.new:5000", "workload": "ghcr.io/slipway-dev/slipway:0.2.0",
       "fetch": "registry.example/fetch@sha256:" + "a" * 64}  # fmt: skip


def desired_for(version: str, operator: dict[str, str], observed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stable Deployment a pass of an operator with these settings wants, as the handler builds it."""
    found = Desired(version, f"models:/digits/{version}", "digits")
    served_as = revision_for(SPEC, found, operator["mlflow"], [observed], {})
    body = build.deployment("d", "ns", SPEC, "stable", version, found.uri, operator["mlflow"], None, "digits",
                            operator["workload"], "slipway-inference", revision_id=served_as,
                            fetch_image=operator["fetch"])  # fmt: skip
    return keeping_operator_fields(with_credentials(body, "slipway-mlflow-credentials"), observed)


def created(desired: dict[str, Any]) -> dict[str, Any]:
    """``desired`` as the API server returns it once Slipway created it."""
    out = copy.deepcopy(desired)
    out["metadata"] |= {"uid": "uid-child", "resourceVersion": "7"}
    out["metadata"]["ownerReferences"] = [{"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment",
                                           "name": "d", "uid": OWNER, "controller": True}]  # fmt: skip
    out["metadata"].setdefault("annotations", {})[children.APPLIED_HASH] = children.desired_hash(desired)
    return out


def fetch(body: dict[str, Any]) -> dict[str, Any]:
    (init,) = body["spec"]["template"]["spec"]["initContainers"]
    return init  # type: ignore[no-any-return]


def mlflow_of(container: dict[str, Any]) -> str | None:
    return next((e["value"] for e in container["env"] if e["name"] == "MLFLOW_TRACKING_URI"), None)


def test_the_revision_leaves_out_the_operator_image_the_fetch_image_and_the_mlflow_address() -> None:
    before = build.deployment("d", "ns", SPEC, "stable", "3", "u", OLD["mlflow"], None, "digits", OLD["workload"])
    after = build.deployment("d", "ns", SPEC, "stable", "3", "u", NEW["mlflow"], None, "digits", NEW["workload"],
                             fetch_image=NEW["fetch"])  # fmt: skip
    assert fetch(before)["image"] != fetch(after)["image"]  # the builder does use the settings
    assert before["metadata"]["labels"][build.REVISION_LABEL] == after["metadata"]["labels"][build.REVISION_LABEL]


def test_an_operator_upgrade_and_a_move_of_mlflow_keep_the_existing_deployment() -> None:
    stable = created(desired_for("3", OLD))
    assert fetch(stable)["image"] == OLD["workload"]  # no fetch image set: the workload image
    for settings in ({**OLD, "workload": NEW["workload"]}, {**OLD, "mlflow": NEW["mlflow"]},
                     {**OLD, "fetch": NEW["fetch"]}, NEW):  # fmt: skip
        desired = desired_for("3", settings, stable)
        assert desired["metadata"]["labels"][build.REVISION_LABEL] == stable["metadata"]["labels"][build.REVISION_LABEL]
        assert children.decide(desired, stable, OWNER).action == "Keep", settings
        assert fetch(desired)["image"] == OLD["workload"]
        assert mlflow_of(fetch(desired)) == mlflow_of(desired["spec"]["template"]["spec"]["containers"][0])
        assert mlflow_of(fetch(desired)) == OLD["mlflow"]


def test_a_new_model_version_is_a_new_revision_with_the_new_fetch_image_and_mlflow_address() -> None:
    stable = created(desired_for("3", OLD))
    desired = desired_for("4", NEW, stable)
    assert desired["metadata"]["labels"][build.REVISION_LABEL] != stable["metadata"]["labels"][build.REVISION_LABEL]
    decision = children.decide(desired, stable, OWNER)
    assert decision.action == "Update"
    assert fetch(desired)["image"] == NEW["fetch"]
    assert mlflow_of(fetch(desired)) == NEW["mlflow"]
    assert mlflow_of(desired["spec"]["template"]["spec"]["containers"][0]) == NEW["mlflow"]
    rolled = children.updated(stable, desired)
    assert fetch(rolled)["image"] == NEW["fetch"]


def test_a_revision_hashed_with_the_mlflow_address_by_an_earlier_operator_is_the_same_revision() -> None:
    found = Desired("3", "models:/digits/3", "digits")
    (legacy,) = revision.legacy_revisions(SPEC, "3", found.uri, "digits", [OLD["mlflow"]])
    current = revision.revision(SPEC, "3", found.uri, "digits")
    assert legacy != current
    # The stable Deployment an earlier operator made, with MLflow at the old address ...
    earlier = build.deployment("d", "ns", SPEC, "stable", "3", found.uri, OLD["mlflow"], None, "digits",
                               OLD["workload"], revision_id=legacy)  # fmt: skip
    # ... is this revision to an operator that has MLflow at the new address: no canary.
    assert revision_for(SPEC, found, NEW["mlflow"], [earlier, None], {}) == legacy
    # A rollback an earlier operator recorded still refuses the same revision.
    refused = {"lastRollback": {"revision": legacy, "reason": "AnalysisFailed"}}
    assert revision_for(SPEC, found, OLD["mlflow"], [None, None], refused) == legacy
    # Nothing recorded under an earlier hash: the revision's own hash.
    assert revision_for(SPEC, found, NEW["mlflow"], [None, None], {}) == current
    other = Desired("4", "models:/digits/4", "digits")
    assert revision_for(SPEC, other, OLD["mlflow"], [earlier, None], refused) == revision.revision(
        SPEC, "4", other.uri, "digits"
    )


def credentials_of(body: dict[str, Any]) -> list[str]:
    return [e["secretRef"]["name"] for e in fetch(body).get("envFrom") or []]


def test_a_new_credentials_rule_reaches_a_fleet_with_its_next_revision_not_at_the_upgrade() -> None:
    """An upgrade to Namespace-named credentials (a namespace that names none gets none) or a new name
    keeps the Secret an existing Deployment's containers read: no pod restarted."""
    stable = created(desired_for("3", OLD))
    assert credentials_of(stable) == ["slipway-mlflow-credentials"]
    found = Desired("3", "models:/digits/3", "digits")
    for secret in (None, "team-mlflow"):
        body = build.deployment("d", "ns", SPEC, "stable", "3", found.uri, OLD["mlflow"], None, "digits",
                                OLD["workload"], "slipway-inference", revision_id=revision_for(SPEC, found,
                                OLD["mlflow"], [stable], {}))  # fmt: skip
        desired = keeping_operator_fields(with_credentials(body, secret), stable)
        assert credentials_of(desired) == ["slipway-mlflow-credentials"], secret
        assert children.decide(desired, stable, OWNER).action == "Keep", secret
        # The next revision reads what the rule says now.
        newer = build.deployment("d", "ns", SPEC, "stable", "4", "models:/digits/4", OLD["mlflow"], None, "digits",
                                 OLD["workload"], "slipway-inference")  # fmt: skip
        rolled = keeping_operator_fields(with_credentials(newer, secret), stable)
        assert credentials_of(rolled) == ([secret] if secret else []), secret
