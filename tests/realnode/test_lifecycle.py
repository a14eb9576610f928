"""The samples/ lifecycle on the real node up to serving, every pod a container: the operator
installed by the chart, the digits TrainingRun of samples/ trains in the workloads image
(checkpointing to its claim), registers its model in MLflow, the ModelArtifact it creates is
quantized and validated by pods of the same image, and the InferenceDeployment of samples/ serves
it with two replicas behind its Service. A trainer writing to its image's root filesystem fails in
its container, and its TrainingRun says so. Each stage's time is printed."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
import urllib.request

import pytest
import yaml

from localkube.wait import wait_for
from slipway_testing import ROOT

SAMPLE = ROOT / "samples" / "trainingrun-digits.yaml"
SERVING = ROOT / "samples" / "inferencedeployment-digits.yaml"
WRITE_ROOT = "open('/model.bin', 'w')"  # what a trainer that saves next to itself does


def condition(obj: dict | None, kind: str) -> dict:
    return next((c for c in (obj or {}).get("status", {}).get("conditions", []) if c["type"] == kind), {})


@pytest.mark.realnode
def test_samples_train_quantize_validate_and_serve_in_containers(real_cluster):
    suffix = secrets.token_hex(2)
    system, team = f"slipway-life-{suffix}", f"team-life-{suffix}"
    kube = real_cluster.kube
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    kube.create("/api/v1/namespaces", {"metadata": {"name": system, "labels": restricted}})
    kube.create("/api/v1/namespaces", {"metadata": {"name": team, "labels": restricted,
                "annotations": {"slipway.dev/allowed-models": f"digits-{suffix}"}}})  # fmt: skip
    try:
        workloads, tag = real_cluster.node_image("slipway-workloads")
        real_cluster.install_operator(system, system, f"workloadsImage.repository={workloads}",
                                      f"workloadsImage.tag={tag}", f"watchNamespaces={{{team}}}")  # fmt: skip
        run = yaml.safe_load(SAMPLE.read_text())
        run["spec"]["image"] = f"{workloads}:{tag}"
        run["spec"]["model"]["name"] = f"digits-{suffix}"
        run["spec"]["mlflow"]["experiment"] = f"digits-{suffix}"
        start = time.monotonic()
        kube.create(f"/apis/slipway.dev/v1alpha1/namespaces/{team}/trainingruns", run)
        path = f"/apis/slipway.dev/v1alpha1/namespaces/{team}"

        def trained() -> dict | None:
            obj = kube.get_or_none(f"{path}/trainingruns/digits")
            stalled = condition(obj, "Stalled")
            assert stalled.get("status") != "True", f"TrainingRun {team}/digits stalled: {stalled}"
            return obj if obj and obj.get("status", {}).get("phase") == "Succeeded" else None

        wait_for(trained, 240, f"TrainingRun {team}/digits trained in a container")
        train_seconds = time.monotonic() - start

        def validated() -> dict | None:
            obj = kube.get_or_none(f"{path}/modelartifacts/digits")
            stalled = condition(obj, "Stalled")
            assert stalled.get("status") != "True", f"ModelArtifact {team}/digits stalled: {stalled}"
            return obj if obj and obj.get("status", {}).get("phase") == "Validated" else None

        artifact = wait_for(validated, 240, f"ModelArtifact {team}/digits quantized and validated")
        artifact_seconds = time.monotonic() - start - train_seconds
        pods = [
            p for p in kube.get(f"/api/v1/namespaces/{team}/pods")["items"] if "-stable-" not in p["metadata"]["name"]
        ]
        stages = sorted(p["metadata"]["name"].rsplit("-", 1)[0] for p in pods)
        assert stages == ["digits-quantize", "digits-train", "digits-validate"], stages
        for pod in pods:
            assert pod["spec"]["containers"][0]["image"] == f"{workloads}:{tag}", pod["spec"]["containers"][0]
            assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"), pod["status"]
            assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        assert artifact["status"].get("conditions"), artifact["status"]

        # Serving: the InferenceDeployment of samples/ on the validated candidate, two replicas of
        # the workloads image's server, reached through their Service (kube-proxy) from the machine.
        serving = yaml.safe_load(SERVING.read_text())
        serving["spec"]["image"] = f"{workloads}:{tag}"
        serving["spec"]["model"]["name"] = f"digits-{suffix}"
        start = time.monotonic()
        kube.create(f"{path}/inferencedeployments", serving)

        def promoted() -> dict | None:
            obj = kube.get_or_none(f"{path}/inferencedeployments/digits")
            stalled = condition(obj, "Stalled")
            assert stalled.get("status") != "True", f"InferenceDeployment {team}/digits stalled: {stalled}"
            stable = (obj or {}).get("status", {}).get("stable") or {}
            return obj if condition(obj, "Ready").get("status") == "True" and stable.get("readyReplicas") == 2 else None

        served = wait_for(promoted, 240, f"InferenceDeployment {team}/digits serving with 2 ready replicas")
        serve_seconds = time.monotonic() - start
        version = served["status"]["stable"]["modelVersion"]
        service = kube.get(f"/api/v1/namespaces/{team}/services/digits")
        url = f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}/readyz"
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert json.loads(answer.read())["modelVersion"] == version, url
        servers = [
            p for p in kube.get(f"/api/v1/namespaces/{team}/pods")["items"] if "-stable-" in p["metadata"]["name"]
        ]
        assert len(servers) == 2 and all(
            p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://") for p in servers
        ), servers
        # A trainer that passes admission but writes to its image's root filesystem fails in its
        # container: UID 65532 may not write the root-owned / (Slipway's workload pods do not ask
        # for a read-only root, so the error is EACCES, not EROFS); the TrainingRun says how it ended.
        broken = yaml.safe_load(SAMPLE.read_text())
        broken["metadata"]["name"] = "writes-root"
        broken["spec"].update(image=f"{workloads}:{tag}", command=["python", "-c", WRITE_ROOT], args=[])
        # The real node offers the machine's own CPUs (2 here), and the servers hold 1 of them.
        broken["spec"]["resources"] = {"cpu": "200m", "memory": "256Mi"}
        broken["spec"]["model"]["name"] = f"digits-{suffix}"
        broken["spec"]["mlflow"]["experiment"] = f"digits-{suffix}"
        kube.create(f"{path}/trainingruns", broken)

        def stalled_run() -> dict | None:
            found = condition(kube.get_or_none(f"{path}/trainingruns/writes-root"), "Stalled")
            return found if found.get("status") == "True" else None

        try:
            stalled = wait_for(stalled_run, 120, f"TrainingRun {team}/writes-root stalled")
        except TimeoutError as e:
            run_status = (kube.get_or_none(f"{path}/trainingruns/writes-root") or {}).get("status")
            pods_now = {
                p["metadata"]["name"]: p["status"] for p in kube.get(f"/api/v1/namespaces/{team}/pods")["items"]
            }
            raise AssertionError(
                f"{e}\nstatus: {json.dumps(run_status)}\npods: {json.dumps(pods_now)[:3000]}"
            ) from None
        assert stalled["reason"] == "NonRetryableExitCode", stalled
        assert "the trainer exited with code 1" in stalled["message"], stalled
        [pod] = [p for p in kube.get(f"/api/v1/namespaces/{team}/pods")["items"]
                 if p["metadata"]["name"].startswith("writes-root-")]  # fmt: skip
        log = real_cluster.kubectl("-n", team, "logs", pod["metadata"]["name"]).stdout
        assert "PermissionError: [Errno 13] Permission denied: '/model.bin'" in log, log
        print(f"real node lifecycle: train + register {train_seconds:.1f}s, quantize + validate "
              f"{artifact_seconds:.1f}s, serve (2 replicas ready) {serve_seconds:.1f}s")  # fmt: skip
    finally:
        with contextlib.suppress(AssertionError):
            real_cluster.helm("uninstall", system, "-n", system, "--ignore-not-found", timeout=120)
        kube.delete(f"/api/v1/namespaces/{team}")
        kube.delete(f"/api/v1/namespaces/{system}")
