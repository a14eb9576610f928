"""The node agent's main loop: watch the pods bound to this node and give each a worker."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localkube.kube import Kube
from localkube.nodeagent.ipam import IPAM
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


class Agent:
    """localkube's kubelet for one node."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.kube = Kube(cfg.kubeconfig)
        self.node = NodeReporter(self.kube, cfg.node)
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

    # -- main ------------------------------------------------------------------
    def run(self) -> None:
        """Kill orphans, register the node, then watch pods until :meth:`stop`."""
        orphans = self.tracker.kill_all()
        if orphans:
            log.info("killed %d orphaned pod processes: %s", len(orphans), ", ".join(orphans))
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
