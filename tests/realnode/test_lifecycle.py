"""The samples/ lifecycle on the real node, every pod a container of the workloads image: the
operator installed by the chart; the digits TrainingRun of samples/ trains (checkpointing to its
claim) and registers its model in MLflow, the ModelArtifact it creates is quantized and validated,
and the InferenceDeployment of samples/ serves it with two replicas behind its Service. Under load,
a second version that answers 30% of its requests with errors (the reference server's fault switch)
is canaried beside them and rolled back by its analysis; a third, trained on shuffled labels, is
rejected by validation and never served. An image built to run as root (the workloads image
without its USER) is refused by the kubelet, the Ready condition naming the field to set, and
serves once given the vLLM sample's settings (a non-root user, a writable HOME, /dev/shm, a
RuntimeClass). A trainer writing to its image's root filesystem fails in its container, and its
TrainingRun says so. Each stage's time is printed.

The node offers the machine's 2 CPUs, requests and limits alike: the operator's two replicas
request 0.2 of them, the two servers of samples/ 1 (0.5 each) and a canary pod 0.5 more
(maxSurgeReplicas 1). So the trainers after the first ask for 0.5 CPU, not samples/' 1, and the HPA
keeps two replicas (maxReplicas 2: at samples/' 4 it may add servers under the canary's load that
no CPU is left for). The bounds stay: without spec.autoscaling they default to 1 and 1, and
spec.replicas 2 is kept to one pod."""

from __future__ import annotations

import contextlib
import json
import secrets
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from localkube.kube import Kube, api_client
from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_e2e.loadgen import LoadDriver
from slipway_testing import ROOT, condition
from slipway_testing.samples import Stages, sample, serving, training

SAMPLE = ROOT / "samples" / "trainingrun-digits.yaml"
WRITE_ROOT = "open('/model.bin', 'w')"  # what a trainer that saves next to itself does
LATER_TRAINERS = {"cpu": "500m", "memory": "1Gi"}  # beside two servers and the operator (above)
FAULTY = {"SLIPWAY_SERVE_FAULT_ERROR_RATE": "0.3"}  # carried by the model into its servers
INACCURATE = {"SLIPWAY_BAD_MODEL": "1"}  # shuffled labels: accuracy near 0.1, under the 0.9 gate


@dataclass
class Team:
    """The team namespace ``ns`` the lifecycle runs in, its model and the workloads image."""

    kube: Kube
    ns: str
    model: str
    image: str
    canaries: dict[str, dict] = field(default_factory=dict)  # canary pods seen Ready, by name

    @property
    def path(self) -> str:
        return f"/apis/slipway.dev/v1alpha1/namespaces/{self.ns}"

    def create(self, plural: str, body: dict) -> None:
        self.kube.create(f"{self.path}/{plural}", body)

    def get(self, plural: str, name: str) -> dict | None:
        return self.kube.get_or_none(f"{self.path}/{plural}/{name}")

    def pods(self, prefix: str = "", selector: str = "") -> list[dict]:
        query = {"labelSelector": selector} if selector else {}
        items = self.kube.get(f"/api/v1/namespaces/{self.ns}/pods", **query)["items"]
        return [p for p in items if p["metadata"]["name"].startswith(prefix)]

    def wait(self, plural: str, name: str, done: Callable[[dict], bool], timeout: float, what: str) -> dict:
        """``plural/name`` once ``done(obj)``; Stalled before that fails at once."""

        last: list[dict | None] = [None]

        def check() -> dict | None:
            obj = last[0] = self.get(plural, name)
            if obj and done(obj):
                return obj
            stalled = condition(obj, "Stalled")
            assert stalled.get("status") != "True", f"{plural} {self.ns}/{name} stalled: {stalled}"
            return None

        try:
            return wait_for(check, timeout, f"{plural} {self.ns}/{name} {what}")  # type: ignore[no-any-return]
        except TimeoutError as e:
            status = (last[0] or {}).get("status") or {}
            raise AssertionError(f"{e}\nphase {status.get('phase')}, Ready {condition(last[0], 'Ready')}") from None

    def trained(self, body: dict, stages: Stages, label: str) -> dict:
        """Apply the TrainingRun ``body``; wait until it Succeeded and its ModelArtifact is decided."""
        name = body["metadata"]["name"]
        body["spec"]["image"] = self.image
        body["spec"]["model"]["name"] = body["spec"]["mlflow"]["experiment"] = self.model
        self.create("trainingruns", body)
        self.wait("trainingruns", name, lambda o: o["status"].get("phase") == "Succeeded", 240, "trained")
        stages.mark(f"{label}: train and register")
        final = ("Validated", "Rejected")
        artifact = self.wait("modelartifacts", name, lambda o: o["status"].get("phase") in final, 240, "decided")
        stages.mark(f"{label}: quantize and validate ({artifact['status']['phase']})")
        self.assert_containers(name, ("train", "quantize", "validate"))
        return artifact

    def assert_containers(self, name: str, steps: tuple[str, ...]) -> None:
        """One pod per step of ``name``, each a container of the workloads image that exited 0."""
        pods = [p for p in self.pods(f"{name}-") if p["metadata"]["name"].rsplit("-", 1)[0] in
                {f"{name}-{s}" for s in steps}]  # fmt: skip
        assert sorted(p["metadata"]["name"].rsplit("-", 1)[0] for p in pods) == sorted(f"{name}-{s}" for s in steps)
        for pod in pods:
            assert pod["spec"]["containers"][0]["image"] == self.image, pod["spec"]["containers"][0]
            assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"), pod["status"]
            assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0

    def watch_canaries(self) -> bool:
        """Note the canary pods that are Ready now (they are gone once rolled back); True once one was."""
        for pod in self.pods(selector="slipway.dev/track=canary"):
            statuses = pod["status"].get("containerStatuses") or [{}]
            if statuses[0].get("ready"):
                self.canaries.setdefault(pod["metadata"]["name"], pod)
        return bool(self.canaries)


@pytest.mark.realnode
def test_samples_lifecycle_in_containers_with_a_canary_rolled_back_and_a_model_rejected(real_cluster):
    suffix = secrets.token_hex(2)
    system, ns = f"slipway-life-{suffix}", f"team-life-{suffix}"
    kube = real_cluster.kube
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    kube.create("/api/v1/namespaces", {"metadata": {"name": system, "labels": restricted}})
    kube.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": restricted,
                "annotations": {"slipway.dev/allowed-models": f"digits-{suffix}",
                                "slipway.dev/allowed-runtime-classes": "nvidia"}}})  # fmt: skip
    try:
        workloads, tag = real_cluster.node_image("slipway-workloads")
        real_cluster.install_operator(system, system, f"workloadsImage.repository={workloads}",
                                      f"workloadsImage.tag={tag}", f"watchNamespaces={{{ns}}}")  # fmt: skip
        team, stages = Team(kube, ns, f"digits-{suffix}", f"{workloads}:{tag}"), Stages()
        v1 = first_version_served(team, stages)
        api = api_client(real_cluster.info.kubeconfig)
        try:
            with LoadDriver.for_service(api, ns, "digits", rate=20, max_duration=300) as load:
                v2 = faulty_version_rolled_back(team, stages, v1)
            answers = load.stats().by_code
        finally:
            api.close()
        inaccurate_version_rejected(real_cluster, team, stages, v1, v2)
        root_image_served_with_the_samples_settings(real_cluster, team, stages, v1)
        trainer_writing_its_root_fails(real_cluster, team)
        print(f"real node lifecycle (each stage from the end of the one before; load {answers}):\n"
              + stages.report(since_last=True))  # fmt: skip
    finally:
        with contextlib.suppress(AssertionError):
            real_cluster.helm("uninstall", system, "-n", system, "--ignore-not-found", timeout=120)
        kube.delete(f"/api/v1/namespaces/{ns}")
        kube.delete(f"/api/v1/namespaces/{system}")


def first_version_served(team: Team, stages: Stages) -> str:
    """samples/' TrainingRun trained, its model quantized and validated, then served by the
    InferenceDeployment of samples/ with two replicas, reached through their Service (kube-proxy)
    from the machine: the version served."""
    artifact = team.trained(yaml.safe_load(SAMPLE.read_text()), stages, "v1")
    assert artifact["status"]["phase"] == "Validated" and artifact["status"].get("conditions"), artifact["status"]
    body = serving(team.model)
    body["spec"]["image"] = team.image
    body["spec"]["autoscaling"]["maxReplicas"] = 2  # see the module's docstring
    team.create("inferencedeployments", body)

    def promoted(obj: dict) -> bool:
        stable = obj.get("status", {}).get("stable") or {}
        return condition(obj, "Ready").get("status") == "True" and stable.get("readyReplicas") == 2

    served = team.wait("inferencedeployments", "digits", promoted, 240, "serving with 2 ready replicas")
    stages.mark("v1: serve, 2 replicas Ready")
    version = served["status"]["stable"]["modelVersion"]
    assert version == artifact["status"]["quantizedVersion"], served["status"]
    service = team.kube.get(f"/api/v1/namespaces/{team.ns}/services/digits")
    url = f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}/readyz"

    def answered() -> dict:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    # kube-proxy programs the Service's rules on its own time: refused until it has.
    assert wait_for(answered, 30, f"the Service's address {url} to answer")["modelVersion"] == version, url
    servers = team.pods(selector="slipway.dev/track=stable")
    assert len(servers) == 2 and all(
        p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://") for p in servers
    ), servers
    return str(version)


def faulty_version_rolled_back(team: Team, stages: Stages, v1: str) -> str:
    """A version whose servers answer 30% of predictions with 500, trained, validated (its accuracy
    is fine), canaried in a container of the workloads image and rolled back by the analysis of its
    error rate; v1 serves on. The version rolled back."""
    body = training("digits-faulty", team.model, FAULTY)
    body["spec"]["resources"] = dict(LATER_TRAINERS)
    artifact = team.trained(body, stages, "v2, 30% errors")
    assert artifact["status"]["phase"] == "Validated", artifact["status"]
    v2 = artifact["status"]["quantizedVersion"]

    def rolled_back(obj: dict) -> bool:
        if team.watch_canaries() and "v2, 30% errors: canary pod Ready" not in stages.times:
            stages.mark("v2, 30% errors: canary pod Ready")
        return (obj.get("status", {}).get("lastRollback") or {}).get("modelVersion") == v2

    status = team.wait("inferencedeployments", "digits", rolled_back, 240, f"version {v2} rolled back")["status"]
    stages.mark("v2, 30% errors: analysis, rolled back")
    assert status["phase"] == "RolledBack" and status["stable"]["modelVersion"] == v1, status
    assert (status["lastRollback"]["reason"], status["lastRollback"]["metric"]) == ("AnalysisFailed", "errorRate")
    assert team.canaries, "no canary pod of the faulty version was seen Ready"
    for pod in team.canaries.values():
        assert pod["metadata"]["labels"]["slipway.dev/model-version"] == v2, pod["metadata"]["labels"]
        assert pod["spec"]["containers"][0]["image"] == team.image, pod["spec"]["containers"][0]
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"), pod["status"]
    return str(v2)


def inaccurate_version_rejected(real_cluster, team: Team, stages: Stages, v1: str, v2: str) -> None:
    """A version trained on shuffled labels, rejected by the accuracy gate: no alias moved, no pod of
    it, v1 in production and the rolled-back v2 still the candidate."""
    body = training("digits-inaccurate", team.model, INACCURATE)
    body["spec"]["resources"] = dict(LATER_TRAINERS)
    artifact = team.trained(body, stages, "v3, inaccurate")
    status = artifact["status"]
    assert status["phase"] == "Rejected" and condition(artifact, "Stalled")["reason"] == "GateFailed", status
    failed = [g for g in status["gates"] if not g["passed"]]
    assert failed and {g["metric"] for g in failed} == {"accuracy"}, status["gates"]
    v3 = status["quantizedVersion"]
    assert not team.pods(selector=f"slipway.dev/model-version={v3}"), f"a pod serves the rejected version {v3}"
    served = (team.get("inferencedeployments", "digits") or {}).get("status", {})
    assert served["stable"]["modelVersion"] == v1 and served["phase"] == "RolledBack", served
    with MlflowClient(real_cluster.info.mlflow_url or "") as mlflow:
        production = mlflow.get_version_by_alias(team.model, "production")
        candidate = mlflow.get_version_by_alias(team.model, "candidate")
    assert (production and production.version, candidate and candidate.version) == (v1, v2)


def root_image_served_with_the_samples_settings(real_cluster, team: Team, stages: Stages, v1: str) -> None:
    """An image whose config names no USER (it runs as root, as vLLM's does: the workloads image with
    its USER removed), served as production: the kubelet refuses it under runAsNonRoot, and the
    Ready condition says so and names the field. With the settings of
    samples/inferencedeployment-llm-gateway.yaml (a non-root user, a writable HOME, /dev/shm, the
    RuntimeClass nvidia, here a class whose handler is the node's runc) it serves: ``id -u`` and
    /dev/shm's size inside the container, and the class the API server and the kubelet applied."""
    root_image = real_cluster.root_image(team.image)
    llm = sample("inferencedeployment-llm-gateway.yaml")["spec"]["podTemplate"]
    settings = {k: llm[k] for k in ("securityContext", "env", "volumes", "volumeMounts", "runtimeClassName",
                                    "shmSize")}  # fmt: skip
    overhead = {"podFixed": {"cpu": "10m"}}  # the API server copies it into each pod of the class
    real_cluster.kube.create("/apis/node.k8s.io/v1/runtimeclasses",
                             {"metadata": {"name": settings["runtimeClassName"]}, "handler": "runc",
                              "overhead": overhead})  # fmt: skip
    try:
        body = serving(team.model)
        body["metadata"]["name"] = "digits-root"
        spec = body["spec"]
        spec.update(image=root_image, resources={"cpu": "200m", "memory": "256Mi"})
        spec["model"]["alias"] = "production"
        spec["autoscaling"].update(minReplicas=1, maxReplicas=1)
        team.create("inferencedeployments", body)

        def refused(obj: dict) -> bool:
            return "CreateContainerConfigError" in condition(obj, "Ready").get("message", "")

        ready = condition(team.wait("inferencedeployments", "digits-root", refused, 180, "refused as root"), "Ready")
        stages.mark("root image: refused, the condition names the field")
        print(f"root image without runAsUser: Ready={ready['status']} {ready['reason']}: {ready['message']}")
        assert "container has runAsNonRoot and image will run as root" in ready["message"], ready
        assert "set spec.podTemplate.securityContext.runAsUser" in ready["message"], ready

        real_cluster.kubectl("-n", team.ns, "patch", "inferencedeployments", "digits-root", "--type=merge",
                             "-p", json.dumps({"spec": {"podTemplate": settings}}))  # fmt: skip

        def serving_it(obj: dict) -> bool:
            stable = obj.get("status", {}).get("stable") or {}
            return condition(obj, "Ready").get("status") == "True" and stable.get("readyReplicas") == 1

        served = team.wait("inferencedeployments", "digits-root", serving_it, 240, "serving with the sample's settings")
        stages.mark("root image: served with the sample's settings")
        assert served["status"]["stable"]["modelVersion"] == v1, served["status"]
        # The refused revision's pod may still be going: the one of the served revision.
        revision = served["status"]["stable"]["revision"]
        [pod] = team.pods(selector=f"slipway.dev/deployment=digits-root,slipway.dev/revision={revision}")
        name = pod["metadata"]["name"]
        uid = real_cluster.kubectl("-n", team.ns, "exec", name, "--", "id", "-u").stdout.strip()
        statvfs = "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)"
        shm = int(real_cluster.kubectl("-n", team.ns, "exec", name, "--", "python", "-c", statvfs).stdout)
        home = real_cluster.kubectl("-n", team.ns, "exec", name, "--", "sh", "-c", "touch $HOME/x && echo $HOME")
        print(
            f"root image with the sample's settings: id -u {uid}, /dev/shm {shm} bytes, HOME {home.stdout.strip()} "
            f"writable, runtimeClassName {pod['spec'].get('runtimeClassName')}, overhead {pod['spec'].get('overhead')}"
        )
        assert uid == str(settings["securityContext"]["runAsUser"]), uid
        # A memory-backed volume: the kubelet sizes it at the sample's 8Gi or the pod's memory limit
        # (256Mi here), whichever is less; the runtime's own /dev/shm would be 64 MiB.
        assert shm == 256 * 2**20, shm
        assert pod["spec"]["runtimeClassName"] == settings["runtimeClassName"]
        assert pod["spec"]["overhead"] == overhead["podFixed"], pod["spec"]  # the API server applied the class
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    finally:
        team.kube.delete(f"{team.path}/inferencedeployments/digits-root")
        real_cluster.kube.delete(f"/apis/node.k8s.io/v1/runtimeclasses/{settings['runtimeClassName']}")


def trainer_writing_its_root_fails(real_cluster, team: Team) -> None:
    """A trainer that passes admission but writes to its image's root filesystem fails in its
    container: UID 65532 may not write the root-owned / (Slipway's workload pods do not ask for a
    read-only root, so the error is EACCES, not EROFS); the TrainingRun says how it ended."""
    broken: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    broken["metadata"]["name"] = "writes-root"
    broken["spec"].update(image=team.image, command=["python", "-c", WRITE_ROOT], args=[])
    broken["spec"]["resources"] = {"cpu": "200m", "memory": "256Mi"}  # beside the two servers
    broken["spec"]["model"]["name"] = broken["spec"]["mlflow"]["experiment"] = team.model
    team.create("trainingruns", broken)

    def stalled_run() -> dict | None:
        found = condition(team.get("trainingruns", "writes-root"), "Stalled")
        return found if found.get("status") == "True" else None

    try:
        stalled = wait_for(stalled_run, 120, f"TrainingRun {team.ns}/writes-root stalled")
    except TimeoutError as e:
        run_status = (team.get("trainingruns", "writes-root") or {}).get("status")
        pods_now = {p["metadata"]["name"]: p["status"] for p in team.pods()}
        raise AssertionError(f"{e}\nstatus: {json.dumps(run_status)}\npods: {json.dumps(pods_now)[:3000]}") from None
    assert stalled["reason"] == "NonRetryableExitCode", stalled
    assert "the trainer exited with code 1" in stalled["message"], stalled
    [pod] = team.pods("writes-root-")
    log = real_cluster.kubectl("-n", team.ns, "logs", pod["metadata"]["name"]).stdout
    assert "PermissionError: [Errno 13] Permission denied: '/model.bin'" in log, log
