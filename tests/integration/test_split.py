"""The canary's share is taken from the total: spec.replicas (the HPA's, through the scale
subresource) is split between the tracks by each step's weight, within maxSurgeReplicas extra pods
and maxUnavailableReplicas pods not ready. Measured under load: ready pods per track, pods running,
and responses per version (the load driver spreads requests over the ready endpoints, as the
Service's proxy would)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import Versions, apply_object, deployment, get_object, report, serving, wait_status

pytestmark = [pytest.mark.cluster]


@dataclass
class Sample:
    requested: int  # the step's weight (0 outside a step)
    phase: str
    stable_ready: int
    canary_ready: int
    running: int  # pods not terminating, both tracks
    present: int  # pods, terminating ones too
    responses: dict[str, int]  # 200 responses so far, by model version
    stable_version: str | None = None
    replicas: int | None = None  # spec.replicas (the HPA's)
    canary_weight: int | None = None  # status.canary.weight


class Watch:
    def __init__(self, kube_api, namespace: str, load: LoadDriver) -> None:
        self.core = client.CoreV1Api(kube_api)
        self.kube_api, self.namespace, self.load = kube_api, namespace, load
        self.samples: list[Sample] = []

    def sample(self) -> Sample:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector="slipway.dev/deployment=digits").items
        running = [p for p in pods if p.metadata.deletion_timestamp is None]

        def ready(track: str) -> int:
            return sum(1 for p in running if p.metadata.labels.get("slipway.dev/track") == track and any(
                c.type == "Ready" and c.status == "True" for c in (p.status.conditions or [])))  # fmt: skip

        obj = get_object(self.kube_api, self.namespace, "InferenceDeployment", "digits")
        status = obj.get("status") or {}
        canary = status.get("canary") or {}
        requested = int(canary.get("requestedWeight") or 0) if status.get("phase") == "Analyzing" else 0
        stable = (status.get("stable") or {}).get("modelVersion")
        taken = Sample(requested, str(status.get("phase")), ready("stable"), ready("canary"), len(running), len(pods),
                       dict(self.load.stats().by_version), stable, obj["spec"].get("replicas"),
                       canary.get("weight"))  # fmt: skip
        self.samples.append(taken)
        return taken

    def timeline(self) -> str:
        """The samples' changes: (phase, step weight, stable ready, canary ready, pods running,
        spec.replicas)."""
        seen: list[tuple[str, int, int, int, int, int | None]] = []
        for s in self.samples:
            point = (s.phase, s.requested, s.stable_ready, s.canary_ready, s.running, s.replicas)
            if not seen or seen[-1] != point:
                seen.append(point)
        return " ".join(f"{p[:4]}/{w}:{sr}+{cr}({n} of {r})" for p, w, sr, cr, n, r in seen)

    def step(self, weight: int, canary: int, stable: int) -> tuple[int, dict[str, int]]:
        """At the step asking ``weight``, while the ready pods were split (canary, stable): how many
        samples, and the canary version's share of the responses in between."""
        settled = [i for i, s in enumerate(self.samples)
                   if s.requested == weight and (s.canary_ready, s.stable_ready) == (canary, stable)]  # fmt: skip
        assert len(settled) >= 2, f"step {weight}% never held {canary} canary and {stable} stable ready pods"
        first, last = self.samples[settled[0]].responses, self.samples[settled[-1]].responses
        delta = {v: last.get(v, 0) - first.get(v, 0) for v in last}
        return len(settled), delta


@pytest.mark.parametrize(("surge", "unavailable"), [(2, 0), (0, 1)], ids=["surge-2", "no-spare-gpu"])
def test_steps_above_the_surge_share_are_reached_and_pods_stay_within_the_budget(
    kube_api, namespace, operator, mlflow, trained, surge, unavailable
):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    steps = [{"weight": 33, "pause": "5s"}, {"weight": 66, "pause": "5s"}]
    body = deployment(versions.model, steps=steps, maxSurgeReplicas=surge, maxUnavailableReplicas=unavailable,
                      progressDeadlineSeconds=180)  # fmt: skip
    body["spec"]["rollout"].pop("analysis")
    body["spec"]["autoscaling"] = {"minReplicas": 6, "maxReplicas": 6}
    body["spec"]["resources"] = {"cpu": "10m"}
    apply_object(kube_api, namespace, body)
    serving(kube_api, namespace, v1, timeout=240)
    load = LoadDriver.for_service(kube_api, namespace, "digits", rate=20, max_duration=400)
    watch = Watch(kube_api, namespace, load)
    with load:
        v2 = versions.publish()

        def promoted() -> bool:
            s = watch.sample()
            done = s.phase == "Promoted" and s.stable_version == v2
            return done and s.stable_ready == 6 and s.canary_ready == 0 and s.running == 6

        wait_for(promoted, 300, f"v{v2} promoted through steps 33 and 66", interval=0.5)
        stats = load.stats()
    status = get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]
    assert status["stable"]["modelVersion"] == v2
    assert status["replicas"] == 6 and status["selector"] == "slipway.dev/deployment=digits"
    budget = 6 + surge
    most = max(s.running for s in watch.samples)
    assert most <= budget, (
        f"{most} pods running: more than spec.replicas + maxSurgeReplicas = {budget}: {watch.timeline()}"
    )
    fewest_ready = min(s.stable_ready + s.canary_ready for s in watch.samples)
    assert fewest_ready >= 6 - unavailable, (
        f"{fewest_ready} ready pods: fewer than 6 - maxUnavailableReplicas: {watch.timeline()}"
    )
    lines = []
    for weight, canary, stable in ((33, 2, 4), (66, 4, 2)):
        samples, delta = watch.step(weight, canary, stable)
        answered = sum(delta.values())
        share = delta.get(v2, 0) / answered if answered else 0.0
        pods_share = canary / (canary + stable)
        assert abs(pods_share * 100 - weight) <= 10
        assert answered >= 30 and abs(share * 100 - weight) <= 10, (weight, delta)
        lines.append(f"{weight}%: {canary} canary + {stable} stable ready ({pods_share:.0%}), {delta.get(v2, 0)}/"
                     f"{answered} responses from v{v2} ({share:.0%}) over {samples} samples")  # fmt: skip
    failed = {c: n for c, n in stats.by_code.items() if c != 200}
    report(f"\nsplit of 6 replicas, maxSurgeReplicas {surge}, maxUnavailableReplicas {unavailable}: "
           f"{'; '.join(lines)}; at most {most} pods running ({max(s.present for s in watch.samples)} with "
           f"terminating ones), at least {fewest_ready} ready; responses {stats.by_code}, not 200: {failed}, "
           f"transport errors {stats.transport_errors}")  # fmt: skip


def test_when_the_hpa_scales_mid_canary_the_total_follows_and_the_split_holds(
    kube_api, namespace, operator, mlflow, trained
):
    """The real HPA (a Pods metric, in-flight requests from Prometheus) scales the InferenceDeployment
    from 2 to 4 while a canary holds its 50% step: both tracks grow, the split stays 50%, no rollback."""
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    slow = {"latencySeconds": "0.4"}  # each request 0.4 s: 20 requests/s keep 8 in flight, 4 per pod of 2
    v1 = versions.publish(**slow)
    body = deployment(versions.model, steps=[{"weight": 50}], paused=True, progressDeadlineSeconds=180)
    body["spec"]["rollout"].pop("analysis")
    metric = {"type": "Pods", "name": "slipway_requests_in_flight", "targetAverageValue": "1"}
    body["spec"]["autoscaling"] = {"minReplicas": 2, "maxReplicas": 4, "metrics": [metric]}
    apply_object(kube_api, namespace, body)
    serving(kube_api, namespace, v1, timeout=240)
    load = LoadDriver.for_service(kube_api, namespace, "digits", rate=20, concurrency=16, max_duration=600)
    watch = Watch(kube_api, namespace, load)

    def split(stable: int, canary: int):
        def check() -> bool:
            s = watch.sample()
            return (s.stable_ready, s.canary_ready) == (stable, canary)

        return check

    v2 = versions.publish(**slow)
    wait_for(split(1, 1), 180, "the paused 50% step on 2 replicas: 1 stable + 1 canary", interval=1)
    # The HPA raises the count to its minReplicas on its first sync (every 15 s), which on a fresh
    # cluster can come after both pods are ready.
    wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                lambda o: o["spec"].get("replicas") == 2, 60, "spec.replicas 2, the HPA's minReplicas")  # fmt: skip
    with load:  # now the load that makes the HPA scale

        def scaled_and_split() -> bool:
            # spec.replicas 4, not only 2 + 2 ready: at 3 (the HPA may pass by it, or step back to it
            # when the load falters) the nearest split to 50% within maxSurgeReplicas 1 is 2 + 2 too.
            # Status follows on the operator's pass after the last pod turned ready (it showed 33%
            # while one canary pod of 2 was ready, 1 s after both were, in one CI run).
            s = watch.sample()
            return s.replicas == 4 and (s.stable_ready, s.canary_ready) == (2, 2) and s.canary_weight == 50

        wait_for(scaled_and_split, 300, "the HPA's 4 replicas split 2 + 2 and status at 50%", interval=1)
        obj = get_object(kube_api, namespace, "InferenceDeployment", "digits")
        stats = load.stats()
    status = obj["status"]
    assert status["phase"] == "Paused", status
    assert status["canary"]["modelVersion"] == v2 and status["canary"]["weight"] == 50, status
    assert "lastRollback" not in status and "RolledBack" not in {s.phase for s in watch.samples}, watch.timeline()
    report(f"\nHPA 2 -> 4 mid-canary (paused at 50%): {watch.timeline()}; at most "
           f"{max(s.running for s in watch.samples)} pods running; responses {stats.by_code}")  # fmt: skip
