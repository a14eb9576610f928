"""Fake GPU nodes for the scale benchmarks: kwok (``sigs.k8s.io/kwok`` v0.8.0) as a local process
against a local cluster (``localkube``).

kwok plays the kubelet of nodes that do not exist: it keeps their status and leases fresh and
moves the pods bound to them through their lifecycle by *stages* (``kwok.x-k8s.io/v1alpha1``
``Stage``), without running any container. The real scheduler, Job, Deployment, ReplicaSet,
EndpointSlice and garbage-collection controllers of the cluster then do their work as usual::

    from bench import kwok

    with kwok.running(info, nodes=50, directory=run / "kwok", train_seconds=60) as fake:
        pod_spec.update(kwok.placement())      # nodeSelector type=kwok + the toleration of its taint
        ...                                    # fake.names, fake.alive(), fake.log

``running(info, nodes, directory, ...)`` (a context manager) registers ``nodes`` Nodes named
``kwok-gpu-0`` .. ``kwok-gpu-<nodes-1>``, starts ``.cache/kwok/kwok`` (built by
``bench/build-kwok.sh``, ``make kwok``) and returns once every one of them is ``Ready``; on the way
out it stops kwok and deletes the Nodes (their pods are then removed by the pod garbage collector).
Each node:

- is labelled ``type=kwok`` (plus ``kubernetes.io/hostname``, ``kubernetes.io/os``,
  ``kubernetes.io/arch``, ``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory``) and annotated
  ``kwok.x-k8s.io/node=fake``: kwok manages only the nodes with this annotation
  (``--manage-nodes-with-annotation-selector``), never the node agents' real nodes;
- carries the taint ``kwok.x-k8s.io/node=fake:NoSchedule``, so only pods that tolerate it land
  there (:func:`placement` gives the nodeSelector and the toleration);
- has the capacity ``cpu`` (default 64), ``memory`` (512Gi), ``pods`` (110) and ``nvidia.com/gpu``
  (``gpus_per_node``, default 8).

Addresses are loopback only: the nodes' InternalIP is :data:`NODE_IP` (127.63.0.1) and pods get
addresses from :data:`POD_CIDR` (127.64.0.0/16), away from the node agents' 127.0.x.y; kwok's own
server (``/healthz``, ``/metrics``) listens on 127.0.0.1. No container runs behind those addresses,
so Prometheus must never scrape a pod of a kwok node: ``localkube.prometheus`` drops the targets
whose node is named ``kwok-*``.

The stages (:func:`stages`), given to kwok in its ``--config`` file (no Stage CRD is installed):

- ``node-initialize``: a node that is not Ready becomes Ready, with its addresses and the capacity
  it was registered with; ``node-heartbeat-with-lease``: its conditions are refreshed every ten
  minutes, while kwok renews its Lease (``--node-lease-duration-seconds``, 40) as a kubelet does;
- ``pod-ready``: a Pending pod becomes Running, Ready, with its init containers completed and a
  pod IP;
- ``pod-complete-training``: a Running pod labelled ``slipway.dev/trainingrun`` (Slipway's training
  pods) ends ``Succeeded``, every container terminated with exit code 0, ``train_seconds`` after it
  started running (plus up to ``train_jitter_seconds``);
- ``pod-delete``: a pod being deleted is removed at once (no grace period to sit out).

Identity: kwok talks to the API server with a client certificate of its own, user ``kwok`` in
``system:masters``, issued by the cluster CA into ``<cluster>/pki/kwok.crt``; it is *not* in the
audited group of ``localkube.audit``, so kwok's own requests never enter the audit log that the
benchmarks count. Its log is ``<directory>/kwok.log``. kwok is recorded among the cluster's
processes (``state.json``), so ``localkube.cluster.down`` stops it too if the benchmark dies.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from localkube.audit import _load_ca
from localkube.kube import Kube, write_kubeconfig
from localkube.mlflow_server import free_port
from localkube.procs import Proc, spawn
from localkube.state import ROOT, ClusterInfo
from localkube.wait import wait_for

KWOK_BIN = ROOT / ".cache" / "kwok" / "kwok"
NODE_PREFIX = "kwok-gpu-"
NODE_LABEL = ("type", "kwok")
MANAGE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
NODE_IP = "127.63.0.1"
POD_CIDR = "127.64.0.0/16"
TRAINING_LABEL = "slipway.dev/trainingrun"  # slipway.training.build.RUN_LABEL: on every training pod
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPU_MEMORY_MIB = 81920
LEASE_SECONDS = 40
USER = "kwok"


def binary() -> Path:
    """The kwok binary (``$SLIPWAY_BENCH_KWOK`` overrides); FileNotFoundError names the command that builds it."""
    path = Path(os.environ.get("SLIPWAY_BENCH_KWOK", KWOK_BIN))
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make kwok` (bash bench/build-kwok.sh {KWOK_BIN})")
    return path


def placement() -> dict[str, Any]:
    """What a pod spec (or Slipway's ``nodeSelector``/``tolerations``) needs to land on a kwok node."""
    return {"nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]}, "tolerations": [{**TAINT, "operator": "Equal"}]}


def node_names(count: int) -> list[str]:
    return [f"{NODE_PREFIX}{i}" for i in range(count)]


def node(name: str, gpus: int = 8, cpu: str = "64", memory: str = "512Gi", pods: int = 110) -> dict[str, Any]:
    """A fake GPU Node as registered (kwok's node-initialize stage keeps this capacity)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": str(pods), GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                NODE_LABEL[0]: NODE_LABEL[1],
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": GPU_PRODUCT,
                "nvidia.com/gpu.memory": str(GPU_MEMORY_MIB),
            },
            "annotations": {MANAGE_ANNOTATION[0]: MANAGE_ANNOTATION[1], "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [dict(TAINT)]},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


# --------------------------------------------------------------------------- stages

_NODE_CONDITIONS = """\
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_NODE_INITIALIZE = (
    _NODE_CONDITIONS
    + """\
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ .metadata.name | Quote }}
  type: Hostname
allocatable:
{{ YAML .status.allocatable 1 }}
capacity:
{{ YAML .status.capacity 1 }}
{{ $kwokVersion := printf "kwok-%s" Version }}
nodeInfo:
  architecture: amd64
  bootID: ""
  containerRuntimeVersion: {{ $kwokVersion }}
  kernelVersion: {{ $kwokVersion }}
  kubeProxyVersion: {{ $kwokVersion }}
  kubeletVersion: {{ $kwokVersion }}
  machineID: ""
  operatingSystem: linux
  osImage: ""
  systemUUID: ""
phase: Running
"""
)

_POD_READY = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

_POD_COMPLETE = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodCompleted
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: PodCompleted
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Succeeded
"""

_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}


def _stage(name: str, kind: str, selector: list[dict[str, Any]], nxt: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, "selector": {"matchExpressions": selector},
                 "next": nxt, **spec},
    }  # fmt: skip


def stages(train_seconds: float, train_jitter_seconds: float = 0.0) -> list[dict[str, Any]]:
    """The Stage objects kwok plays (see the module's docstring)."""
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    train_ms = int(train_seconds * 1000)
    return [
        _stage("node-initialize", "Node", [{"key": ready, "operator": "NotIn", "values": ["True"]}],
               {"statusTemplate": _NODE_INITIALIZE}),
        _stage("node-heartbeat-with-lease", "Node",
               [{"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": ready, "operator": "In", "values": ["True"]}],
               {"statusTemplate": _NODE_CONDITIONS},
               delay={"durationMilliseconds": 600_000, "jitterDurationMilliseconds": 610_000},
               immediateNextStage=True),
        _stage("pod-ready", "Pod",
               [_NOT_DELETED, {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                {"key": ready, "operator": "NotIn", "values": ["True"]}],
               {"statusTemplate": _POD_READY}),
        _stage("pod-complete-training", "Pod",
               [_NOT_DELETED, {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": f'.metadata.labels["{TRAINING_LABEL}"]', "operator": "Exists"}],
               {"statusTemplate": _POD_COMPLETE},
               delay={"durationMilliseconds": train_ms,
                      "jitterDurationMilliseconds": train_ms + int(train_jitter_seconds * 1000)}),
        _stage("pod-delete", "Pod", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
               {"delete": True}),
    ]  # fmt: skip


def configuration(server_port: int) -> dict[str, Any]:
    """The KwokConfiguration: loopback addresses, only the annotated nodes, leases like a kubelet."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "cidr": POD_CIDR,
            "nodeIP": NODE_IP,
            "manageNodesWithAnnotationSelector": f"{MANAGE_ANNOTATION[0]}={MANAGE_ANNOTATION[1]}",
            "serverAddress": f"127.0.0.1:{server_port}",
            "nodeLeaseDurationSeconds": LEASE_SECONDS,
            # kwok's defaults, written out: a config file that names none leaves them at 0.
            "nodeLeaseParallelism": 4,
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enablePodsOnNodeSyncListPager": True,
            "enablePodsOnNodeSyncStreamWatch": False,
        },
    }


# --------------------------------------------------------------------------- the process


@dataclass
class Kwok:
    """A running kwok and the nodes it plays."""

    names: list[str]
    proc: Proc
    directory: Path
    url: str
    """kwok's own server (``/healthz``, ``/metrics``), on 127.0.0.1"""
    kube: Kube = field(repr=False)

    @property
    def log(self) -> Path:
        return Path(self.proc.log)

    def alive(self) -> bool:
        return self.proc.alive()

    def ready_nodes(self) -> list[str]:
        """The kwok nodes that are Ready now."""
        found = []
        for item in self.kube.get("/api/v1/nodes", labelSelector=f"{NODE_LABEL[0]}={NODE_LABEL[1]}")["items"]:
            conditions = {c["type"]: c["status"] for c in (item.get("status") or {}).get("conditions") or []}
            if conditions.get("Ready") == "True":
                found.append(item["metadata"]["name"])
        return found

    def wait_ready(self, timeout: float = 120) -> None:
        def check() -> bool:
            if not self.alive():
                raise RuntimeError(f"kwok exited; see {self.log}")
            return set(self.names) <= set(self.ready_nodes())

        wait_for(check, timeout, f"{len(self.names)} kwok nodes Ready", interval=0.5)


def kubeconfig(info: ClusterInfo, directory: Path) -> Path:
    """kwok's own identity (user ``kwok``, ``system:masters``, not audited)."""
    pair = _load_ca(info.pki).issue(USER, USER, ("system:masters",))
    path = directory / "kwok.kubeconfig"
    write_kubeconfig(path, info.apiserver_url, info.pki / "ca.crt", pair.cert, pair.key, user=USER)
    return path


def _record(info: ClusterInfo, proc: Proc) -> None:
    """Add kwok to the cluster's recorded processes, so that ``down`` stops it too."""
    current = ClusterInfo.load(info.directory) or info
    current.processes.append(proc)
    current.save()


@contextlib.contextmanager
def running(
    info: ClusterInfo,
    nodes: int,
    directory: Path,
    *,
    train_seconds: float = 30.0,
    train_jitter_seconds: float = 0.0,
    gpus_per_node: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    ready_timeout: float = 180.0,
    keep_nodes: bool = False,
) -> Iterator[Kwok]:
    """Register ``nodes`` fake GPU nodes, run kwok for them, yield once they are Ready; stop kwok
    and delete the nodes (unless ``keep_nodes``) on the way out, also on failure."""
    directory.mkdir(parents=True, exist_ok=True)
    admin = Kube(info.kubeconfig)
    names = node_names(nodes)
    port = free_port()
    config = directory / "kwok.yaml"
    docs = [configuration(port), *stages(train_seconds, train_jitter_seconds)]
    config.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    for name in names:
        admin.ensure("/api/v1/nodes", node(name, gpus_per_node, cpu, memory, pods))
    cmd = [str(binary()), f"--config={config}", f"--kubeconfig={kubeconfig(info, directory)}", "--v=WARN"]
    # kwok reads ~/.kwok/kwok.yaml too when it exists: a working directory of its own keeps it out.
    proc = spawn("kwok", cmd, directory / "kwok.log", env={"KWOK_WORKDIR": str(directory)}, cwd=directory)
    _record(info, proc)
    fake = Kwok(names, proc, directory, f"http://127.0.0.1:{port}", admin)
    try:
        wait_for(lambda: _healthy(fake), 30, f"kwok's /healthz at {fake.url}", interval=0.3)
        if not fake.alive():
            raise RuntimeError(f"kwok exited while starting; see {fake.log}")
        fake.wait_ready(ready_timeout)
        yield fake
    finally:
        proc.stop(timeout=10)
        if not keep_nodes:
            for name in names:
                with contextlib.suppress(Exception):
                    admin.delete(f"/api/v1/nodes/{name}")


def _healthy(fake: Kwok) -> bool:
    if not fake.alive():
        return True  # exited: reported by the caller at once
    try:
        return httpx.get(f"{fake.url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def pods_by_phase(kube: Kube, namespace: str | None = None) -> dict[str, int]:
    """How many pods on kwok nodes are in each phase (a progress figure for the benchmarks)."""
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    counts: dict[str, int] = {}
    for pod in kube.get(path)["items"]:
        if str((pod.get("spec") or {}).get("nodeName") or "").startswith(NODE_PREFIX):
            phase = (pod.get("status") or {}).get("phase") or "Unknown"
            counts[phase] = counts.get(phase, 0) + 1
    return counts
