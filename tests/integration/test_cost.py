"""What a training run costs (README, What it costs): every attempt counts, failed and preempted
ones included, priced from the operator's price file; the figure in status is what the pods' own
times and requests say, and the finished run carries it in MLflow."""

from __future__ import annotations

import copy
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client

from localkube.kube import Kube
from localkube.wait import wait_for
from slipway.cost import reserved_by
from slipway.inference.providers.prometheus_queries import REVISION_LABEL, TRACK_LABEL
from slipway.mlflow import MlflowClient
from slipway.prices import Prices
from slipway.status.conditions import parse_time
from slipway.training.attempts import record_attempts
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import PREEMPTING, apply_object, report, training_run, wait_status

pytestmark = pytest.mark.cluster

PRICE_FILE = """\
currency: USD
gpuHour: {default: 2.0, NVIDIA-A100-SXM4-80GB: 3.6}
cpuHour: 0.05
memoryGiBHour: 0.01
"""
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65534, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip


def blocker(gpus: int) -> dict:
    """A pod of a preempting serving class (the admin's opt-in, PREEMPTING) asking for GPUs: the
    scheduler preempts training for it."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker"},
        "spec": {"priorityClassName": PREEMPTING["metadata"]["name"], "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "localkube/none", "securityContext": RESTRICTED,
                                 "command": ["python", "-c", "import time; time.sleep(600)"],
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }  # fmt: skip


def test_a_runs_cost_counts_its_failed_and_preempted_attempts(
    cluster, kube_api, namespace, operator, mlflow, tmp_path, monkeypatch, node_gpus
):
    prices_path = tmp_path / "prices.yaml"
    prices_path.write_text(PRICE_FILE)
    monkeypatch.setenv("SLIPWAY_PRICES_FILE", str(prices_path))
    operator()
    core = client.CoreV1Api(kube_api)
    body = training_run("costly", steps=16, env={"SLIPWAY_STEP_SECONDS": "1", "SLIPWAY_FAIL_AT_STEP": "3",
                                                 "SLIPWAY_FAIL_EXIT_CODE": "137"},
                        resources={"gpus": 4, "cpu": "250m", "memory": "512Mi"}, checkpoint={"size": "1Gi"},
                        failurePolicy={"retryableExitCodes": [137, 143], "maxRestarts": 2},
                        artifact={"quantization": {"method": "int8-dynamic"},
                                  "validation": {"gates": [{"metric": "accuracy", "min": 0.5}]}})  # fmt: skip
    apply_object(kube_api, namespace, body)
    seen: dict[str, dict] = {}  # every training pod as last seen by this test, and when it was found gone

    def look() -> list[dict]:
        pods = core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name=costly-train")
        now = datetime.now(UTC)
        current = {p.metadata.name: kube_api.sanitize_for_serialization(p) for p in pods.items}
        for name, pod in current.items():
            seen[name] = pod
        for name, pod in seen.items():
            if name not in current and "gone" not in pod:
                pod["gone"] = now
        return list(current.values())

    def running_again() -> bool:
        pods = look()
        failed = [p for p in pods if p["status"].get("phase") == "Failed"]
        return bool(failed) and any(p["status"].get("phase") == "Running" for p in pods)

    wait_for(running_again, 120, "the first attempt failed (exit 137) and the second runs", interval=0.3)
    wait_for(lambda: look() and time_in_attempt(seen) >= 4, 60, "the second attempt 4 s in", interval=0.3)
    Kube(cluster.kubeconfig).ensure("/apis/scheduling.k8s.io/v1/priorityclasses", PREEMPTING)
    core.create_namespaced_pod(namespace, blocker(1))

    def preempted() -> bool:
        look()
        return any(p["metadata"].get("deletionTimestamp") or "gone" in p for p in seen.values())

    wait_for(preempted, 60, "the second attempt preempted", interval=0.3)
    wait_for(lambda: any(p["status"].get("phase") == "Pending" for p in look()), 60, "a third attempt waits")
    core.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)

    def finished(obj: dict) -> bool:
        look()
        return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    run = wait_status(kube_api, namespace, "TrainingRun", "costly", finished, 240, "the run finished")
    look()
    status = run["status"]
    assert status["phase"] == "Succeeded", status
    spent = status["cost"]
    # The recomputation: the pods' own start and end times (a pod found gone ends then), requests
    # and the node's GPU product, priced by the same table.
    prices = Prices.parse(yaml.safe_load(PRICE_FILE))
    product = core.read_node("slipway-local").metadata.labels["nvidia.com/gpu.product"]
    total = wasted = 0.0
    outcomes, seconds = [], []
    for pod in sorted(seen.values(), key=lambda p: p["status"].get("startTime") or ""):
        [attempt] = record_attempts([], [pod], pod.get("gone") or datetime.now(UTC), {"slipway-local": product})
        start, end = parse_time(attempt["startTime"]), parse_time(attempt.get("endTime")) or pod.get("gone")
        cost = (end - start).total_seconds() / 3600 * prices.hourly(reserved_by(pod, product))
        total += cost
        wasted += cost if attempt["outcome"] != "Succeeded" else 0.0
        outcomes.append(attempt["outcome"])
        seconds.append(f"{attempt['outcome']} {(end - start).total_seconds():.0f} s")
    report(f"\ncost of a run with 3 attempts ({', '.join(seconds)}): status {spent['total']:.6f} "
           f"{spent['currency']}, recomputed {total:.6f}; wasted share {spent['wastedShare']:.3f} "
           f"(recomputed {wasted / total:.3f}); {spent['gpuHours'] * 3600:.0f} GPU-seconds")  # fmt: skip
    assert [a["outcome"] for a in spent["attempts"]] == ["Failed", "Preempted", "Succeeded"], spent
    assert outcomes[0] == "Failed" and outcomes[-1] == "Succeeded" and len(outcomes) == 3
    assert spent["total"] == pytest.approx(total, rel=0.01)
    assert spent["wastedShare"] == pytest.approx(wasted / total, abs=0.01) and spent["wastedShare"] > 0
    assert spent["currency"] == "USD" and spent["summary"] == f"{spent['total']:.2f} USD"
    assert all(a["gpuProduct"] == product and a["gpus"] == 4 for a in spent["attempts"])
    logged = mlflow.get_run(status["mlflow"]["runId"])
    assert logged.metrics["slipway.cost.total"].value == pytest.approx(spent["total"])
    assert logged.metrics["slipway.cost.wastedShare"].value == pytest.approx(spent["wastedShare"])
    assert logged.tags["slipway.dev/cost-currency"] == "USD"
    # The version it made carries its lineage: training (every attempt), quantization, validation.
    artifact = wait_status(kube_api, namespace, "ModelArtifact", "costly",
                           lambda o: (o.get("status") or {}).get("phase") in ("Validated", "Rejected"), 180,
                           "the artifact decided")["status"]  # fmt: skip
    lineage = artifact["cost"]
    version = mlflow.get_model_version(body["spec"]["model"]["name"], artifact["quantizedVersion"])
    report(f"lineage of version {version.version}: {lineage}")
    assert lineage["training"] == pytest.approx(spent["total"]) and "message" not in lineage, lineage
    assert lineage["quantization"] > 0 and lineage["validation"] > 0
    assert lineage["total"] == pytest.approx(lineage["training"] + lineage["quantization"] + lineage["validation"])
    assert float(version.tags["slipway.dev/cost-lineage"]) == pytest.approx(lineage["total"])
    assert float(version.tags["slipway.dev/cost-training"]) == pytest.approx(spent["total"])


def time_in_attempt(seen: dict[str, dict]) -> float:
    """Seconds the newest running training pod has run."""
    running = [p for p in seen.values() if p["status"].get("phase") == "Running" and "gone" not in p]
    starts = [parse_time(p["status"].get("startTime")) for p in running]
    return max(((datetime.now(UTC) - s).total_seconds() for s in starts if s), default=0.0)


SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "inferencedeployment-llm-local.yaml"
# Equal canaries, none of which a cost gate may roll back: the first after the dear one's rollback, the
# second after a promotion (a stable fresh from promotion, priced from its first answer). The rule (the
# same pods at the same price are within 1.3 times) is a unit test (tests/unit/frame/test_cost.py).
TRIALS = 2


def query_at(prometheus: str, promql: str, when: datetime) -> float | None:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql, "time": when.timestamp()}, timeout=10)
    result = answer.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def llm_deployment(namespace: str, metrics: list[dict], interval: int = 5, failure_limit: int = 1) -> dict:
    """The local LLM sample on 2 replicas, one 50% step, analysed every ``interval`` on ``metrics``."""
    body = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    spec = body["spec"]
    spec["model"]["name"] = f"llm-{namespace}"
    spec["autoscaling"] = {"minReplicas": 2, "maxReplicas": 2}
    spec["rollout"]["steps"] = [{"weight": 50, "pause": "5s"}]
    spec["rollout"]["progressDeadlineSeconds"] = 120
    spec["rollout"]["analysis"] = {"preset": "vllm", "interval": f"{interval}s", "failureLimit": failure_limit,
                                   "metrics": metrics}  # fmt: skip
    return body


def serve_first_version(kube_api, namespace: str, cluster, trained: str, body: dict) -> str:
    """Register the trained model as version 1 under the deployment's model, alias it, apply the
    deployment and wait until it serves it; that version."""
    model, name = body["spec"]["model"]["name"], body["metadata"]["name"]
    with MlflowClient(cluster.mlflow_url) as registry:
        digest = registry.get_run(trained).tags["slipway.dev/model-digest"]
        registry.get_or_create_registered_model(model)
        tags = {"slipway.dev/digest": digest}
        v1 = registry.create_model_version(model, f"runs:/{trained}/model", trained, tags).version
        registry.set_alias(model, "candidate", v1)
    apply_object(kube_api, namespace, body)
    serving = f"{model} version {v1} served"
    wait_status(kube_api, namespace, "InferenceDeployment", name,
                lambda o: (o.get("status") or {}).get("phase") == "Promoted", 180, serving)  # fmt: skip
    return str(v1)


def test_a_canary_that_makes_each_token_dearer_is_rolled_back_and_equal_ones_are_promoted(
    kube_api, namespace, operator, cluster, trained, tmp_path, monkeypatch, node_gpus
):
    prices_path = tmp_path / "prices.yaml"
    prices_path.write_text(PRICE_FILE)
    monkeypatch.setenv("SLIPWAY_PRICES_FILE", str(prices_path))
    operator()
    core = client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    # Two measurements over 1.3 times are tolerated: on a loaded machine one scrape of an equal canary
    # measured 1.3 times the stable's cost per 1k requests (CI); the dear canary fails every one.
    interval, failure_limit = 5, 2
    body = llm_deployment(namespace, [{"name": "costPerMillionTokens", "maxRelativeToStable": 1.3},
                                      {"name": "costPer1kRequests", "maxRelativeToStable": 1.3},
                                      {"name": "errorRate", "max": 0.05}], interval, failure_limit)  # fmt: skip
    spec = body["spec"]
    spec["resources"] = {"gpus": 1}
    model, name = spec["model"]["name"], body["metadata"]["name"]
    v1 = serve_first_version(kube_api, namespace, cluster, trained, body)
    with MlflowClient(cluster.mlflow_url) as registry:

        def change(**fields: object) -> int:
            patched = custom.patch_namespaced_custom_object("slipway.dev", "v1alpha1", namespace,
                                                            "inferencedeployments", name, {"spec": fields})  # fmt: skip
            return int(patched["metadata"]["generation"])

        def decided(generation: int, stable_revision: str, rollback_time: str):
            def check(obj: dict) -> str | None:
                status = obj.get("status") or {}
                if int(status.get("observedGeneration") or 0) < generation:
                    return None
                last_rollback = status.get("lastRollback") or {}
                if last_rollback.get("time", "") > rollback_time:
                    return f"RolledBack ({last_rollback.get('reason')}: {last_rollback.get('metric')})"
                moved = (status.get("stable") or {}).get("revision") != stable_revision
                return "Promoted" if status.get("phase") == "Promoted" and moved else None

            return check

        def canary_ready(obj: dict) -> bool:
            status = obj.get("status") or {}
            canary = status.get("canary") or {}
            return bool(canary.get("readyReplicas")) and canary.get("revision") != status["stable"]["revision"]

        completion = {"model": model, "prompt": "count to four", "max_tokens": 4}
        with LoadDriver.for_service(kube_api, namespace, name, rate=20, path="/v1/completions", body=completion,
                                    max_duration=900) as load:  # fmt: skip
            wait_for(lambda: load.stats().responses >= 40, 60, "40 completions")
            # Two GPUs per replica where the stable has one: the same answers at twice the price.
            change(resources={"gpus": 2})
            wait_status(kube_api, namespace, "InferenceDeployment", name, canary_ready, 120, "the dear canary ready")
            ready = time.monotonic()
            rolled = wait_status(kube_api, namespace, "InferenceDeployment", name,
                                 lambda o: (o["status"].get("lastRollback") or {}).get("reason") == "AnalysisFailed",
                                 120, "the dear canary rolled back")  # fmt: skip
            took = time.monotonic() - ready
            status = rolled["status"]
            rollback = status["lastRollback"]
            dear = {a["metric"]: a for a in status["analysis"]}
            # Equal canaries (one GPU, a new revision each): promoted, never rolled back on cost.
            outcomes: list[str] = []
            last = rolled
            for trial in range(TRIALS):
                generation = change(resources={"gpus": 1}, env=[*spec["env"], {"name": "TRIAL", "value": str(trial)}])
                previous = last["status"]
                check = decided(generation, previous["stable"]["revision"], previous["lastRollback"]["time"])
                last = wait_status(kube_api, namespace, "InferenceDeployment", name,
                                   lambda o, c=check: c(o) is not None, 180, f"equal canary {trial + 1}")  # fmt: skip
                outcomes.append(str(check(last)))
            stats = load.stats()
        final = last["status"]
        tags = registry.get_model_version(model, v1).tags
    stable_cost = final["stable"].get("cost")
    gate = dear[rollback["metric"]]
    report(f"\ncost gate: a canary on 2 GPUs per replica (stable 1) rolled back {took:.1f} s after it was ready "
           f"(bound {interval * (failure_limit + 1) + 15} s): {gate['message']}; {TRIALS} equal canaries: "
           f"{outcomes}; the stable's serving cost {stable_cost}; completions {stats.by_code}")  # fmt: skip
    assert rollback["metric"] in ("costPerMillionTokens", "costPer1kRequests"), rollback
    assert took <= interval * (failure_limit + 1) + 15, took
    assert outcomes == ["Promoted"] * TRIALS, outcomes
    # The canary's figure is the price of one of its pods per hour over the tokens a pod generated per
    # second, as Prometheus answers the same query at the analysis time (±5%).
    pods = core.list_namespaced_pod(namespace, label_selector="slipway.dev/track=stable").items
    one_gpu = Prices.parse(yaml.safe_load(PRICE_FILE)).hourly(
        reserved_by(kube_api.sanitize_for_serialization(pods[0]), "NVIDIA-A100-SXM4-80GB"))  # fmt: skip
    two_gpus = one_gpu + 3.6  # the same pod with one GPU more
    token_gate = dear["costPerMillionTokens"]
    hourly_text, per_pod_query = token_gate["query"].split("/h / (", 1)
    assert float(hourly_text) == pytest.approx(two_gpus, rel=0.01)
    tokens = query_at(cluster.prometheus_url, per_pod_query[:-1], parse_time(token_gate["time"]))
    assert tokens and token_gate["value"] == pytest.approx(two_gpus / (tokens * 3600) * 1e6, rel=0.05)
    request_gate = dear["costPer1kRequests"]
    per_pod_requests = request_gate["query"].split("/h / (", 1)[1][:-1]
    answered = query_at(cluster.prometheus_url, per_pod_requests, parse_time(request_gate["time"]))
    assert answered and request_gate["value"] == pytest.approx(two_gpus / (answered * 3600) * 1e3, rel=0.05)
    # The stable's figures at the same analysis: its own pods' price and the same query on its series.
    shown = status["stable"]["cost"]
    canary_labels = rf'{TRACK_LABEL}="canary", {REVISION_LABEL}="[^"]*"'
    stable_labels = f'{TRACK_LABEL}="stable", {REVISION_LABEL}="{status["stable"]["revision"]}"'
    recomputed = {}
    for key, query, unit in (("requestsPerPodSecond", per_pod_requests, 1e3),
                             ("tokensPerPodSecond", per_pod_query[:-1], 1e6)):  # fmt: skip
        rate = query_at(cluster.prometheus_url, re.sub(canary_labels, stable_labels, query), parse_time(shown["time"]))
        assert rate and shown[key] == pytest.approx(rate, rel=0.05), (key, shown, rate)
        recomputed[key] = one_gpu / (rate * 3600) * unit
    assert shown["per1kRequests"] == pytest.approx(recomputed["requestsPerPodSecond"], rel=0.05)
    assert shown["perMillionTokens"] == pytest.approx(recomputed["tokensPerPodSecond"], rel=0.05)
    report(f"at the rollback: canary {request_gate['value']:.4g} USD per 1K requests (recomputed "
           f"{two_gpus / (answered * 3600) * 1e3:.4g}), {token_gate['value']:.4g} per 1M tokens (recomputed "
           f"{two_gpus / (tokens * 3600) * 1e6:.4g}); stable {shown['per1kRequests']:.4g} per 1K (recomputed "
           f"{recomputed['requestsPerPodSecond']:.4g}), {shown['perMillionTokens']:.4g} per 1M (recomputed "
           f"{recomputed['tokensPerPodSecond']:.4g})")  # fmt: skip
    assert stable_cost and stable_cost["currency"] == "USD" and stable_cost["perHour"] in (
        pytest.approx(one_gpu, rel=0.01), pytest.approx(2 * one_gpu, rel=0.01))  # fmt: skip
    assert stable_cost["per1kRequests"] > 0 and stable_cost["perMillionTokens"] > 0
    # The version promoted (v1 under a new revision) carries what it cost to serve.
    assert float(tags["slipway.dev/cost-per-million-tokens"]) > 0 and tags["slipway.dev/cost-currency"] == "USD"
    assert stats.share(lambda c: c >= 500) < 0.01, stats.by_code


def test_without_a_price_a_cost_gate_holds_the_canary_and_says_which_price_is_missing(
    kube_api, namespace, operator, cluster, trained, monkeypatch
):
    monkeypatch.delenv("SLIPWAY_PRICES_FILE", raising=False)
    operator()
    custom = client.CustomObjectsApi(kube_api)
    body = llm_deployment(namespace, [{"name": "costPerMillionTokens", "maxRelativeToStable": 1.3}])
    spec = body["spec"]
    model, name = spec["model"]["name"], body["metadata"]["name"]
    v1 = serve_first_version(kube_api, namespace, cluster, trained, body)
    completion = {"model": model, "prompt": "count to four", "max_tokens": 4}
    with LoadDriver.for_service(kube_api, namespace, name, rate=20, path="/v1/completions", body=completion,
                                max_duration=300) as load:  # fmt: skip
        wait_for(lambda: load.stats().responses >= 40, 60, "40 completions")
        env = [*spec["env"], {"name": "TRIAL", "value": "1"}]
        custom.patch_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "inferencedeployments", name,
                                              {"spec": {"env": env}})  # fmt: skip
        seen: set[str] = set()

        def held_three_times(obj: dict) -> bool:
            status = obj.get("status") or {}
            assert status.get("phase") != "Promoted" or not seen, "promoted without a price"
            for result in status.get("analysis") or []:
                if result["metric"] == "costPerMillionTokens" and result["result"] == "Inconclusive":
                    seen.add(result["time"])
            return len(seen) >= 3

        held = wait_status(kube_api, namespace, "InferenceDeployment", name, held_three_times, 120,
                           "three inconclusive cost analyses")["status"]  # fmt: skip
    [result] = [r for r in held["analysis"] if r["metric"] == "costPerMillionTokens"]
    ready = next(c for c in held["conditions"] if c["type"] == "Progressing")
    report(f"\nno price: {held['phase']} after {len(seen)} analyses: {result['message']}")
    assert held["phase"] == "Paused" and held["stable"]["modelVersion"] == v1 and not held.get("lastRollback")
    assert "no price configured" in result["message"] and "--prices-file" in result["message"]
    assert ready["reason"] == "AnalysisInconclusive" and "never promoting blind" in ready["message"]
    assert held["canary"]["cost"]["message"].startswith("no price configured")
