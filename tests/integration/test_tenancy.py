"""Tenants cannot touch each other's models: a namespace's slipway.dev/allowed-models decides."""

from __future__ import annotations

import pytest
from kubernetes import client

from slipway.mlflow import MlflowClient
from slipway_testing import apply_object, condition, model_artifact, train_run, wait_status

pytestmark = pytest.mark.cluster


def test_a_model_off_the_namespace_allow_list_is_refused_and_its_aliases_untouched(
    kube_api, namespace, operator, cluster
):
    other = f"team-b-{namespace}"
    run_id = train_run(cluster.mlflow_url, other, steps=4)
    with MlflowClient(cluster.mlflow_url) as mlflow:
        mlflow.get_or_create_registered_model(other)
        production = mlflow.create_model_version(other, f"runs:/{run_id}/model", run_id).version
        mlflow.set_alias(other, "production", production)
    core = client.CoreV1Api(kube_api)
    core.patch_namespace(namespace, {"metadata": {"annotations": {"slipway.dev/allowed-models": "team-a-*"}}})
    operator()
    # A tenant names team B's model and asks for its production alias.
    body = model_artifact("hijack", other, {"uri": f"runs:/{run_id}/model"}, aliases=["production"])
    apply_object(kube_api, namespace, body)
    obj = wait_status(kube_api, namespace, "ModelArtifact", "hijack",
                      lambda o: condition(o, "Stalled").get("reason") == "ModelNotAllowed", 60, "refused")  # fmt: skip
    assert f"'{other}' is not allowed here" in condition(obj, "Stalled")["message"]
    with MlflowClient(cluster.mlflow_url) as mlflow:
        assert mlflow.get_version_by_alias(other, "production").version == production
        assert len(mlflow.search_model_versions(f"name='{other}'")) == 1  # nothing registered
    # A cluster admin allows it: the same object proceeds, woken by the namespace's change.
    core.patch_namespace(namespace, {"metadata": {"annotations": {"slipway.dev/allowed-models": f"team-a-*,{other}"}}})
    wait_status(kube_api, namespace, "ModelArtifact", "hijack",
                lambda o: condition(o, "Stalled").get("reason") != "ModelNotAllowed", 60, "allowed")  # fmt: skip
