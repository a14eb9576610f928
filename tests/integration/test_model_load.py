"""spec.modelLoad and spec.podTemplate on the local cluster: the fetch-model init container puts
the version's files where the server reads them (the server downloads nothing), the pod carries
the template's labels and environment, and a version whose files do not match its recorded
digest never serves: its canary cannot start and is rolled back."""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import apply_object, inference_deployment, report, wait_status

pytestmark = pytest.mark.cluster


def test_fetched_model_is_served_and_a_digest_mismatch_never_serves(kube_api, namespace, operator, cluster, trained):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "tuning"}, "data": {"TUNING": "fast"}})
    operator()
    model = f"digits-{namespace}"
    run_id = trained
    with MlflowClient(cluster.mlflow_url) as mlflow:
        digest = mlflow.get_run(run_id).tags["slipway.dev/model-digest"]

        def publish(recorded: str) -> str:
            tags = {"slipway.dev/digest": recorded}
            version = mlflow.create_model_version(model, f"runs:/{run_id}/model", run_id, tags)
            mlflow.set_alias(model, "candidate", version.version)
            return version.version

        mlflow.get_or_create_registered_model(model)
        v1 = publish(digest)
        body = inference_deployment(
            "fetched",
            model,
            modelLoad={},
            podTemplate={
                "labels": {"team": "search"},
                "env": [{"name": "GREETING", "value": "hello"}],
                "envFrom": [{"configMapRef": {"name": "tuning"}}],
            },
            rollout={"steps": [{"weight": 50, "pause": "5s"}], "progressDeadlineSeconds": 40},
        )
        apply_object(kube_api, namespace, body)

        def serving(version: str):
            def check(obj) -> bool:
                status = obj.get("status") or {}
                return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == version

            return check

        wait_status(kube_api, namespace, "InferenceDeployment", "fetched", serving(v1), 180, "v1 served")
        (pod,) = core.list_namespaced_pod(namespace, label_selector="slipway.dev/track=stable").items
        (init,) = pod.status.init_container_statuses
        assert init.name == "fetch-model" and init.state.terminated.reason == "Completed"
        assert pod.metadata.labels["team"] == "search"
        fetch_log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="fetch-model")
        assert f"({digest}" in fetch_log and "into /models/current" in fetch_log
        seconds = re.search(r"in ([0-9.]+)s", fetch_log)
        server_log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="server")
        assert "serving the files fetched into /models/current" in server_log
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["SLIPWAY_MODEL_PATH"] == "/models/current" and env["GREETING"] == "hello"
        with LoadDriver.for_service(kube_api, namespace, "fetched", rate=10, max_duration=60) as load:
            wait_for(lambda: load.stats().responses >= 10, 30, "10 answers")
            stats = load.stats()
        assert set(stats.by_version) == {v1}

        # A version whose files are not what it records: its fetch fails, the canary never starts.
        v2 = publish("sha256:" + "0" * 64)

        refusals: set[str] = set()

        def rolled_back(obj) -> bool:
            for canary in core.list_namespaced_pod(namespace, label_selector="slipway.dev/track=canary").items:
                for s in canary.status.init_container_statuses or []:
                    ended = s.last_state.terminated or s.state.terminated
                    if ended and ended.exit_code == 2:
                        refusals.add(ended.message or "")
            return ((obj.get("status") or {}).get("lastRollback") or {}).get("modelVersion") == v2

        idep = wait_status(kube_api, namespace, "InferenceDeployment", "fetched", rolled_back, 150, "v2 rolled back")
        assert idep["status"]["lastRollback"]["reason"] == "ProgressDeadlineExceeded"
        assert idep["status"]["stable"]["modelVersion"] == v1
        assert any("digest mismatch" in m for m in refusals), refusals
    report(f"\nmodelLoad: fetch-model took {seconds.group(1) if seconds else '?'}s; a digest mismatch was rolled back")
