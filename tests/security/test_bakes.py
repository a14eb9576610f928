"""A bake and the promote alias under attack, by the namespace editor and by MLflow's answers: the
operator reaches MLflow through a proxy that refuses alias moves (403, as MLflow's auth does).

Version 2 is promoted and bakes; its alias move is refused and parked. The editor publishes version 3
during the bake (it waits: the bake is not skipped), then annotates ``slipway.dev/abort``: version 2
is reverted to version 1 (the previous stable) and the newer decision (production back to 1) drops
the parked move to 2. MLflow accepts again and the editor changes the spec (which retries parked
moves at once): production lands on 1 and the move to 2 is never written or tried again. Version 3
(a faulty fix) is canaried only then, against version 1."""

from __future__ import annotations

import time

import pytest

from localkube.faultproxy import HttpFaultProxy
from slipway.status.conditions import parse_time
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import (
    Versions,
    apply_object,
    condition,
    deployment,
    events_for,
    patch_object,
    pods_of,
    report,
    serving,
    wait_status,
)

pytestmark = pytest.mark.cluster

ALIAS_WRITE = "/api/2.0/mlflow/registered-models/alias"
DENIED = {"error_code": "PERMISSION_DENIED", "message": "Permission denied for the operator's user"}


def alias_attempts(kube_api, namespace: str, model: str, version: str) -> int:
    """Moves of production to ``version`` the operator tried, as its Events tell (one per answer:
    AliasMoved when MLflow took it, RegistryUpdateRefused when it refused)."""
    moved = f"MLflow alias production of {model} now points at version {version}"
    refused = f"alias production of {model} -> version {version}:"
    return sum(1 for reason, message in events_for(kube_api, namespace, "digits")
               if (reason == "AliasMoved" and message == moved) or
               (reason == "RegistryUpdateRefused" and message.startswith(refused)))  # fmt: skip


def later(stamp: str | None, epoch: float) -> bool:
    when = parse_time(stamp)
    return when is not None and when.timestamp() > epoch


def parked_versions(obj: dict) -> list[str]:
    parked = (obj.get("status") or {}).get("refusedRegistryUpdates") or []
    return [str(p.get("version")) for p in parked if p.get("action") == "SetAlias"]


def test_a_bake_is_never_skipped_and_a_refused_alias_move_never_replayed(
    cluster, kube_api, namespace, operator, mlflow, trained, tenant
):
    proxy = HttpFaultProxy(cluster.mlflow_url).start()
    try:
        operator(mlflow_url=proxy.url)
        versions = Versions(mlflow, f"digits-{namespace}", trained)
        v1 = versions.publish()
        body = deployment(versions.model, steps=[{"weight": 50, "pause": "5s"}], bake={"duration": "10m"})
        apply_object(kube_api, namespace, body)
        serving(kube_api, namespace, v1)
        versions.alias_becomes("production", v1)
        seen = {"v2": "", "v3": "", "concluded": False, "canaried": False}
        skipped: list[str] = []  # statuses showing version 3 rolled out before version 2's bake was concluded

        def watch(obj: dict) -> dict:
            s = obj.get("status") or {}
            concluded = seen["concluded"] = seen["concluded"] or bool(
                seen["v2"] and (s.get("lastRollback") or {}).get("modelVersion") == seen["v2"]
            )
            rolled_out = seen["v3"] and seen["v3"] in ((s.get("canary") or {}).get("modelVersion"),
                                                       (s.get("lastRollback") or {}).get("modelVersion"))  # fmt: skip
            if rolled_out and not concluded:
                skipped.append(f"{s.get('phase')}: canary {s.get('canary')}")
            seen["canaried"] = seen["canaried"] or bool(rolled_out)
            return s

        with LoadDriver.for_service(kube_api, namespace, "digits", rate=20, max_duration=600) as load:
            proxy.answer("POST", ALIAS_WRITE, 403, DENIED)
            v2 = seen["v2"] = versions.publish()
            wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                        lambda o: watch(o).get("phase") == "Baking" and parked_versions(o) == [v2], 180,
                        f"v{v2} promoted and baking, its alias move refused and parked")  # fmt: skip

            # A new revision during the bake: it waits, the bake goes on judging version 2.
            published = time.time()
            v3 = seen["v3"] = versions.publish(errorRate="0.3")  # a faulty fix: its canary never moves the alias

            def still_baking(obj: dict) -> bool:
                s = watch(obj)
                judged = [r for r in s.get("analysis") or [] if later(r.get("time"), published)]
                waits = f"version {v3} (revision" in condition(obj, "Ready").get("message", "")
                return s.get("phase") == "Baking" and s["stable"].get("modelVersion") == v2 and waits and bool(judged)

            wait_status(kube_api, namespace, "InferenceDeployment", "digits", still_baking, 60,
                        f"v{v2}'s bake judged again after v{v3} was published, v{v3} waiting")  # fmt: skip
            assert not pods_of(kube_api, namespace, "canary")
            tried_before = alias_attempts(kube_api, namespace, versions.model, v2)

            # The editor aborts the bake: reverted to version 1, production moved back (refused too, parked).
            patch_object(tenant.api, namespace, "InferenceDeployment", "digits",
                         {"metadata": {"annotations": {"slipway.dev/abort": "true"}}})  # fmt: skip
            aborted = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                                  lambda o: bool(watch(o)) and parked_versions(o) == [v1], 60,
                                  f"v{v2}'s bake aborted, production -> v{v1} decided and parked")  # fmt: skip
            record = aborted["status"]["lastRollback"]
            assert (record["reason"], record["modelVersion"]) == ("Aborted", v2), record

            # MLflow accepts again; the editor's spec change retries parked moves at once.
            proxy.heal()
            patch_object(tenant.api, namespace, "InferenceDeployment", "digits",
                         {"spec": {"rollout": {"progressDeadlineSeconds": 41}}})  # fmt: skip
            versions.alias_becomes("production", v1)
            after = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                                lambda o: bool(watch(o)) and bool(seen["canaried"])
                                and o["status"]["stable"].get("modelVersion") == v1
                                and condition(o, "RegistrySynced").get("status") == "True", 120,
                                f"v{v3} canaried against v{v1}, MLflow synced")  # fmt: skip
            stats = load.stats()
        replayed = alias_attempts(kube_api, namespace, versions.model, v2) - tried_before
        faked = dict(proxy.faked)
    finally:
        proxy.close()
    report(f"\nbake attacks: v{v3} published during v{v2}'s bake waited (bakes skipped: {len(skipped)}); "
           f"abort reverted to v{v1} ({record['reason']}); alias moves to v{v2} replayed after the newer "
           f"decision: {replayed}; production -> v{versions.alias('production')}; 403s given {faked}; "
           f"responses {stats.by_code}")  # fmt: skip
    assert skipped == []
    assert replayed == 0
    assert versions.alias("production") == v1
    assert not after["status"].get("refusedRegistryUpdates")
    assert any(reason == "RegistryUpdateDropped" and f"-> version {v2} " in message
               for reason, message in events_for(kube_api, namespace, "digits"))  # fmt: skip
    assert any("during its bake (aborted by the slipway.dev/abort annotation)" in message
               for _, message in events_for(kube_api, namespace, "digits"))  # fmt: skip
