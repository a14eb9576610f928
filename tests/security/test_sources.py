"""Another team's weights, by any path: in multi-tenant mode a namespace editor names another
team's run id, its runs:/, models:/ and mlflow-artifacts:/ URIs, a URI MLflow does not own, and
another team's experiment. Each is a Stalled condition naming the field; nothing of the other
team's is registered, tagged or moved in MLflow."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from localkube.audit import audited_kubeconfig
from slipway_testing import (
    assert_writes_only_in,
    condition,
    create_as,
    model_artifact,
    stalled_with,
    training_run,
    wait_status,
)

pytestmark = pytest.mark.cluster

GROUP, VERSION = "slipway.dev", "v1alpha1"


def test_another_teams_runs_uris_and_experiments_are_refused(
    cluster, kube_api, namespace, operator, mlflow, trained, tenant, monkeypatch
):
    # Team acme's model, trained in the experiment shared-tests, with its production alias.
    acme = f"acme-{namespace}"
    mlflow.get_or_create_registered_model(acme)
    production = mlflow.create_model_version(acme, f"runs:/{trained}/model", trained).version
    mlflow.set_alias(acme, "production", production)
    acme_experiment = mlflow.get_run(trained).experiment_id
    # The cluster admin allows namespace t2 its own models and experiments only.
    own = f"t2-{namespace}"
    core = client.CoreV1Api(kube_api)
    core.patch_namespace(namespace, {"metadata": {"annotations": {"slipway.dev/allowed-models": f"{own}-*"}}})
    monkeypatch.setenv("SLIPWAY_REQUIRE_MODEL_ALLOWLIST", "true")
    since = datetime.now(UTC)
    operator(kubeconfig=audited_kubeconfig(cluster, "slipway-sources-operator"))

    attacks = {  # object name -> (source, refusal reason, the field the message names)
        "run-id": ({"mlflowRun": {"runId": trained}}, "SourceNotAllowed", "spec.source.mlflowRun.runId"),
        "runs-uri": ({"uri": f"runs:/{trained}/model"}, "SourceNotAllowed", "spec.source.uri"),
        "models-uri": ({"uri": f"models:/{acme}@production"}, "ModelNotAllowed", "spec.source.uri"),
        "artifacts-uri": ({"uri": f"mlflow-artifacts:/{acme_experiment}/{trained}/artifacts/model"},
                          "SourceNotAllowed", "spec.source.uri"),
        "s3-uri": ({"uri": "s3://acme-models/fraud/model"}, "SourceNotAllowed", "spec.source.uri"),
        "logged-model": ({"uri": "models:/m-0123456789abcdef"}, "SourceNotAllowed", "spec.source.uri"),
        "climb-out": ({"mlflowRun": {"runId": trained, "artifactPath": "model/../../.."}},
                      "SourceNotAllowed", "spec.source.mlflowRun.artifactPath"),
    }  # fmt: skip
    for name, (source, _, _) in attacks.items():
        create_as(tenant, namespace, model_artifact(name, f"{own}-{name}", source, aliases=["production"]))
    training = training_run("borrowed-experiment", model=f"{own}-x", mlflow={"experiment": "shared-tests"})
    create_as(tenant, namespace, training)

    for name, (_, reason, field) in attacks.items():
        obj = wait_status(kube_api, namespace, "ModelArtifact", name, stalled_with(reason), 60, f"{name} refused")
        message = condition(obj, "Stalled")["message"]
        assert message.startswith(f"{field}:"), message
        assert "cluster admin" in message or "name" in message, message
    obj = wait_status(kube_api, namespace, "TrainingRun", "borrowed-experiment",
                      stalled_with("ExperimentNotAllowed"), 60, "the borrowed experiment refused")  # fmt: skip
    assert condition(obj, "Stalled")["message"].startswith("spec.mlflow.experiment: MLflow experiment 'shared-tests'")
    assert client.BatchV1Api(kube_api).list_namespaced_job(namespace).items == []  # nothing ran

    # Nothing of acme's touched, nothing registered from its run.
    assert mlflow.get_version_by_alias(acme, "production").version == production
    assert len(mlflow.search_model_versions(f"name='{acme}'")) == 1
    # (other tests of the session register the same run under their own names, concurrently)
    assert [v for v in mlflow.search_model_versions(f"run_id='{trained}'") if v.name.startswith(own)] == []
    for name in attacks:
        assert mlflow.search_model_versions(f"name='{own}-{name}'") == []

    # The guard is what refused: once the admin shares acme's experiment with t2, the run id passes
    # the allow-list and its model is registered under t2's own name.
    shared = f"{own}-*, shared-tests"
    core.patch_namespace(namespace, {"metadata": {"annotations": {"slipway.dev/allowed-models": shared}}})
    registered = lambda o: bool((o.get("status") or {}).get("modelVersion"))  # noqa: E731
    wait_status(kube_api, namespace, "ModelArtifact", "run-id", registered, 90, "the run registered once allowed")
    assert len(mlflow.search_model_versions(f"name='{own}-run-id'")) >= 1
    # Nothing written outside the namespace, by the operator, throughout.
    assert_writes_only_in(cluster, "slipway-sources-operator", since, namespace)
