"""The Node object: registration with capacity (fake GPUs included), Lease and Ready heartbeats."""

from __future__ import annotations

import logging
import platform
import threading
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from localkube.kube import Kube
from localkube.nodeagent.status import micro_now, now

log = logging.getLogger(__name__)

JSON = dict[str, Any]
LEASE_SECONDS = 40
LEASE_RENEW = 10.0
STATUS_EVERY = 20.0
KUBELET_VERSION = "v1.35.4"


@dataclass
class NodeSpec:
    """What the node advertises."""

    name: str
    cpu: str = "16"
    memory: str = "64Gi"
    pods: int = 110
    gpus: int = 4
    gpu_memory_mib: int = 81920
    gpu_product: str = "NVIDIA-A100-SXM4-80GB"

    def capacity(self) -> dict[str, str]:
        cap = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods), "ephemeral-storage": "100Gi"}
        if self.gpus:
            cap["nvidia.com/gpu"] = str(self.gpus)
        return cap

    def labels(self) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), "amd64"),
            "localkube.slipway.dev/node": "true",
        }
        if self.gpus:
            labels |= {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(self.gpus),
                "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
                "nvidia.com/gpu.product": self.gpu_product,
            }
        return labels


class NodeReporter:
    """Registers the Node and keeps its Lease and Ready condition fresh (in a thread)."""

    def __init__(self, kube: Kube, spec: NodeSpec, kubelet_port: int = 0) -> None:
        self.kube = kube
        self.spec = spec
        self.kubelet_port = kubelet_port
        self.stop = threading.Event()
        self.uid = ""

    def _status(self) -> JSON:
        ts = now()

        def cond(kind: str, status: str, reason: str, message: str) -> JSON:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": ts,
                "lastTransitionTime": self._transition.get(kind, ts),
            }

        return {
            "capacity": self.spec.capacity(),
            "allocatable": self.spec.capacity(),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "localkube node agent is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": "localkube",
                "containerRuntimeVersion": "localkube://0.1",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": self.spec.labels()["kubernetes.io/arch"],
            },
        }

    def register(self) -> None:
        """Create the Node (or update an existing one's labels), then post its status."""
        ts = now()
        self._transition = {k: ts for k in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.spec.name, "labels": self.spec.labels()},
            "status": self._status(),
        }
        try:
            node = self.kube.create("/api/v1/nodes", body)
            log.info("registered node %s", self.spec.name)
        except ApiException as e:
            if e.status != 409:
                raise
            node = self.kube.patch(f"/api/v1/nodes/{self.spec.name}", {"metadata": {"labels": self.spec.labels()}})
            log.info("node %s exists; labels updated", self.spec.name)
        self.uid = node["metadata"]["uid"]
        self.post_status()
        self.renew_lease()

    def post_status(self) -> None:
        self.kube.patch(f"/api/v1/nodes/{self.spec.name}/status", {"status": self._status()})

    def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.spec.name}"
        spec = {"holderIdentity": self.spec.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro_now()}
        try:
            self.kube.patch(path, {"spec": spec}, kind="merge")
        except ApiException as e:
            if e.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.spec.name, "uid": self.uid}
            self.kube.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {"metadata": {"name": self.spec.name, "ownerReferences": [owner]}, "spec": spec},
            )

    def heartbeat_forever(self) -> None:
        """Renew the Lease every 10s and the Ready condition every 20s until stopped."""
        last_status = 0.0
        elapsed = 0.0
        while not self.stop.wait(LEASE_RENEW):
            elapsed += LEASE_RENEW
            try:
                self.renew_lease()
                if elapsed - last_status >= STATUS_EVERY:
                    self.post_status()
                    last_status = elapsed
            except Exception as e:  # keep beating through API server hiccups
                log.warning("heartbeat failed: %s", e)
