"""Health that tells the truth to kstatus (Flux, ``helm --wait``), Argo CD and kubectl.

Every status version a watcher sees is read at once, so a new generation's first status must
already say Reconciling at that generation, before the pass did any I/O (no MLflow run yet).
Argo CD's view comes from manifests/argocd/health.lua run in gopher-lua (the VM Argo CD embeds),
kstatus' from sigs.k8s.io/cli-utils itself, Flux's from its own CEL evaluator (fluxcd/pkg/runtime)
with manifests/flux/kustomization-health.yaml: all three in the small Go program e2e/health."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from localkube.cluster import CONTROLPLANE
from slipway.status.conditions import held, ready, reconciling, set_conditions, stalled
from slipway_testing import GROUP, VERSION, apply_object, condition, training_run, wait_status

ROOT = Path(__file__).resolve().parents[2]
HEALTH_TOOL = ROOT / ".cache" / "health" / "health"  # make health-tool (a prerequisite of make test)
HEALTH_LUA = ROOT / "manifests" / "argocd" / "health.lua"
FLUX_CHECKS = ROOT / "manifests" / "flux" / "kustomization-health.yaml"
KINDS = ("TrainingRun", "ModelArtifact", "InferenceDeployment")


def readings(objects: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(Argo CD health, kstatus status, Flux status with Slipway's healthCheckExprs) of each object."""
    done = subprocess.run([str(HEALTH_TOOL), str(HEALTH_LUA), str(FLUX_CHECKS)], input=json.dumps(objects),
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return [(r["argocd"]["status"], r["kstatus"]["status"], r["flux"]["status"]) for r in json.loads(done.stdout)]


def health(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(Argo CD health, kstatus status) of each object."""
    return [(argocd, kstatus) for argocd, kstatus, _ in readings(objects)]


def obj(kind: str, phase: str | None, conditions: Any = (), generation: int = 1, observed: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
                            "metadata": {"name": "x", "namespace": "team-a", "generation": generation}}  # fmt: skip
    if phase is not None:
        body["status"] = {"phase": phase, "observedGeneration": observed,
                          "conditions": set_conditions(None, conditions, observed)}  # fmt: skip
    return body


def test_the_argocd_config_map_carries_the_health_check_for_every_kind():
    config = yaml.safe_load((ROOT / "manifests" / "argocd" / "argocd-cm.yaml").read_text())
    assert config["metadata"]["name"] == "argocd-cm"
    script = HEALTH_LUA.read_text()
    health = {key: value for key, value in config["data"].items() if key.startswith("resource.customizations.health.")}
    assert {f"resource.customizations.health.slipway.dev_{kind}": script for kind in KINDS} == health


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("phase", "conditions", "generation", "argocd", "kstatus", "flux"),
    [
        # Before the operator's first pass: kstatus cannot know; Flux's evaluator has no status to read.
        (None, (), 1, "Progressing", "Current", "Unknown"),
        ("Running", ready("Running"), 2, "Progressing", "InProgress", "InProgress"),  # a spec change not yet seen
        ("Pending", reconciling("NewGeneration", "generation 1"), 1, "Progressing", "InProgress", "InProgress"),
        ("Promoted", ready("Promoted", "serving"), 1, "Healthy", "Current", "Current"),
        ("Failed", stalled("PermanentExitCode", "exit 2"), 1, "Degraded", "Failed", "Failed"),
        ("RolledBack", stalled("AnalysisFailed", "errorRate 0.3 > 0.05"), 1, "Degraded", "Failed", "Failed"),
        ("Rejected", stalled("GateFailed", "accuracy 0.5 < 0.9"), 1, "Degraded", "Failed", "Failed"),
    ],
)
def test_argocd_kstatus_and_flux_read_each_state(kind, phase, conditions, generation, argocd, kstatus, flux):
    assert readings([obj(kind, phase, conditions, generation=generation)]) == [(argocd, kstatus, flux)]


@pytest.mark.parametrize(
    ("kind", "phase", "flux"),
    [
        ("TrainingRun", "Suspended", "Current"),
        ("InferenceDeployment", "Paused", "Current"),
        ("ModelArtifact", "Validating", "InProgress"),
    ],  # fmt: skip
)
def test_an_object_held_on_purpose_is_suspended_for_argocd_and_current_for_flux(kind, phase, flux):
    # kstatus' generic rules read any Ready=False as in progress; Slipway's Flux expressions know better.
    assert readings([obj(kind, phase, held(phase, "held by its spec"))]) == [("Suspended" if flux == "Current"
                                                                               else "Progressing", "InProgress",
                                                                               flux)]  # fmt: skip


@pytest.mark.cluster
class StatusHistory:
    """Every version of one object's status, in the order the API server made them (a watch)."""

    def __init__(self, kube_api: client.ApiClient, namespace: str, plural: str, name: str) -> None:
        self.versions: list[dict[str, Any]] = []
        self._arrived = threading.Condition()
        self._watch = watch.Watch()
        self._api = client.CustomObjectsApi(kube_api)
        self._args = (GROUP, VERSION, namespace, plural)
        self._selector = f"metadata.name={name}"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()
        self._stopped = False

    def _run(self) -> None:
        listed = self._api.list_namespaced_custom_object(*self._args, field_selector=self._selector)
        self._ready.set()
        stream = self._watch.stream(self._api.list_namespaced_custom_object, *self._args,
                                    field_selector=self._selector, timeout_seconds=300,
                                    resource_version=listed["metadata"]["resourceVersion"])  # fmt: skip
        try:
            for event in stream:
                with self._arrived:
                    self.versions.append(event["object"])
                    self._arrived.notify_all()
        except Exception:
            if not self._stopped:
                raise  # the watch broke while the test still relied on it

    def __enter__(self) -> StatusHistory:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._watch.stop()

    def through(self, seen: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        """The versions up to ``seen`` (a version read by other means), once the watch has delivered
        it: the watch may lag behind a GET."""
        version = seen["metadata"]["resourceVersion"]

        def delivered() -> bool:
            return any(v["metadata"]["resourceVersion"] == version for v in self.versions)

        with self._arrived:
            assert self._arrived.wait_for(delivered, timeout), f"the watch never delivered resourceVersion {version}"
            at = next(i for i, v in enumerate(self.versions) if v["metadata"]["resourceVersion"] == version)
            return list(self.versions[: at + 1])

    def first_at(self, generation: int) -> dict[str, Any]:
        """The first version whose status was computed for ``generation``."""
        return next(v for v in self.versions if (v.get("status") or {}).get("observedGeneration") == generation)


def test_each_new_generation_reads_reconciling_before_any_io_and_kubectl_shows_the_reason(
    kube_api, namespace, operator, cluster
):
    operator()
    body = training_run("health", 200, model=f"digits-{namespace}")
    with StatusHistory(kube_api, namespace, "trainingruns", "health") as history:
        apply_object(kube_api, namespace, body)
        wait_status(kube_api, namespace, "TrainingRun", "health",
                    lambda o: (o.get("status") or {}).get("phase") == "Running", 120, "training")  # fmt: skip
        custom = client.CustomObjectsApi(kube_api)
        # Started: the spec is frozen (CEL at admission), suspend aside.
        wait_status(kube_api, namespace, "TrainingRun", "health",
                    lambda o: bool((o.get("status") or {}).get("startTime")), 60, "status.startTime")  # fmt: skip
        with pytest.raises(client.ApiException) as refused:
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns", "health",
                                                  {"spec": {"args": ["--steps", "400"]}})  # fmt: skip
        assert refused.value.status == 422 and "only spec.suspend may change" in str(refused.value.body)
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruns", "health",
                                              {"spec": {"suspend": True}})  # fmt: skip
        suspended = wait_status(kube_api, namespace, "TrainingRun", "health",
                                lambda o: (o.get("status") or {}).get("phase") == "Suspended"
                                and o["status"].get("observedGeneration") == o["metadata"]["generation"],
                                60, "suspended at generation 2")  # fmt: skip
        versions = history.through(suspended, 30)  # the watch may lag behind the GET that saw it
    for generation in (1, 2):
        first = history.first_at(generation)
        ready, reconciling = condition(first, "Ready"), condition(first, "Reconciling")
        assert (ready["status"], reconciling["status"], reconciling["reason"]) == ("False", "True", "NewGeneration")
        assert reconciling["observedGeneration"] == generation
    # Generation 1 was announced before the pass created the MLflow run or the Job.
    assert not history.first_at(1)["status"].get("mlflow")
    # What Argo CD and kstatus made of every version a watcher saw: never Healthy/Current while
    # the run trains, Progressing/InProgress at each new generation, Suspended at the end.
    seen = health(versions)
    for version, (argocd, kstatus) in zip(versions, seen, strict=True):
        phase = (version.get("status") or {}).get("phase")
        if phase in ("Pending", "Running"):
            assert (argocd, kstatus) == ("Progressing", "InProgress"), version["status"]
    assert seen[versions.index(history.first_at(2))] == ("Progressing", "InProgress")
    assert seen[-1] == ("Suspended", "InProgress"), versions[-1]["status"]
    assert readings(versions[-1:])[0][2] == "Current"  # Flux with Slipway's healthCheckExprs
    table = subprocess.run(
        [str(CONTROLPLANE.parent / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace, "get", "tr",
         "-o", "wide"],  # REASON is a priority-1 column
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.splitlines()  # fmt: skip
    header, row = table[0], table[1]
    assert " REASON " in header, table
    at = header.index(" REASON ") + 1  # columns are aligned: the value starts under the header
    assert row[at:].split()[0] == condition(versions[-1], "Ready")["reason"], table


@pytest.mark.cluster
def test_a_training_pod_that_cannot_start_goes_stalled_after_its_grace_and_recovers_when_fixed(
    kube_api, namespace, operator, monkeypatch
):
    monkeypatch.setenv("SLIPWAY_STUCK_POD_GRACE_SECONDS", "8")
    operator()
    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "token"}}}
    body = training_run("stuck", 200, [token], model=f"digits-{namespace}")
    apply_object(kube_api, namespace, body)
    waiting = wait_status(kube_api, namespace, "TrainingRun", "stuck",
                          lambda o: condition(o, "Ready").get("reason") == "CreateContainerConfigError",
                          120, "the missing Secret named")  # fmt: skip
    assert condition(waiting, "Stalled").get("status") == "False"  # within its grace
    stalled = wait_status(kube_api, namespace, "TrainingRun", "stuck",
                          lambda o: condition(o, "Stalled").get("status") == "True", 60,
                          "Stalled after 8 s")  # fmt: skip
    assert condition(stalled, "Stalled")["reason"] == "CreateContainerConfigError"
    assert "hub-token" in condition(stalled, "Stalled")["message"]
    assert health([stalled]) == [("Degraded", "Failed")]
    client.CoreV1Api(kube_api).create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="hub-token"), string_data={"token": "t"})
    )
    running = wait_status(kube_api, namespace, "TrainingRun", "stuck",
                          lambda o: (o.get("status") or {}).get("phase") == "Running"
                          and condition(o, "Stalled").get("status") == "False",
                          120, "running once the Secret exists")  # fmt: skip
    assert health([running]) == [("Progressing", "InProgress")]


@pytest.mark.cluster
def test_a_run_whose_artifact_is_rejected_is_stalled_not_ready(kube_api, namespace, operator):
    operator()
    gate = {"metric": "sizeBytes", "max": 1}  # no model is 1 byte: the gate rejects it
    artifact = {"quantization": {"method": "none"}, "validation": {"gates": [gate]}}
    body = training_run("small", 4, model=f"digits-{namespace}", artifact=artifact)
    apply_object(kube_api, namespace, body)
    seen_ready: list[str] = []

    def decided(o: dict[str, Any]) -> bool:
        if condition(o, "Ready").get("status") == "True":
            seen_ready.append(condition(o, "Ready")["reason"])
        return condition(o, "Stalled").get("status") == "True"

    run = wait_status(kube_api, namespace, "TrainingRun", "small", decided, 300, "Stalled by its rejected artifact")
    assert seen_ready == [], "Ready while its artifact was still undecided"
    stalled = condition(run, "Stalled")
    assert stalled["reason"] == "ArtifactRejected" and "sizeBytes" in stalled["message"], stalled
    assert run["status"]["phase"] == "Succeeded" and condition(run, "Trained")["status"] == "True"
    assert health([run]) == [("Degraded", "Failed")]


@pytest.mark.cluster
def test_the_readme_patch_merges_the_health_checks_into_an_existing_argocd_cm(kube_api, cluster):
    core = client.CoreV1Api(kube_api)
    with contextlib.suppress(client.ApiException):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="argocd")))
    mine = {"url": "https://argocd.example.test", "resource.customizations.health.apps_Other": "return {}"}
    core.create_namespaced_config_map("argocd", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="argocd-cm"),
                                                                   data=mine))  # fmt: skip
    try:
        subprocess.run([str(CONTROLPLANE.parent / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "-n", "argocd",
                        "patch", "configmap", "argocd-cm", "--patch-file",
                        str(ROOT / "manifests" / "argocd" / "argocd-cm.yaml")],
                       capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        data = core.read_namespaced_config_map("argocd-cm", "argocd").data
        assert mine.items() <= data.items()  # what Argo CD had is kept
        script = HEALTH_LUA.read_text()
        assert all(data[f"resource.customizations.health.slipway.dev_{kind}"] == script for kind in KINDS)
        shipped = yaml.safe_load((ROOT / "manifests" / "argocd" / "argocd-cm.yaml").read_text())["data"]
        assert shipped.items() <= data.items()  # the resource actions too
    finally:
        core.delete_namespaced_config_map("argocd-cm", "argocd")
