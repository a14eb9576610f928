"""A bake after promotion (spec.rollout.bake): the new stable keeps being analysed on its own pods.
A version that turns faulty 60 s after it starts serving (the reference server's errorsAfterSeconds)
passes its canary, is promoted, and is reverted during its bake: the previous version serves again,
the production alias moves back, the version is tagged and an Event says why. A healthy version
finishes its bake and only then is Ready."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import (
    Versions,
    apply_object,
    condition,
    deployment,
    events_for,
    patch_spec,
    report,
    serving,
    status_of,
)

pytestmark = [pytest.mark.cluster]


def first_ready(kube_api, namespace: str, version: str) -> float:
    """When the first stable pod serving ``version`` became Ready (epoch seconds)."""
    pods = (
        client.CoreV1Api(kube_api)
        .list_namespaced_pod(namespace, label_selector=f"slipway.dev/track=stable,slipway.dev/model-version={version}")
        .items
    )
    times = [c.last_transition_time for p in pods for c in (p.status.conditions or [])
             if c.type == "Ready" and c.status == "True"]  # fmt: skip
    assert times, f"no ready stable pod of version {version}"
    return min(t.timestamp() for t in times)


def test_a_version_that_turns_faulty_after_promotion_is_reverted_in_its_bake(
    kube_api, namespace, operator, mlflow, trained
):
    operator()
    versions = Versions(mlflow, f"digits-{namespace}", trained)
    v1 = versions.publish()
    body = deployment(versions.model, steps=[{"weight": 50, "pause": "5s"}], bake={"duration": "20s"})
    apply_object(kube_api, namespace, body)
    serving(kube_api, namespace, v1)
    with LoadDriver.for_service(kube_api, namespace, "digits", rate=20, max_duration=600) as load:
        # A healthy version: Baking (not Ready) after its promotion, then Promoted and Ready.
        v2 = versions.publish()
        phases: list[str] = []

        def baked() -> bool:
            obj = {"status": status_of(kube_api, namespace)}
            phases.append(obj["status"].get("phase") or "")
            return (
                obj["status"].get("phase") == "Promoted"
                and obj["status"]["stable"]["modelVersion"] == v2
                and condition(obj, "Ready").get("status") == "True"
            )

        wait_for(baked, 180, f"v{v2} promoted, baked and Ready", interval=0.5)
        assert "Baking" in phases and phases.index("Baking") < len(phases) - 1
        versions.alias_becomes("production", v2)

        # A version faulty 60 s after it serves: promoted, then reverted by the bake.
        patch_spec(kube_api, namespace, {"rollout": {"bake": {"duration": "5m"}}})
        v3 = versions.publish(errorRate="0.3", errorsAfterSeconds="60")

        def baking() -> bool:
            s = status_of(kube_api, namespace)
            return s.get("phase") == "Baking" and s["stable"].get("modelVersion") == v3

        wait_for(baking, 180, f"v{v3} promoted and baking", interval=0.5)
        versions.alias_becomes("production", v3)
        faulty_from = first_ready(kube_api, namespace, v3) + 60

        def reverted() -> bool:
            return (status_of(kube_api, namespace).get("lastRollback") or {}).get("reason") == "BakeFailed"

        wait_for(reverted, 180, f"v{v3} reverted during its bake", interval=0.5)
        took = time.time() - faulty_from
        status = status_of(kube_api, namespace)
        assert status["lastRollback"]["modelVersion"] == v3 and status["phase"] == "RolledBack"
        versions.alias_becomes("production", v2)

        def v2_again() -> dict | None:
            s = status_of(kube_api, namespace)
            return s if s["stable"].get("modelVersion") == v2 and s["stable"].get("readyReplicas") == 2 else None

        serving_again = wait_for(v2_again, 120, f"v{v2} serving again")
        stats = load.stats()
    tag = mlflow.get_model_version(versions.model, v3).tags.get("slipway.dev/rollback", "")
    assert "BakeFailed" in tag, tag
    events = events_for(kube_api, namespace, "digits")
    assert any(reason == "RolledBack" and "during its bake" in message for reason, message in events), events
    interval, failure_limit = 5, 1
    assert took <= interval * (failure_limit + 1) + 15, f"reverted {took:.1f}s after the version turned faulty"
    report(f"\nbake: v{v2} baked 20 s then Ready; v{v3} (30% errors from 60 s after it served) promoted "
           f"{datetime.now().isoformat(timespec='seconds')}, reverted {took:.1f}s after it turned faulty "
           f"(bound {interval * (failure_limit + 1) + 15}s), production back on v{v2}, "
           f"{serving_again['stable']['readyReplicas']} pods serving it; responses {stats.by_code}")  # fmt: skip
