"""MLflow names squatted: team t2, with MLflow access of its own (here the cluster's MLflow, which asks
no credentials: t2 can do anything its own basic-auth login could), creates the experiment and the
registered model inside team acme's allow-list before acme does, points the model's aliases at a
version of its own, and plants a FINISHED run with acme's owner tag and work key (both readable from
acme's runs) and a made-up proof. acme's TrainingRun, ModelArtifact and InferenceDeployment for those
names register nothing, adopt nothing and serve nothing of t2's: each is Stalled naming the MLflow
object. Once a cluster admin opts the experiment in, the TrainingRun uses it, and still does not adopt
the planted run (its proof does not hold). Counted in MLflow and the cluster."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from slipway.mlflow import PROOF_TAG, tag_filter
from slipway.training.adopt import work_of
from slipway.training.model import TrainingRunSpec
from slipway_testing import (
    apply_object,
    condition,
    deployment,
    get_object,
    model_artifact,
    report,
    stalled_with,
    training_run,
    wait_status,
)

pytestmark = pytest.mark.cluster

UNPROVEN = "MlflowObjectNotProven"


def test_names_squatted_by_another_team_are_neither_used_nor_adopted(kube_api, namespace, operator, mlflow, trained):
    model, experiment = f"acme-new-{namespace}", f"acme-exp-{namespace}"
    core = client.CoreV1Api(kube_api)
    allowed = {"slipway.dev/allowed-models": f"acme-*-{namespace}, shared-tests"}
    core.patch_namespace(namespace, {"metadata": {"annotations": allowed}})
    trainer = training_run("acme-train", steps=2, model=model, mlflow={"experiment": experiment})
    work = work_of(namespace, "acme-train", TrainingRunSpec.model_validate(trainer["spec"]))

    # t2 squats: the model with its own version behind candidate and production, both experiments, a planted run.
    mlflow.get_or_create_registered_model(model)
    theirs = mlflow.create_model_version(model, f"runs:/{trained}/model", trained).version
    for alias in ("candidate", "production"):
        mlflow.set_alias(model, alias, theirs)
    mlflow.get_or_create_experiment(model)
    experiment_id = mlflow.get_or_create_experiment(experiment)
    planted_tags = {"slipway.dev/trainingrun": f"{namespace}/acme-train", "slipway.dev/work": work,
                    "slipway.dev/checkpoint-step": "2", PROOF_TAG: "0" * 64}  # fmt: skip
    planted = mlflow.create_run(experiment_id, "planted", planted_tags).run_id
    mlflow.update_run(planted, status="FINISHED")

    operator()
    apply_object(kube_api, namespace, trainer)
    apply_object(kube_api, namespace, model_artifact("acme-ma", model, {"mlflowRun": {"runId": trained}}))
    apply_object(kube_api, namespace, deployment(model))

    stalled: dict[str, str] = {}
    for kind, name, named in (("TrainingRun", "acme-train", experiment), ("ModelArtifact", "acme-ma", model),
                              ("InferenceDeployment", "digits", model)):  # fmt: skip
        obj = wait_status(kube_api, namespace, kind, name, stalled_with(UNPROVEN), 60, f"{kind} refuses {named}")
        stalled[kind] = condition(obj, "Stalled")["message"]
        assert repr(named) in stalled[kind] and "slipway.dev/adopt-mlflow-names" in stalled[kind], stalled[kind]

    def counts() -> dict[str, Any]:
        versions = mlflow.search_model_versions(f"name='{model}'")
        owner = tag_filter("slipway.dev/trainingrun", f"{namespace}/acme-train")
        runs = mlflow.search_runs([experiment_id], filter=owner)
        shown = (get_object(kube_api, namespace, "TrainingRun", "acme-train").get("status") or {}).get("mlflow") or {}
        pods = core.list_namespaced_pod(namespace, label_selector="slipway.dev/deployment").items
        return {"versions registered": len(versions) - 1, "runs adopted": int(shown.get("runId") == planted),
                "acme runs": len(runs) - 1, "pods serving t2's version": len(pods),
                "jobs": len(client.BatchV1Api(kube_api).list_namespaced_job(namespace).items),
                "aliases moved": sum(getattr(mlflow.get_version_by_alias(model, a), "version", None) != theirs
                                     for a in ("candidate", "production"))}  # fmt: skip

    before = counts()
    report(f"squatted {model} and {experiment}: {before}")
    assert before == {"versions registered": 0, "runs adopted": 0, "acme runs": 0, "pods serving t2's version": 0,
                      "jobs": 0, "aliases moved": 0}, before  # fmt: skip

    # The admin opts the experiment in (it was acme's after all): used and stamped, the planted run still not adopted.
    optin = {"slipway.dev/adopt-mlflow-names": experiment}
    core.patch_namespace(namespace, {"metadata": {"annotations": optin}})
    running = wait_status(kube_api, namespace, "TrainingRun", "acme-train",
                          lambda o: bool(((o.get("status") or {}).get("mlflow") or {}).get("runId")), 60,
                          "a run of its own in the opted-in experiment")  # fmt: skip
    own = running["status"]["mlflow"]["runId"]
    after = counts()
    report(f"experiment {experiment} opted in: trains in {own} (planted {planted}): {after}")
    assert own != planted and after["runs adopted"] == 0 and after["acme runs"] == 1
    assert PROOF_TAG in mlflow.get_run(own).tags
    assert after["versions registered"] == 0 and after["pods serving t2's version"] == 0
    still = wait_status(kube_api, namespace, "ModelArtifact", "acme-ma", stalled_with(UNPROVEN), 30, "still refused")
    assert repr(model) in condition(still, "Stalled")["message"]
