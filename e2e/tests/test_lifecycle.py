"""The whole lifecycle with the operator deployed from manifests/ (its own ServiceAccount and RBAC):
train, register, quantize, validate, canary, promote; the operator pod deleted mid-canary; a faulty
version rolled back. Readiness is checked with `kubectl wait --for=condition=Ready`, as CI and
GitOps tools would; every stage's duration is recorded."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, model_version_filter
from slipway_e2e import dashboard, monitoring
from slipway_e2e.deploy import NAMESPACE as SYSTEM
from slipway_e2e.deploy import (
    OPERATOR,
    admit_team,
    deploy_operator,
    kubectl,
    operator_pod,
    wait_operator_replaced,
)
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import report
from slipway_testing.samples import Stages, serving, training

# serial: the operator cluster-wide from manifests/, and the cluster Prometheus' rules reloaded
pytestmark = [pytest.mark.cluster, pytest.mark.serial]
GROUP, VERSION = "slipway.dev", "v1alpha1"


@pytest.fixture(scope="module")
def deployed_operator(cluster):
    """The operator from manifests/, running as a pod (scraped by Prometheus, with the monitoring
    kit's alert rules loaded); removed after the module."""
    start = time.monotonic()
    monitoring.load_kit_rules(cluster)
    deploy_operator(cluster)
    report(f"\noperator deployed from manifests/ in {time.monotonic() - start:.1f}s")
    yield
    kubectl(cluster, "-n", SYSTEM, "delete", "deployment", OPERATOR, "--wait=true", check=False)


def apply(cluster, namespace: str, body: dict[str, Any], tmp_path) -> None:
    path = tmp_path / f"{body['kind']}-{body['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    kubectl(cluster, "-n", namespace, "apply", "-f", str(path))


def wait_ready(cluster, namespace: str, resource: str, timeout: int) -> None:
    """kstatus through kubectl: the exit code is what CI scripts and GitOps health checks see."""
    wait_for(
        lambda: kubectl(cluster, "-n", namespace, "get", resource, check=False).returncode == 0,
        timeout,
        f"{resource} to exist",
    )
    result = kubectl(
        cluster,
        "-n",
        namespace,
        "wait",
        "--for=condition=Ready",
        resource,
        f"--timeout={timeout}s",
        check=False,
        timeout=timeout + 30,
    )
    assert result.returncode == 0, f"kubectl wait {resource}: {result.stderr}"


def status(kube_api, namespace: str, plural: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    return obj.get("status") or {}


def test_lifecycle_survives_operator_pod_deletion(cluster, kube_api, namespace, deployed_operator, tmp_path):
    model = f"digits-{namespace}"
    admit_team(kube_api, namespace, model)  # manifests/ runs in multi-tenant mode
    stages = Stages()
    began = time.time()
    apply(cluster, namespace, training("v1", model), tmp_path)
    apply(cluster, namespace, serving(model), tmp_path)
    wait_ready(cluster, namespace, "trainingrun/v1", 300)
    stages.mark("v1 trained")
    wait_ready(cluster, namespace, "modelartifact/v1", 300)
    stages.mark("v1 quantized and validated")
    wait_ready(cluster, namespace, "inferencedeployment/digits", 300)
    stages.mark("v1 serving in production")
    v1 = status(kube_api, namespace, "modelartifacts", "v1")["quantizedVersion"]
    assert status(kube_api, namespace, "inferencedeployments", "digits")["stable"]["modelVersion"] == v1

    with LoadDriver.for_service(kube_api, namespace, "digits", rate=20, max_duration=900):
        apply(cluster, namespace, training("v2", model), tmp_path)
        wait_for(
            lambda: status(kube_api, namespace, "inferencedeployments", "digits").get("phase") == "Analyzing",
            400,
            "the v2 canary under analysis",
        )
        stages.mark("v2 canary under analysis")
        old = operator_pod(cluster)
        assert old is not None
        client.CoreV1Api(kube_api).delete_namespaced_pod(old, SYSTEM)
        new = wait_operator_replaced(cluster, old)
        stages.mark(f"operator pod replaced ({new})")
        v2 = status(kube_api, namespace, "modelartifacts", "v2")["quantizedVersion"]
        wait_for(
            lambda: (
                (s := status(kube_api, namespace, "inferencedeployments", "digits")).get("phase") == "Promoted"
                and s["stable"]["modelVersion"] == v2
            ),
            300,
            "v2 promoted",
        )
        stages.mark("v2 promoted")
        wait_ready(cluster, namespace, "inferencedeployment/digits", 60)

        apply(cluster, namespace, training("v3", model, {"SLIPWAY_SERVE_FAULT_ERROR_RATE": "0.3"}), tmp_path)
        wait_ready(cluster, namespace, "modelartifact/v3", 300)
        v3 = status(kube_api, namespace, "modelartifacts", "v3")["quantizedVersion"]
        wait_for(
            lambda: (
                (status(kube_api, namespace, "inferencedeployments", "digits").get("lastRollback") or {}).get(
                    "modelVersion"
                )
                == v3
            ),
            300,
            "v3 rolled back",
        )
        stages.mark("v3 (30% errors) rolled back")

    jobs = client.BatchV1Api(kube_api).list_namespaced_job(namespace).items
    names = sorted(j.metadata.name for j in jobs)
    assert names == sorted(f"v{i}-{step}" for i in (1, 2, 3) for step in ("train", "quantize", "validate")), names
    with MlflowClient(cluster.mlflow_url) as mlflow:
        versions = mlflow.search_model_versions(model_version_filter(model))
        assert len(versions) == 6, [(v.version, v.tags.get("slipway.dev/role")) for v in versions]
        assert mlflow.get_version_by_alias(model, "production").version == v2
        assert mlflow.get_version_by_alias(model, "candidate").version == v3
        # The production version carries what it cost to make (its lineage: training, quantization,
        # validation, from the operator's price table) and to serve (its canary's last analysis).
        tags = mlflow.get_model_version(model, v2).tags
    parts = [float(tags[f"slipway.dev/cost-{part}"]) for part in ("training", "quantization", "validation")]
    assert all(p > 0 for p in parts), tags
    assert float(tags["slipway.dev/cost-lineage"]) == pytest.approx(sum(parts), abs=1e-6), tags
    assert float(tags["slipway.dev/cost-per-1k-requests"]) > 0 and tags["slipway.dev/cost-currency"] == "USD", tags
    idep = status(kube_api, namespace, "inferencedeployments", "digits")
    assert idep["phase"] == "RolledBack" and idep["stable"]["modelVersion"] == v2
    report("\nstage durations since the first apply:\n" + stages.report())
    check_monitoring(cluster, namespace, began, v2, v3)


def test_lifecycle_with_training_code_on_mlflows_own_client(cluster, kube_api, namespace, deployed_operator, tmp_path):
    """The same lifecycle when the training code is a plain MLflow 3 script (slipway.workloads.train_mlflow):
    it attaches to the operator's run with MLflow's client and logs its model with
    ``mlflow.onnx.log_model(name="model")``, a LoggedModel, leaving the run's artifacts empty. Slipway
    registers the LoggedModel (its model_id), quantizes and validates it, serves it, canaries the next
    version and rolls it back on its error rate."""
    model = f"digits-{namespace}"
    admit_team(kube_api, namespace, model)
    stages = Stages()
    apply(cluster, namespace, training("v1", model, trainer="train_mlflow"), tmp_path)
    apply(cluster, namespace, serving(model), tmp_path)
    wait_ready(cluster, namespace, "trainingrun/v1", 300)  # Ready: its ModelArtifact is Validated
    wait_ready(cluster, namespace, "modelartifact/v1", 60)
    stages.mark("v1 trained with MLflow's client, quantized, validated")
    wait_ready(cluster, namespace, "inferencedeployment/digits", 300)
    stages.mark("v1 serving in production")
    artifact = status(kube_api, namespace, "modelartifacts", "v1")
    v1 = artifact["quantizedVersion"]
    assert status(kube_api, namespace, "inferencedeployments", "digits")["stable"]["modelVersion"] == v1
    run_id = status(kube_api, namespace, "trainingruns", "v1")["mlflow"]["runId"]
    with MlflowClient(cluster.mlflow_url) as mlflow:
        run = mlflow.get_run(run_id)
        assert run.status == "FINISHED" and run.params["client"].startswith("mlflow 3."), run.params
        assert run.metrics["accuracy"].step == 12 and mlflow.list_artifacts(f"runs:/{run_id}") == []
        trained = mlflow.get_model_version(model, artifact["modelVersion"])
        assert trained.source.startswith("models:/m-") and trained.run_id == run_id, trained.source

    with LoadDriver.for_service(kube_api, namespace, "digits", rate=20, max_duration=600):
        faulty = training("v2", model, {"SLIPWAY_SERVE_FAULT_ERROR_RATE": "0.3"}, trainer="train_mlflow")
        apply(cluster, namespace, faulty, tmp_path)
        wait_ready(cluster, namespace, "modelartifact/v2", 300)
        stages.mark("v2 (30% errors) quantized and validated")
        v2 = status(kube_api, namespace, "modelartifacts", "v2")["quantizedVersion"]
        wait_for(
            lambda: (
                (status(kube_api, namespace, "inferencedeployments", "digits").get("lastRollback") or {}).get(
                    "modelVersion"
                )
                == v2
            ),
            300,
            "v2 rolled back",
        )
        stages.mark("v2 canaried and rolled back")
    idep = status(kube_api, namespace, "inferencedeployments", "digits")
    assert idep["phase"] == "RolledBack" and idep["stable"]["modelVersion"] == v1, idep
    with MlflowClient(cluster.mlflow_url) as mlflow:
        assert mlflow.get_version_by_alias(model, "production").version == v1  # type: ignore[union-attr]
    report("\nstage durations since the first apply (training code on MLflow's own client):\n" + stages.report())


def check_monitoring(cluster, namespace: str, began: float, stable_version: str, rolled_back: str) -> None:
    """The monitoring kit during this lifecycle: the rollback alert fires for this deployment,
    the per-object gauges name it, and every dashboard panel of a slipway-preset lifecycle has series."""
    url = cluster.prometheus_url
    assert {r["alert"] for g in monitoring.rule_groups() for r in g["rules"]} <= monitoring.rules_loaded(url)
    phase = f'slipway_inferencedeployment_phase{{namespace="{namespace}", name="digits", phase="RolledBack"}} == 1'
    try:
        wait_for(lambda: monitoring.query(url, phase), 60, "the operator's phase gauge of the rolled-back deployment")
    except TimeoutError as exc:
        targets = monitoring.query(url, 'up{job="slipway-operator"}')
        raise AssertionError(f"{exc}; operator scrape targets: {targets}") from exc
    served = f'slipway_inferencedeployment_track_info{{namespace="{namespace}", name="digits", track="stable"}}'
    assert [s for s in monitoring.query(url, served) if s["metric"].get("version") == stable_version], served
    firing = f'ALERTS{{alertname="SlipwayRollback", alertstate="firing", namespace="{namespace}", name="digits"}}'
    alert = wait_for(lambda: monitoring.query(url, firing), 60, "the SlipwayRollback alert firing for this deployment")
    assert (alert[0]["metric"]["reason"], alert[0]["metric"]["version"]) == ("AnalysisFailed", rolled_back), alert
    # Every panel but the other presets' serving rows has series for this namespace, its deployment
    # and its runs and artifacts selected as Grafana's variables select several (v1..v3, digits).
    rows = dashboard.rows_for(dashboard.load(), "slipway")
    values = {"namespace": namespace, "name": "(digits|v1|v2|v3)"}
    shown = monitoring.panel_series(url, rows, values, began, time.time())
    report(f"monitoring: SlipwayRollback fired; dashboard panels ({values}):\n{monitoring.report_panels(shown)}")
    assert all(shown.values()), f"dashboard panels without series during the lifecycle: {shown}"
