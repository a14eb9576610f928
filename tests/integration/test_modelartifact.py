"""ModelArtifact end to end on the local cluster with real MLflow: register, quantize, validate, decide."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient, model_version_filter
from slipway_testing import (
    apply_object,
    condition,
    get_object,
    model_artifact,
    phase_in,
    report,
    train_run,
    wait_status,
)

pytestmark = pytest.mark.cluster


GATES = [
    {"metric": "accuracy", "min": 0.8},
    {"metric": "accuracy", "maxRelativeDrop": 0.05, "baseline": "production"},
    {"metric": "latencyP95Seconds", "max": 0.5},
]


def versions_of(mlflow: MlflowClient, model: str, uid: str, role: str | None = None) -> list[Any]:
    tags = {"slipway.dev/uid": uid, **({"slipway.dev/role": role} if role else {})}
    return mlflow.search_model_versions(model_version_filter(model, tags))


def jobs_named(kube_api, namespace: str, name: str) -> list[Any]:
    return [j for j in client.BatchV1Api(kube_api).list_namespaced_job(namespace).items if j.metadata.name == name]


def test_training_run_artifact_is_quantized_validated_and_aliased(kube_api, namespace, operator, mlflow):
    operator()
    model = f"digits-{namespace}"
    body = {
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "TrainingRun",
        "metadata": {"name": "digits"},
        "spec": {
            "model": {"name": model},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": ["python", "-m", "slipway.workloads.train"],
            "args": ["--steps", "10"],
            "artifact": {"quantization": {"method": "int8-dynamic"}, "validation": {"gates": GATES}},
        },
    }
    apply_object(kube_api, namespace, body)
    wait_for(lambda: get_object(kube_api, namespace, "ModelArtifact", "digits"), 240, "the ModelArtifact")
    ma = wait_status(
        kube_api, namespace, "ModelArtifact", "digits", phase_in("Validated", "Rejected", "Failed"), 240, "a decision"
    )
    status = ma["status"]
    assert status["phase"] == "Validated", status
    for type_ in ("Ready", "Registered", "Quantized", "Validated"):
        assert condition(ma, type_)["status"] == "True", type_
    source = mlflow.get_model_version(model, status["modelVersion"])
    quantized = mlflow.get_model_version(model, status["quantizedVersion"])
    assert source.tags["slipway.dev/role"] == "source"
    assert quantized.tags["slipway.dev/parent-version"] == source.version
    assert quantized.tags["slipway.dev/quantization-method"] == "int8-dynamic"
    assert status["digest"].startswith("sha256:")
    fp32_size = int(mlflow.get_run(source.run_id).tags["slipway.dev/model-size-bytes"])
    ratio = status["sizeBytes"] / fp32_size
    assert ratio < 0.6, f"int8 {status['sizeBytes']} B vs fp32 {fp32_size} B"
    assert mlflow.get_version_by_alias(model, "candidate").version == quantized.version
    # Links to MLflow's UI: the version validated, and the quantize run its model came from.
    links = status["mlflow"]
    assert links["versionUrl"].endswith(f"/#/models/{model}/versions/{quantized.version}"), links
    assert links["runUrl"].endswith(f"/#/runs/{quantized.run_id}"), links
    gates = status["gates"]
    assert [g["metric"] for g in gates] == ["accuracy", "accuracy", "latencyP95Seconds"]
    assert all(g["passed"] for g in gates)
    assert gates[0]["value"] > 0.8 and gates[0]["threshold"] == ">= 0.8"
    assert "does not exist yet: passed by onMissingBaseline=pass" in gates[1]["message"]
    assert quantized.tags["slipway.dev/validation"] == "passed"
    report(
        f"\nint8/fp32 size ratio {ratio:.2f} ({status['sizeBytes']} / {fp32_size} B), "
        f"int8 accuracy {gates[0]['value']:.4f}"
    )


def test_gate_failure_rejects_and_moves_no_alias(kube_api, namespace, operator, mlflow, cluster):
    operator()
    model = f"digits-{namespace}"
    good = train_run(cluster.mlflow_url, model)
    apply_object(
        kube_api, namespace, model_artifact("good", model, {"mlflowRun": {"runId": good}}, aliases=["production"])
    )
    wait_status(kube_api, namespace, "ModelArtifact", "good", phase_in("Validated"), 180, "validated")
    production = mlflow.get_version_by_alias(model, "production").version
    bad = train_run(cluster.mlflow_url, model, bad=True)
    gates = [{"metric": "accuracy", "maxRelativeDrop": 0.05, "baseline": "production"}]
    apply_object(
        kube_api,
        namespace,
        model_artifact(
            "bad", model, {"mlflowRun": {"runId": bad}}, validation={"gates": gates}, aliases=["production"]
        ),
    )
    ma = wait_status(
        kube_api, namespace, "ModelArtifact", "bad", phase_in("Rejected", "Validated", "Failed"), 180, "a decision"
    )
    assert ma["status"]["phase"] == "Rejected"
    stalled = condition(ma, "Stalled")
    assert stalled["reason"] == "GateFailed"
    assert "gate accuracy failed" in stalled["message"] and "of production" in stalled["message"]
    (gate,) = ma["status"]["gates"]
    assert gate["passed"] is False and gate["baselineValue"] > gate["value"]
    assert mlflow.get_version_by_alias(model, "production").version == production
    impossible = [{"metric": "accuracy", "min": 0.9999}]
    apply_object(
        kube_api,
        namespace,
        model_artifact("strict", model, {"mlflowRun": {"runId": good}}, validation={"gates": impossible}),
    )
    ma = wait_status(kube_api, namespace, "ModelArtifact", "strict", phase_in("Rejected", "Validated"), 180, "decision")
    assert ma["status"]["phase"] == "Rejected"
    assert "below the minimum 0.9999" in condition(ma, "Stalled")["message"]
    assert mlflow.get_version_by_alias(model, "candidate") is None


def test_operator_killed_mid_quantization_leaves_one_job_and_one_version(
    kube_api, namespace, operator, mlflow, cluster
):
    op = operator()
    model = f"digits-{namespace}"
    run_id = train_run(cluster.mlflow_url, model)
    apply_object(
        kube_api,
        namespace,
        model_artifact("q", model, {"mlflowRun": {"runId": run_id}}, quantization={"method": "int8-static"}),
    )
    wait_status(kube_api, namespace, "ModelArtifact", "q", phase_in("Quantizing"), 120, "quantizing")
    op.restart()
    ma = wait_status(kube_api, namespace, "ModelArtifact", "q", phase_in("Validated", "Failed"), 180, "validated")
    assert ma["status"]["phase"] == "Validated"
    assert len(jobs_named(kube_api, namespace, "q-quantize")) == 1
    assert len(versions_of(mlflow, model, ma["metadata"]["uid"], "quantized")) == 1
    assert len(versions_of(mlflow, model, ma["metadata"]["uid"], "source")) == 1


def test_a_cost_gate_rejects_an_int8_version_that_is_not_cheaper_enough(
    kube_api, namespace, operator, mlflow, cluster, tmp_path, monkeypatch
):
    """costPerMillionPredictions (README, What it costs): the operator derives it from the
    evaluator's predictions per CPU-second and the price of a CPU-hour, records it on the version,
    and judges maxRelativeToBaseline against the baseline's throughput at the same prices."""
    cpu_hour = 0.05
    prices = tmp_path / "prices.yaml"
    prices.write_text(f"currency: USD\ncpuHour: {cpu_hour}\n")
    monkeypatch.setenv("SLIPWAY_PRICES_FILE", str(prices))
    operator()
    model = f"digits-{namespace}"
    run = train_run(cluster.mlflow_url, model)
    source = {"mlflowRun": {"runId": run}}
    cost_gate = {"metric": "costPerMillionPredictions", "max": 1000}
    apply_object(kube_api, namespace, model_artifact("fp32", model, source, validation={"gates": [cost_gate]},
                                                     aliases=["production"]))  # fmt: skip
    fp32 = wait_status(kube_api, namespace, "ModelArtifact", "fp32", phase_in("Validated", "Rejected", "Failed"), 180,
                       "the fp32 version decided")["status"]  # fmt: skip
    assert fp32["phase"] == "Validated", fp32
    production = mlflow.get_model_version(model, fp32["modelVersion"])
    throughput = float(production.tags["slipway.dev/metric-predictionsPerCpuSecond"])
    expected = cpu_hour / 3600 / throughput * 1e6
    recorded = float(production.tags["slipway.dev/metric-costPerMillionPredictions"])
    assert recorded == pytest.approx(expected, rel=1e-9) and fp32["gates"][0]["value"] == pytest.approx(expected)

    def int8(name: str, ratio: float) -> dict[str, Any]:
        gate = {"metric": "costPerMillionPredictions", "maxRelativeToBaseline": ratio, "baseline": "production"}
        apply_object(kube_api, namespace, model_artifact(name, model, source, quantization={"method": "int8-dynamic"},
                                                         validation={"gates": [gate]}))  # fmt: skip
        return wait_status(kube_api, namespace, "ModelArtifact", name, phase_in("Validated", "Rejected", "Failed"),
                           180, f"{name} decided")  # fmt: skip

    strict, lenient = int8("int8-strict", 0.1), int8("int8-lenient", 10)
    (gate,) = strict["status"]["gates"]
    version = mlflow.get_model_version(model, strict["status"]["quantizedVersion"])
    int8_expected = cpu_hour / 3600 / float(version.tags["slipway.dev/metric-predictionsPerCpuSecond"]) * 1e6
    assert gate["value"] == pytest.approx(int8_expected, rel=1e-9)
    assert gate["baselineValue"] == pytest.approx(expected, rel=1e-9)
    ratio = gate["value"] / gate["baselineValue"]
    assert strict["status"]["phase"] == "Rejected" and gate["passed"] is False, gate
    assert "more than 0.1 x" in gate["message"] and "of production (version" in gate["message"]
    assert "gate costPerMillionPredictions failed" in condition(strict, "Stalled")["message"]
    assert version.tags["slipway.dev/validation"] == "rejected"
    assert lenient["status"]["phase"] == "Validated", lenient["status"]
    assert mlflow.get_version_by_alias(model, "production").version == production.version
    report(f"\nfp32 {throughput:.0f} predictions per CPU-second: {expected:.3g} USD per million; int8 "
           f"{gate['value']:.3g} USD per million, {ratio:.2f} x fp32: rejected at maxRelativeToBaseline 0.1, "
           "validated at 10")  # fmt: skip
