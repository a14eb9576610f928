"""The node agent's main loop: watch the pods bound to this node and give each a worker."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localkube.kube import Kube
from localkube.nodeagent.ipam import IPAM
from localkube.nodeagent.kubelet import ContainerView, KubeletAPI, NotFound
from localkube.nodeagent.node import NodeReporter, NodeSpec
from localkube.nodeagent.tracking import Tracker
from localkube.nodeagent.worker import NodeContext, PodWorker
from localkube.state import ROOT

log = logging.getLogger(__name__)

JSON = dict[str, Any]
WORKLOAD_BIN = ROOT / ".venv" / "bin"


@dataclass
class AgentConfig:
    kubeconfig: Path
    node: NodeSpec
    node_index: int
    state_dir: Path
    pods_dir: Path
    ca_file: Path
    restart_backoff: float = 10.0
    workload_bin: Path = WORKLOAD_BIN
    kubelet_port: int = 0  # 0: no kubelet API
    kubelet_cert: Path | None = None
    kubelet_key: Path | None = None


class Agent:
    """localkube's kubelet for one node."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.kube = Kube(cfg.kubeconfig)
        self.node = NodeReporter(self.kube, cfg.node, kubelet_port=cfg.kubelet_port)
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.ipam = IPAM(cfg.state_dir, cfg.node_index)
        self.tracker = Tracker(cfg.state_dir)
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        host = self.kube.api.configuration.host.removeprefix("https://")
        api_host, _, api_port = host.partition(":")
        self.context = NodeContext(
            kube=self.kube,
            pods_dir=cfg.pods_dir,
            ipam=self.ipam,
            tracker=self.tracker,
            allocatable=cfg.node.capacity(),
            restart_backoff=cfg.restart_backoff,
            workload_bin=cfg.workload_bin,
            api_host=api_host,
            api_port=api_port,
            forget=self.forget,
        )

    # -- pods ------------------------------------------------------------------
    def on_list(self, pods: list[JSON]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            self.on_event("MODIFIED", pod)
        with self.lock:
            vanished = [w for uid, w in self.workers.items() if uid not in seen]
        for worker in vanished:
            worker.deleted()
        live = {p["metadata"]["uid"] for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")}
        self.ipam.retain_only(live | set(self.workers))

    def on_event(self, kind: str, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            if kind == "DELETED":
                if worker:
                    worker.deleted()
                return
            if worker:
                worker.update(pod)
                return
            if self.stopping.is_set():
                return
            phase = pod.get("status", {}).get("phase")
            if phase in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
                return  # finished before this agent started: nothing to run
            worker = PodWorker(self.context, pod)
            self.workers[uid] = worker
        worker.start()

    def forget(self, uid: str) -> None:
        with self.lock:
            self.workers.pop(uid, None)

    # -- the kubelet API ---------------------------------------------------------
    def _worker(self, namespace: str, pod: str) -> PodWorker | None:
        with self.lock:
            return next((w for w in self.workers.values() if (w.ns, w.pod_name) == (namespace, pod)), None)

    def container_view(self, namespace: str, pod: str, container: str) -> ContainerView:
        """Where a container's logs are and whether it runs; NotFound if not on this node."""
        worker = self._worker(namespace, pod)
        if worker is not None:
            spec = worker.pod["spec"]
            names = [c["name"] for c in spec.get("initContainers", []) + spec["containers"]]
            if container not in names:
                raise NotFound(f"container {container} is not valid for pod {pod}")
            proc = worker.container
            pid = proc.pid if proc and worker.running_container == container and proc.exit_code() is None else None
            started = ""
            if pid is not None:
                statuses = [worker.status.container, *worker.status.init]
                status = next(s for s in statuses if s.name == container)
                started = status.state.get("running", {}).get("startedAt", "")
            return ContainerView(namespace, pod, container, worker.run_dir, pid, started)
        # A pod that finished before this agent started has no worker: its files remain.
        obj = self.kube.get_or_none(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        if obj is None or obj["spec"].get("nodeName") != self.cfg.node.name:
            raise NotFound(f'pods "{pod}" not found on node {self.cfg.node.name}')
        run_dir = self.cfg.pods_dir / f"{namespace}_{pod}" / obj["metadata"]["uid"]
        return ContainerView(namespace, pod, container, run_dir, None)

    def running_containers(self) -> list[ContainerView]:
        with self.lock:
            workers = list(self.workers.values())
        out = []
        for w in workers:
            if w.container is not None and w.container.exit_code() is None and w.running_container:
                try:
                    out.append(self.container_view(w.ns, w.pod_name, w.running_container))
                except NotFound:
                    continue
        return out

    def _serve_kubelet_api(self) -> None:
        cfg = self.cfg
        if not cfg.kubelet_port or cfg.kubelet_cert is None or cfg.kubelet_key is None:
            return
        self.kubelet = KubeletAPI(
            cfg.kubelet_port,
            cfg.kubelet_cert,
            cfg.kubelet_key,
            cfg.ca_file,
            self.container_view,
            self.running_containers,
        )
        self.kubelet.start()

    # -- main ------------------------------------------------------------------
    def run(self) -> None:
        """Kill orphans, register the node, then watch pods until :meth:`stop`."""
        orphans = self.tracker.kill_all()
        if orphans:
            log.info("killed %d orphaned pod processes: %s", len(orphans), ", ".join(orphans))
        self._serve_kubelet_api()
        self.node.register()
        threading.Thread(target=self.node.heartbeat_forever, name="heartbeat", daemon=True).start()
        log.info("node %s ready; watching its pods", self.cfg.node.name)
        self.kube.watch(
            "/api/v1/pods",
            self.on_list,
            self.on_event,
            self.stopping.is_set,
            fieldSelector=f"spec.nodeName={self.cfg.node.name}",
        )

    def stop(self, timeout: float = 15) -> None:
        """Stop every pod process (no API updates), then the heartbeat."""
        self.stopping.set()
        self.node.stop.set()
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.shutdown()
        for w in workers:
            w.join(timeout)
        self.tracker.kill_all()
