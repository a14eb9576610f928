"""What a training run costs (README, What it costs): every attempt counts, failed and preempted
ones included, priced from the operator's price file; the figure in status is what the pods' own
times and requests say, and the finished run carries it in MLflow."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.cost import Prices, record_attempts, reserved_by
from slipway.status.conditions import parse_time
from slipway_testing import apply_object, report, training_run, wait_status

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
    """A pod of the serving priority asking for GPUs: the scheduler preempts training for it."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker"},
        "spec": {"priorityClassName": "slipway-inference", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "localkube/none", "securityContext": RESTRICTED,
                                 "command": ["python", "-c", "import time; time.sleep(600)"],
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }  # fmt: skip


def test_a_runs_cost_counts_its_failed_and_preempted_attempts(
    kube_api, namespace, operator, mlflow, tmp_path, monkeypatch
):
    prices_path = tmp_path / "prices.yaml"
    prices_path.write_text(PRICE_FILE)
    monkeypatch.setenv("SLIPWAY_PRICES_FILE", str(prices_path))
    operator()
    core = client.CoreV1Api(kube_api)
    body = training_run("costly", steps=16, env={"SLIPWAY_STEP_SECONDS": "1", "SLIPWAY_FAIL_AT_STEP": "3",
                                                 "SLIPWAY_FAIL_EXIT_CODE": "137"},
                        resources={"gpus": 4, "cpu": "250m", "memory": "512Mi"}, checkpoint={"size": "1Gi"},
                        failurePolicy={"retryableExitCodes": [137, 143], "maxRestarts": 2})  # fmt: skip
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
    prices = Prices.parse(__import__("yaml").safe_load(PRICE_FILE))
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
    assert logged.tags["slipway.cost.currency"] == "USD"


def time_in_attempt(seen: dict[str, dict]) -> float:
    """Seconds the newest running training pod has run."""
    running = [p for p in seen.values() if p["status"].get("phase") == "Running" and "gone" not in p]
    starts = [parse_time(p["status"].get("startTime")) for p in running]
    return max(((datetime.now(UTC) - s).total_seconds() for s in starts if s), default=0.0)
