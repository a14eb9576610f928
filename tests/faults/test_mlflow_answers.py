"""MLflow answering wrongly instead of being down (an HTTP proxy in front of it, the operator's only
way to MLflow): while a 30%-error canary is analysed, registry writes answered 403 (as MLflow's auth
denies them), alias reads answered in turn with an HTML page and a 500, every other call delayed
10 s. The rollback is
decided and carried out regardless; the refused rollback tag is parked with MLflow's answer and a
condition naming it, and lands once MLflow accepts it and the spec changes."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from faults.scenario import faulty_canary_analysed
from localkube.faultproxy import HttpFaultProxy
from localkube.wait import wait_for
from slipway_testing import condition, events_for, get_object, patch_object, pods_of, wait_status

pytestmark = pytest.mark.cluster

DENIED = {"error_code": "PERMISSION_DENIED", "message": "Permission denied for the operator's user"}
BROKEN = {"error_code": "INTERNAL_ERROR", "message": "database is locked"}


def test_a_rollback_is_carried_out_whatever_mlflow_answers(cluster, kube_api, namespace, operators, figures, mlflow,
                                                          trained):  # fmt: skip
    proxy = HttpFaultProxy(cluster.mlflow_url).start()
    try:
        operators(standalone=True, env={"SLIPWAY_MLFLOW_URL": proxy.url})
        with faulty_canary_analysed(kube_api, namespace, mlflow, trained) as (versions, v1, v2, load):
            proxy.answer("POST", "/api/2.0/mlflow/model-versions/set-tag", 403, DENIED)
            proxy.answer("POST", "/api/2.0/mlflow/registered-models/alias", 403, DENIED)
            proxy.garbage("GET", "/api/2.0/mlflow/registered-models/alias")
            proxy.answer("GET", "/api/2.0/mlflow/registered-models/alias", 500, BROKEN)  # in turn with the page
            proxy.delay("*", "*", 10)
            started = time.monotonic()
            idep = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                               lambda o: (o["status"].get("lastRollback") or {}).get("modelVersion") == v2,
                               120, f"{v2} rolled back")  # fmt: skip
            decided = time.monotonic() - started
            apps = client.AppsV1Api(kube_api)
            wait_for(lambda: apps.read_namespaced_deployment("digits-canary", namespace).spec.replicas == 0, 60,
                     "the canary scaled to 0")  # fmt: skip
            scaled_down = time.monotonic() - started
            wait_for(lambda: not pods_of(kube_api, namespace, "canary"), 120, "the canary pods gone")
            canary_gone = time.monotonic() - started
            refused = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                                  lambda o: bool(o["status"].get("refusedRegistryUpdates")), 60,
                                  "the refused rollback tag parked")  # fmt: skip
            synced = condition(refused, "RegistrySynced")
            parked = refused["status"]["refusedRegistryUpdates"]
            faked = dict(proxy.faked)

            # MLflow accepts again; a spec change retries the parked update at once.
            proxy.heal()
            patch_object(kube_api, namespace, "InferenceDeployment", "digits",
                         {"spec": {"rollout": {"progressDeadlineSeconds": 41}}})  # fmt: skip
            healed = time.monotonic()
            wait_for(lambda: "AnalysisFailed" in mlflow.get_model_version(versions.model, v2).tags.get(
                "slipway.dev/rollback", ""), 60, "the rollback tag once MLflow accepts it")  # fmt: skip
            recorded = time.monotonic() - healed
            after = wait_status(kube_api, namespace, "InferenceDeployment", "digits",
                                lambda o: condition(o, "RegistrySynced").get("status") == "True", 30,
                                "RegistrySynced=True")  # fmt: skip
            stats = load.stats()
        figures.inject(f"while canary {v2} (30% errors) was analysed, MLflow behind a proxy answered registry "
                       "writes 403, alias reads in turn with an HTML page and a 500, everything else "
                       "10 s late")  # fmt: skip
        figures.took("faults on to the rollback decided", decided)
        figures.took("faults on to the canary scaled to 0", scaled_down)
        figures.took("faults on to no canary pod", canary_gone)
        figures.took("spec changed (MLflow healthy) to the parked tag in MLflow", recorded)
        figures.count(answered_by_the_proxy=faked, parked=[f"{p.get('key')}: {p.get('error')}" for p in parked],
                      condition=f"{synced.get('reason')}: {synced.get('message')}")  # fmt: skip
        figures.count(responses=dict(stats.by_code))
        assert faked.get("GET /api/2.0/mlflow/registered-models/alias answer"), faked  # the 500s were given
        assert idep["status"]["phase"] == "RolledBack"
        assert decided < 60
        assert [p.get("key") for p in parked] == ["slipway.dev/rollback"]
        assert "PERMISSION_DENIED" in parked[0]["error"] or "403" in parked[0]["error"]
        assert (synced.get("status"), synced.get("reason")) == ("False", "RegistryUpdateRefused")
        assert "slipway.dev/rollback" in synced.get("message", "")
        assert not after["status"].get("refusedRegistryUpdates")
        assert any(reason == "RegistryUpdateRefused" and "slipway.dev/rollback" in message
                   for reason, message in events_for(kube_api, namespace, "digits"))  # fmt: skip
        assert versions.alias("production") == v1
        assert (
            get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["stable"]["modelVersion"] == v1
        )
    finally:
        proxy.close()
