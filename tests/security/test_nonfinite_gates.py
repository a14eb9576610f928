"""A tenant's own evaluator logs ``accuracy`` and ``loss`` as NaN, and another as +Infinity and
-Infinity (the values that would clear ``min`` and ``max``), through the real MLflow, as MLflow's own
client sends them (its LogMetric message as JSON: ``"value": "NaN"``; the SQL store then keeps
Infinity as the largest double). A comparison with NaN is false either way, so unchecked every gate
passed and ``production`` moved. Each is Rejected, naming the non-finite value; no alias moves and
no version is tagged ``slipway.dev/validation=passed``. An evaluator logging finite values that
pass, the same gates, is Validated and moves its alias (the guard is what refused)."""

from __future__ import annotations

import math

import pytest

from slipway.mlflow import MlflowClient, model_version_filter, tag_filter
from slipway_testing import condition, create_as, model_artifact, phase_in, report, wait_status

pytestmark = pytest.mark.cluster

# The tenant's evaluator: logs accuracy = argv[1] and loss = argv[2] to its validation run, with the
# request body MLflow's client sends (mlflow.utils.proto_json_utils.message_to_json of LogMetric):
# JSON has no NaN nor Infinity, protobuf's JSON spells them "NaN", "Infinity" and "-Infinity".
EVALUATE = """
import base64, json, os, sys, time, urllib.request
url = os.environ["MLFLOW_TRACKING_URI"].rstrip("/") + "/api/2.0/mlflow/runs/log-metric"
headers = {"Content-Type": "application/json"}
if os.environ.get("MLFLOW_TRACKING_TOKEN"):
    headers["Authorization"] = "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"]
elif os.environ.get("MLFLOW_TRACKING_USERNAME"):
    pair = os.environ["MLFLOW_TRACKING_USERNAME"] + ":" + os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
    headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
for key, value in (("accuracy", sys.argv[1]), ("loss", sys.argv[2])):
    spelled = value if value in ("NaN", "Infinity", "-Infinity") else float(value)
    body = {"key": key, "value": spelled, "timestamp": int(time.time() * 1000), "step": 0,
            "run_id": os.environ["MLFLOW_RUN_ID"]}
    urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), headers), timeout=30).read()
    print("logged", json.dumps(body))
"""
GATES = [{"metric": "accuracy", "min": 0.85}, {"metric": "loss", "max": 0.5}]
LOGGED = {"nan": ("NaN", "NaN"), "inf": ("Infinity", "-Infinity"), "finite": ("0.9", "0.1")}
READS = {"NaN": "NaN (not a number)", "Infinity": "Infinity", "-Infinity": "-Infinity"}


def logged_metrics(mlflow: MlflowClient, model: str) -> dict[str, float]:
    """What MLflow kept of the evaluator's metrics, read from its validation run."""
    experiment = mlflow.get_or_create_experiment(model)
    (run,) = mlflow.search_runs([experiment], filter=tag_filter("slipway.dev/role", "validate"))
    return {key: metric.value for key, metric in run.metrics.items()}


def test_an_evaluator_logging_nan_or_infinity_is_rejected_and_moves_no_alias(
    kube_api, namespace, operator, mlflow, trained, tenant
):
    operator()
    models = {name: f"{name}-{namespace}" for name in LOGGED}
    for name, (accuracy, loss) in LOGGED.items():
        validation = {"command": ["python", "-c", EVALUATE], "args": [accuracy, loss], "gates": GATES}
        create_as(tenant, namespace, model_artifact(name, models[name], {"mlflowRun": {"runId": trained}},
                                                    validation=validation, aliases=["production"]))  # fmt: skip
    decided = {name: wait_status(kube_api, namespace, "ModelArtifact", name, phase_in("Validated", "Rejected",
                                 "Failed"), 180, f"{name}: a decision") for name in LOGGED}  # fmt: skip

    # Counted afterwards, from MLflow: aliases on each model, versions tagged passed, what was logged.
    aliases = {name: mlflow.get_registered_model(models[name]).aliases for name in LOGGED}
    versions = {name: mlflow.search_model_versions(model_version_filter(models[name])) for name in LOGGED}
    passed = {name: sum(v.tags.get("slipway.dev/validation") == "passed" for v in vs) for name, vs in versions.items()}
    kept = {name: logged_metrics(mlflow, models[name]) for name in LOGGED}
    report(
        "\nnon-finite gate values: "
        + "; ".join(
            f"{name}: logged accuracy {LOGGED[name][0]}, loss {LOGGED[name][1]} (MLflow kept {kept[name]}), phase "
            f"{decided[name]['status']['phase']}, aliases moved {len(aliases[name])}, versions tagged passed "
            f"{passed[name]} of {len(versions[name])}"
            for name in LOGGED
        )
    )
    assert math.isnan(kept["nan"]["accuracy"]) and math.isnan(kept["nan"]["loss"])  # the attack as staged
    assert kept["inf"]["accuracy"] > 1e308 and kept["inf"]["loss"] < -1e308
    for name in ("nan", "inf"):
        status = decided[name]["status"]
        assert status["phase"] == "Rejected", status
        stalled = condition(decided[name], "Stalled")
        assert stalled["reason"] == "GateFailed" and "no alias moved" in stalled["message"], stalled
        for gate, value in zip(status["gates"], LOGGED[name], strict=True):
            assert gate["passed"] is False and "value" not in gate, gate  # JSON has no NaN: the message says it
            assert gate["message"] == f"{gate['metric']} is {READS[value]}: a non-finite value never passes a gate"
        assert aliases[name] == {} and passed[name] == 0
        assert [v.tags.get("slipway.dev/validation") for v in versions[name]] == ["rejected"]
    # The guard is what refused: the same gates and evaluator, with finite values, validate and move production.
    assert decided["finite"]["status"]["phase"] == "Validated", decided["finite"]["status"]
    assert aliases["finite"] == {"production": decided["finite"]["status"]["modelVersion"]} and passed["finite"] == 1
