"""An LLM rollout on the local cluster (samples/inferencedeployment-llm-local.yaml): the reference
server in its OpenAI-compatible mode, its model fetched by spec.modelLoad, analysed through the
``vllm`` preset on the vLLM-named series Prometheus scraped from it. A canary whose first token
is 3x slower than the stable's fails ttftP95Seconds (maxRelativeToStable) and is rolled back."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e import dashboard, monitoring
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, report, wait_status

pytestmark = pytest.mark.cluster

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "inferencedeployment-llm-local.yaml"


def test_slow_first_token_canary_is_rolled_back_by_the_vllm_preset(kube_api, namespace, operator, cluster, trained):
    operator()
    began = time.time()
    model = f"llm-{namespace}"
    run_id = trained
    body = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    body["spec"]["model"]["name"] = model
    body["spec"]["autoscaling"] = {"minReplicas": 2, "maxReplicas": 2}
    body["spec"]["rollout"]["steps"] = [{"weight": 25, "pause": "15s"}, {"weight": 50, "pause": "15s"}]
    body["spec"]["rollout"]["progressDeadlineSeconds"] = 90
    with MlflowClient(cluster.mlflow_url) as mlflow:
        digest = mlflow.get_run(run_id).tags["slipway.dev/model-digest"]

        def publish(**faults: str) -> str:
            tags = {"slipway.dev/digest": digest, **{f"slipway.dev/fault-{k}": v for k, v in faults.items()}}
            version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, tags).version
            mlflow.set_alias(model, "candidate", version)
            return version

        mlflow.get_or_create_registered_model(model)
        v1 = publish()
        apply_object(kube_api, namespace, body)

        def promoted(obj) -> bool:
            status = obj.get("status") or {}
            return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == v1

        wait_status(kube_api, namespace, "InferenceDeployment", "digits-llm", promoted, 180, "v1 serving")
        completion = {"model": model, "prompt": "count to four", "max_tokens": 4}
        with LoadDriver.for_service(
            kube_api, namespace, "digits-llm", rate=20, path="/v1/completions", body=completion, max_duration=400
        ) as load:
            wait_for(lambda: load.stats().responses >= 40, 60, "40 completions")
            v2 = publish(firstTokenDelaySeconds="0.03")

            def rolled_back(obj) -> bool:
                return ((obj.get("status") or {}).get("lastRollback") or {}).get("modelVersion") == v2

            idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits-llm", rolled_back, 180, "rollback")
            stats = load.stats()
    rollback = idep["status"]["lastRollback"]
    assert rollback["reason"] == "AnalysisFailed" and rollback["metric"] == "ttftP95Seconds", rollback
    assert idep["status"]["stable"]["modelVersion"] == v1
    ttft = next(a for a in idep["status"]["analysis"] if a["metric"] == "ttftP95Seconds")
    assert ttft["result"] == "Failed" and "vllm:time_to_first_token_seconds" in ttft["query"]
    # A request that reaches a canary pod as it shuts down may get its 503; nothing else fails.
    assert stats.by_code.get(200, 0) > 0 and stats.share(lambda c: c >= 500) < 0.01, stats.by_code
    assert stats.by_code.get(500, 0) == 0, stats.by_code
    # The dashboard's vllm row shows this deployment's tracks (its other rows read the operator's own
    # series: this operator runs in the test's process, unscraped).
    values = {"namespace": namespace, "name": "digits-llm"}
    row = [dashboard.PRESET_ROWS["vllm"]]
    shown = monitoring.panel_series(cluster.prometheus_url, row, values, began, time.time())
    report(
        f"\nLLM canary (vllm preset, real scraped series): TTFT p95 {ttft['value']:.4f}s, threshold "
        f"{ttft['threshold']}; rolled back; completions {stats.by_code}; dashboard panels "
        f"({values}):\n{monitoring.report_panels(shown)}"
    )
    assert all(shown.values()), shown
