"""KEDA owns scaling (spec.autoscaling.mode External): a ScaledObject whose scaleTargetRef is the
InferenceDeployment scales it on vLLM's queue depth (``vllm:num_requests_waiting``, read from the
cluster's Prometheus by KEDA's Prometheus scaler), through the scale subresource; Slipway makes no
HPA and splits what KEDA writes between the tracks, canary included.

The reference server in its OpenAI-compatible mode generates 2 sequences at a time
(``SLIPWAY_MAX_NUM_SEQS``, vLLM's ``--max-num-seqs``) at 10 tokens/s; requests past those wait.
A trickle of 1 request/s runs the whole canary long (its analysis judges answers); a burst of 5
requests/s of 20 tokens (2 s each) wants 10 sequences: a queue builds on one stable and one canary
pod, KEDA scales the deployment from 1 to 3 mid-canary, and back to 1 once the load
stops. Promoted and idle, with minReplicaCount 0, it goes to zero pods; a version published then
is canaried beside one stable pod, never at zero."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import ERRORS, Versions, apply_object, deployment, patch_spec, pods_of, report, status_of

pytestmark = [pytest.mark.cluster]

KEDA_API = ("keda.sh", "v1alpha1")


def scaled_object(namespace: str, prometheus: str, min_replicas: int) -> dict[str, Any]:
    """KEDA's ScaledObject for queue depth, as docs/how-to/keda.md gives it (polling and windows
    shortened for a test)."""
    query = f'sum(vllm:num_requests_waiting{{namespace="{namespace}"}}) or vector(0)'
    behavior = {
        "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 2, "periodSeconds": 5}]},
        "scaleDown": {"stabilizationWindowSeconds": 20, "policies": [{"type": "Pods", "value": 2, "periodSeconds": 5}]},
    }
    return {
        "apiVersion": "/".join(KEDA_API),
        "kind": "ScaledObject",
        "metadata": {"name": "digits", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment", "name": "digits"},
            "minReplicaCount": min_replicas,
            "maxReplicaCount": 3,
            "pollingInterval": 2,
            "cooldownPeriod": 15,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
            "triggers": [{"type": "prometheus", "metadata": {"serverAddress": prometheus, "query": query,
                                                              "threshold": "2", "activationThreshold": "0"}}],
        },
    }  # fmt: skip


class Split:
    """The tracks' replicas and weight each time they change: (seconds, total, stable, canary, weight)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace, self.start = api, namespace, time.monotonic()
        self.seen: list[tuple[float, int, int, int, int]] = []

    def sample(self) -> dict[str, Any]:
        obj = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            "slipway.dev", "v1alpha1", self.namespace, "inferencedeployments", "digits"
        )
        status = obj.get("status") or {}
        stable, canary = status.get("stable") or {}, status.get("canary") or {}
        now = (obj["spec"].get("replicas", 1), stable.get("replicas", 0), canary.get("replicas", 0),
               canary.get("weight") or 0)  # fmt: skip
        if not self.seen or self.seen[-1][1:] != now:
            self.seen.append((round(time.monotonic() - self.start, 1), *now))
        return obj

    def until(self, done: Any, timeout: float, what: str) -> dict[str, Any]:
        last: list[dict[str, Any]] = []

        def check() -> dict[str, Any] | None:
            obj = self.sample()
            last[:] = [obj]
            return obj if done(obj) else None

        try:
            return wait_for(check, timeout, what, interval=1)  # type: ignore[no-any-return]
        except TimeoutError as e:
            status = (last[0].get("status") or {}) if last else {}
            shown = {k: status.get(k) for k in ("phase", "stable", "canary", "conditions", "analysis")}
            raise AssertionError(f"{e}\nspec.replicas {last[0]['spec'].get('replicas') if last else None}, "
                                 f"status {shown}\nsplits {self.seen}") from None  # fmt: skip


def test_keda_scales_on_queue_depth_mid_canary_and_to_zero_when_idle(
    kube_api, namespace, operator, mlflow, trained, cluster, keda, request
):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model, metrics=(ERRORS,), steps=[{"weight": 20, "pause": "5s"}],
                      progressDeadlineSeconds=180)  # fmt: skip
    spec = body["spec"]
    spec["replicas"] = 1
    spec["rollout"]["analysis"]["preset"] = "vllm"  # the error rate of the OpenAI-compatible server's own series
    spec["autoscaling"] = {"mode": "External", "minReplicas": 0, "maxReplicas": 3}
    spec["resources"] = {"cpu": "10m"}
    spec["env"] = [{"name": "SLIPWAY_SERVE_API", "value": "openai"},
                   {"name": "SLIPWAY_TOKENS_PER_SECOND", "value": "10"},
                   {"name": "SLIPWAY_MAX_NUM_SEQS", "value": "2"}]  # fmt: skip
    apply_object(kube_api, namespace, body)
    split = Split(kube_api, namespace)
    split.until(lambda o: (o.get("status") or {}).get("phase") == "Promoted", 180, f"version {v1} promoted")
    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(*KEDA_API, namespace, "scaledobjects",
                                           scaled_object(namespace, cluster.prometheus_url, 1))  # fmt: skip

    # A canary held at its step (paused) while the load builds a queue.
    patch_spec(kube_api, namespace, {"rollout": {"paused": True}})
    v2 = versions.publish()
    split.until(lambda o: ((o.get("status") or {}).get("canary") or {}).get("readyReplicas") == 1, 120,
                f"the canary of version {v2} serving beside one stable pod")  # fmt: skip

    def driver(rate: float) -> LoadDriver:
        return LoadDriver.for_service(kube_api, namespace, "digits", rate=rate, max_duration=600, concurrency=64,
                                      timeout=60, path="/v1/completions",
                                      body={"model": versions.model, "prompt": "queue", "max_tokens": 20})  # fmt: skip

    # A trickle the whole canary long (the analysis needs answers to judge it), and a burst of 5/s.
    trickle = driver(1).start()
    request.addfinalizer(trickle.stop)
    began = time.monotonic()
    with driver(5) as burst:
        grown = split.until(lambda o: ((o.get("status") or {}).get("stable") or {}).get("readyReplicas") == 3, 180,
                            "KEDA to scale the deployment to 3 on the queue, the canary still held")  # fmt: skip
        to_three = time.monotonic() - began
    answers = burst.stats()
    status = grown["status"]
    assert status["phase"] in ("Progressing", "Analyzing", "Paused"), status["phase"]
    assert status["canary"]["modelVersion"] == v2 and status["canary"]["readyReplicas"] == 1, status["canary"]
    assert grown["spec"]["replicas"] == 3

    # No HPA of Slipway's: KEDA's own is the only one, and it targets the InferenceDeployment.
    hpas = client.AutoscalingV2Api(kube_api).list_namespaced_horizontal_pod_autoscaler(namespace).items
    assert [h.metadata.name for h in hpas] == ["keda-hpa-digits"], [h.metadata.name for h in hpas]
    assert hpas[0].spec.scale_target_ref.kind == "InferenceDeployment"

    # The burst gone, the queue empties and KEDA brings it back to its minimum, 1.
    back = split.until(lambda o: o["spec"].get("replicas") == 1 and
                       ((o.get("status") or {}).get("stable") or {}).get("replicas") == 1, 120,
                       "back to 1 replica after the load")  # fmt: skip
    assert back["status"]["canary"]["modelVersion"] == v2

    # The canary goes on and is promoted; then, idle with minReplicaCount 0, no pod at all.
    patch_spec(kube_api, namespace, {"rollout": {"paused": False}})
    try:
        split.until(lambda o: (o.get("status") or {}).get("phase") == "Promoted"
                    and ((o.get("status") or {}).get("stable") or {}).get("modelVersion") == v2, 180,
                    f"version {v2} promoted")  # fmt: skip
    finally:
        trickle.stop()
    custom.patch_namespaced_custom_object(*KEDA_API, namespace, "scaledobjects", "digits",
                                          {"spec": {"minReplicaCount": 0}})  # fmt: skip
    split.until(lambda o: o["spec"].get("replicas") == 0 and not pods_of(kube_api, namespace, "stable"), 120,
                "KEDA to scale the idle deployment to zero pods")  # fmt: skip

    # At zero, a new version is canaried beside one stable pod, not at zero.
    v3 = versions.publish()
    at_zero = split.until(lambda o: ((o.get("status") or {}).get("canary") or {}).get("readyReplicas") == 1
                          and ((o.get("status") or {}).get("stable") or {}).get("readyReplicas") == 1, 120,
                          f"the canary of version {v3} beside one stable pod while scaled to zero")  # fmt: skip
    assert at_zero["spec"]["replicas"] == 0
    report(f"\nKEDA on queue depth: 1 -> 3 replicas in {to_three:.1f}s from the load's start (the canary held at "
           f"20%); answers {dict(answers.by_code)}; (seconds, spec.replicas, stable, canary, weight) "
           f"{split.seen}")  # fmt: skip
    assert answers.by_code.get(200, 0) > 0
    assert status_of(kube_api, namespace)["canary"]["modelVersion"] == v3
