"""What a tenant's own pods and URIs say is checked like a source: in multi-tenant mode the tenant's
quantize pod sets its run's tag ``slipway.dev/quantize-uri`` to another team's run, another team's
``models:/…@production``, an ``s3://`` URI and an encoded climb out of its own run; a source climbs
out of an allowed run with ``%2e%2e`` and its variants. Each is a Stalled condition naming the tag or
the field; no version is registered from any of them and no alias moves. The reference quantizer,
whose output is its own run's, goes on to a decision (the guard is what refused)."""

from __future__ import annotations

import pytest
from kubernetes import client

from slipway_testing import condition, create_as, model_artifact, report, stalled_with, wait_status

pytestmark = pytest.mark.cluster

# The tenant's quantizer: sets the tag to its first argument ({root}: its run's artifact location).
FORGE = """
import os, sys
from slipway.mlflow import MlflowClient
with MlflowClient.from_env() as mlflow:
    run = mlflow.get_run(os.environ["MLFLOW_RUN_ID"])
    mlflow.set_tags(run.run_id, {"slipway.dev/quantize-uri": sys.argv[1].replace("{root}", run.artifact_uri)})
"""


def test_a_quantizers_forged_output_and_encoded_climbs_register_nothing(
    kube_api, namespace, operator, mlflow, trained, tenant, monkeypatch
):
    acme = f"acme-{namespace}"  # another team's model, with its production alias
    mlflow.get_or_create_registered_model(acme)
    production = mlflow.create_model_version(acme, f"runs:/{trained}/model", trained).version
    mlflow.set_alias(acme, "production", production)
    acme_experiment = mlflow.get_run(trained).experiment_id
    own = f"t3-{namespace}"  # the tenant's: a base version of its own and a run in its own experiment
    mlflow.get_or_create_registered_model(f"{own}-base")
    base = mlflow.create_model_version(f"{own}-base", f"runs:/{trained}/model", trained).version
    own_run = mlflow.create_run(mlflow.get_or_create_experiment(f"{own}-exp")).run_id
    annotations = {"slipway.dev/allowed-models": f"{own}-*"}
    client.CoreV1Api(kube_api).patch_namespace(namespace, {"metadata": {"annotations": annotations}})
    monkeypatch.setenv("SLIPWAY_REQUIRE_MODEL_ALLOWLIST", "true")
    operator()

    forged = {  # object name -> what the quantize pod writes in its tag
        "q-runs": f"runs:/{trained}/model",
        "q-alias": f"models:/{acme}@production",
        "q-s3": "s3://acme-models/fraud/model",
        "q-climb": f"{{root}}/%2e%2e/%2e%2e/%2e%2e/{acme_experiment}/{trained}/artifacts/model",
    }
    source = {"uri": f"models:/{own}-base/{base}"}
    for name, uri in forged.items():
        quantizer = {"method": "none", "command": ["python", "-c", FORGE], "args": [uri]}
        create_as(tenant, namespace, model_artifact(name, f"{own}-{name}", source, quantization=quantizer,
                                                    aliases=["production"]))  # fmt: skip
    climb = f"runs:/{own_run}/%2e%2e/%2e%2e/%2e%2e/{acme_experiment}/{trained}/artifacts/model"
    climbs = {  # object name -> a source that reads as the tenant's own run
        "s-encoded": climb,
        "s-upper": climb.replace("%2e", "%2E"),
        "s-twice": climb.replace("%2e", "%252e"),
        "s-slash": f"runs:/{own_run}/model/..%2f..%2f..%2f..%2f{acme_experiment}/{trained}/artifacts/model",
        "s-half": f"runs:/{own_run}/%2e./%2e./%2e./{acme_experiment}/{trained}/artifacts/model",
        "s-backslash": f"runs:/{own_run}/model\\..\\..\\..\\{acme_experiment}\\{trained}\\artifacts\\model",
    }
    for name, uri in climbs.items():
        create_as(tenant, namespace, model_artifact(name, f"{own}-{name}", {"uri": uri}, aliases=["production"]))
    create_as(tenant, namespace, model_artifact("q-own", f"{own}-q-own", source, quantization={"method": "none"},
                                                aliases=["production"]))  # fmt: skip

    for name in climbs:
        obj = wait_status(kube_api, namespace, "ModelArtifact", name, stalled_with("SourceNotAllowed"), 60,
                          f"{name} refused")  # fmt: skip
        assert condition(obj, "Stalled")["message"].startswith("spec.source.uri: "), name
    for name in forged:
        obj = wait_status(kube_api, namespace, "ModelArtifact", name, stalled_with("SourceNotAllowed"), 180,
                          f"{name}'s quantizer output refused")  # fmt: skip
        message = condition(obj, "Stalled")["message"]
        run_id = message.split("of the quantize run ", 1)[1].split(" ", 1)[0]
        assert message.startswith(f"MLflow tag slipway.dev/quantize-uri of the quantize run {run_id} is "), message
        assert f"set the tag to runs:/{run_id}/<path>" in message and "nothing was registered" in message, message
        assert obj["status"]["phase"] == "Failed"
        assert condition(obj, "Quantized")["status"] == "False"
    # The guard is what refused: the reference quantizer's output, its own run's, is registered and decided.
    wait_status(kube_api, namespace, "ModelArtifact", "q-own", lambda o: condition(o, "Ready").get("status") == "True",
                180, "the reference quantizer's output validated")  # fmt: skip
    assert mlflow.get_version_by_alias(f"{own}-q-own", "production") is not None

    # Counted afterwards: versions registered from a forged output or a climb, aliases moved.
    registered = {name: mlflow.search_model_versions(f"name='{own}-{name}'") for name in [*forged, *climbs]}
    foreign = sum(1 for vs in registered.values() for v in vs if v.tags.get("slipway.dev/role") != "source")
    moved = sum(1 for name in registered if mlflow.get_version_by_alias(f"{own}-{name}", "production") is not None)
    report(
        f"\nforged outputs: {len(forged)} quantizer tags and {len(climbs)} encoded climbs refused; versions "
        f"registered from them {foreign} (source versions {sum(map(len, registered.values()))}), "
        f"aliases moved {moved}; acme's production still v{mlflow.get_version_by_alias(acme, 'production').version}"
    )
    for name in forged:  # the source version only (the operator registers it before quantizing)
        versions = mlflow.search_model_versions(f"name='{own}-{name}'")
        assert [v.tags.get("slipway.dev/role") for v in versions] == ["source"], name
        assert mlflow.get_version_by_alias(f"{own}-{name}", "production") is None, name
    for name in climbs:
        assert mlflow.search_model_versions(f"name='{own}-{name}'") == [], name
    from_acme = mlflow.search_model_versions(f"run_id='{trained}'")  # the base's run: acme's (and shared-tests')
    assert {v.tags.get("slipway.dev/role") for v in from_acme if v.name.startswith(f"{own}-q-")} == {"source"}
    assert mlflow.get_version_by_alias(acme, "production").version == production
    assert len(mlflow.search_model_versions(f"name='{acme}'")) == 1
