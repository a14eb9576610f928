"""A ModelArtifact deleted and applied again from the same YAML (as Argo CD does after a prune, or a
restore without status: a new uid, no status), on the local cluster with real MLflow: it adopts the
version its predecessor registered, runs no second validation, and moves no alias it already moved
(an alias a person moved since stays where they put it). A spec that differs is new work."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.artifact.model import ModelArtifactSpec
from slipway.mlflow import MlflowClient, model_version_filter
from slipway.mlflow.records import ROLE_TAG, UID_TAG, WORK_TAG, work_key
from slipway_testing import apply_object, custom, get_object, model_artifact, phase_in, report, wait_status

pytestmark = pytest.mark.cluster


def versions(mlflow: MlflowClient, model: str) -> list[str]:
    return sorted(v.version for v in mlflow.search_model_versions(model_version_filter(model)))


def validate_runs(mlflow: MlflowClient, model: str) -> int:
    experiment = mlflow.get_or_create_experiment(model)
    return len(mlflow.search_runs([experiment], filter="tags.`slipway.dev/role` = 'validate'"))


def delete_and_wait(kube_api: client.ApiClient, namespace: str, name: str) -> None:
    custom(kube_api).delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "modelartifacts", name)

    def gone() -> bool:
        try:
            get_object(kube_api, namespace, "ModelArtifact", name)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, 30, f"ModelArtifact {name} deleted")


def test_a_model_artifact_applied_again_registers_nothing_and_moves_no_alias(
    kube_api, namespace, operator, cluster, trained
):
    model = f"digits-{namespace}"
    spec: dict[str, Any] = {"aliases": ["candidate", "production"],
                            "validation": {"gates": [{"metric": "accuracy", "min": 0.5}]}}  # fmt: skip
    body = model_artifact("digits", model, {"mlflowRun": {"runId": trained, "artifactPath": "model"}}, **spec)
    with MlflowClient(cluster.mlflow_url) as mlflow:
        mlflow.get_or_create_registered_model(model)
        by_hand = mlflow.create_model_version(model, f"runs:/{trained}/model", trained, {}).version
        operator()
        first = apply_object(kube_api, namespace, body)
        done = wait_status(kube_api, namespace, "ModelArtifact", "digits", phase_in("Validated", "Rejected", "Failed"),
                           240, "a decision")["status"]  # fmt: skip
        assert done["phase"] == "Validated", done
        made = done["modelVersion"]
        assert mlflow.get_version_by_alias(model, "candidate").version == made
        mlflow.set_alias(model, "candidate", by_hand)  # a person moves it back since
        before = (versions(mlflow, model), validate_runs(mlflow, model))

        delete_and_wait(kube_api, namespace, "digits")
        again = apply_object(kube_api, namespace, body)
        assert again["metadata"]["uid"] != first["metadata"]["uid"] and not again.get("status")
        status = wait_status(kube_api, namespace, "ModelArtifact", "digits", phase_in("Validated", "Rejected",
                             "Failed"), 240, "a decision again")["status"]  # fmt: skip
        after = (versions(mlflow, model), validate_runs(mlflow, model))
        # The first object's Jobs go by garbage collection after it is gone; only the new one's count.
        jobs = [j.metadata.name for j in client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
                if any(o.uid == again["metadata"]["uid"] for o in j.metadata.owner_references or [])]  # fmt: skip
        report(f"re-applied ModelArtifact: versions {len(before[0])} -> {len(after[0])}, validate runs "
               f"{before[1]} -> {after[1]}, Jobs now {len(jobs)}, serves version {status['modelVersion']}")  # fmt: skip
        assert status["phase"] == "Validated" and status["modelVersion"] == made
        assert after == before and not jobs
        assert mlflow.get_version_by_alias(model, "candidate").version == by_hand  # not moved again
        assert mlflow.get_version_by_alias(model, "production").version == made

        # Another spec under the same name is new work: a version of its own.
        delete_and_wait(kube_api, namespace, "digits")
        apply_object(kube_api, namespace, {**body, "spec": {**body["spec"], "aliases": ["candidate"]}})
        wait_for(lambda: len(versions(mlflow, model)) == len(before[0]) + 1, 120, "a new version for a new spec")


def test_a_version_registered_under_the_earlier_work_key_is_adopted_not_registered_again(
    kube_api, namespace, operator, mlflow, trained
):
    """Until the work key hashed the spec as written it hashed the spec with its defaults: a version an
    earlier build registered (tagged with that key, by another uid, decided, its alias moved) is adopted
    by the same YAML applied after the upgrade: no version registered, no alias moved again."""
    model = f"digits-{namespace}"
    body = model_artifact("digits", model, {"mlflowRun": {"runId": trained}}, aliases=["candidate"])
    spec = ModelArtifactSpec.model_validate(body["spec"])
    uri = f"runs:/{trained}/model"
    # The earlier build's key, as its handler computed it: the spec with every default, dumped.
    earlier = work_key(namespace, "digits", spec.model_dump(mode="json", by_alias=True, exclude_none=True), uri)
    mlflow.get_or_create_registered_model(model)
    tags = {UID_TAG: "uid-of-the-earlier-build", ROLE_TAG: "source", WORK_TAG: earlier,
            "slipway.dev/modelartifact": f"{namespace}/digits", "slipway.dev/validation": "passed",
            "slipway.dev/gates": "[]", "slipway.dev/aliases-set": "candidate"}  # fmt: skip
    made = mlflow.create_model_version(model, uri, trained, tags).version
    mlflow.set_alias(model, "candidate", made)
    by_hand = mlflow.create_model_version(model, uri, trained, {}).version
    mlflow.set_alias(model, "candidate", by_hand)  # a person moved it since: it stays
    before = versions(mlflow, model)
    operator()
    apply_object(kube_api, namespace, body)
    status = wait_status(kube_api, namespace, "ModelArtifact", "digits", phase_in("Validated", "Rejected", "Failed"),
                         120, "a decision")["status"]  # fmt: skip
    after = versions(mlflow, model)
    candidate = mlflow.get_version_by_alias(model, "candidate")
    report(f"earlier work key: versions {len(before)} -> {len(after)}, adopted version {status.get('modelVersion')} "
           f"(registered as {made}), candidate on {candidate.version if candidate else None}")  # fmt: skip
    assert status["phase"] == "Validated" and status["modelVersion"] == made, status
    assert after == before and candidate is not None and candidate.version == by_hand
