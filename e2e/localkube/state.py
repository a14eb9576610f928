"""What ``localkube up`` started, kept in ``<cluster dir>/state.json`` so ``down`` stops exactly that."""

from __future__ import annotations

import json
import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from localkube.procs import Proc

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = Path(os.environ.get("LOCALKUBE_DIR", ROOT / ".cluster"))


@dataclass
class ClusterInfo:
    """A local cluster: where it lives, how to reach it and which processes make it up."""

    directory: Path
    apiserver_url: str = ""
    mlflow_url: str | None = None
    prometheus_url: str | None = None
    gateway_port: int | None = None
    """The port of the gateway's listener (see :mod:`localkube.gateway`); None without a gateway."""
    audit_log: Path | None = None
    """The kube-apiserver's audit log (see :mod:`localkube.audit`); None for a cluster started without one."""
    nodes: list[str] = field(default_factory=list)
    processes: list[Proc] = field(default_factory=list)
    stopped: bool = False

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    def save(self) -> None:
        doc: dict[str, Any] = {
            "directory": str(self.directory),
            "apiserver_url": self.apiserver_url,
            "kubeconfig": str(self.kubeconfig),
            "mlflow_url": self.mlflow_url,
            "prometheus_url": self.prometheus_url,
            "gateway_port": self.gateway_port,
            "audit_log": str(self.audit_log) if self.audit_log else None,
            "nodes": self.nodes,
            "processes": [p.to_dict() for p in self.processes],
            "stopped": self.stopped,
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(self.state_file)

    def record(self, started: list[Proc], **fields: Any) -> None:
        """Record the processes ``started`` (in place of any of the same names) and ``fields`` in the
        state on disk as it is now, under a lock: the cluster's components (a gateway, KEDA, Kueue) are
        started by several test workers at once, and each saving the processes it had loaded would
        drop another's (then found not running, started twice over the same files)."""
        import fcntl

        with (self.directory / "state.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = ClusterInfo.load(self.directory) or self
            names = {p.name for p in started}
            current.processes = [p for p in current.processes if p.name not in names] + started
            for name, value in fields.items():
                setattr(current, name, value)
            current.save()
        self.processes = current.processes
        for name, value in fields.items():
            setattr(self, name, value)

    @classmethod
    def load(cls, directory: Path) -> ClusterInfo | None:
        try:
            doc = json.loads((directory / "state.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(
            directory=directory,
            apiserver_url=doc["apiserver_url"],
            mlflow_url=doc.get("mlflow_url"),
            prometheus_url=doc.get("prometheus_url"),
            gateway_port=doc.get("gateway_port"),
            audit_log=Path(doc["audit_log"]) if doc.get("audit_log") else None,
            nodes=doc.get("nodes", []),
            processes=[Proc.from_dict(p) for p in doc.get("processes", [])],
            stopped=doc.get("stopped", False),
        )

    def any_alive(self) -> bool:
        return any(p.alive() for p in self.processes)

    def admin_ssl_context(self) -> ssl.SSLContext:
        """TLS context trusting the cluster CA and presenting the admin client certificate."""
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def apiserver_ready(self) -> bool:
        """True if the API server answers ``/readyz`` with ok."""
        try:
            r = httpx.get(f"{self.apiserver_url}/readyz", verify=self.admin_ssl_context(), timeout=3)
        except (httpx.HTTPError, OSError):
            return False
        return r.status_code == 200

    def unhealthy_reason(self, ready_timeout: float = 10) -> str | None:
        """Why this cluster cannot be used (stopped, a process gone, API not ready), or None."""
        if self.stopped:
            return "it was stopped"
        if not self.processes:
            return "no processes are recorded"
        dead = [p.name for p in self.processes if not p.alive()]
        if dead:
            return f"not running: {', '.join(dead)}"
        deadline = time.monotonic() + ready_timeout
        while not self.apiserver_ready():
            if time.monotonic() > deadline:
                return f"{self.apiserver_url}/readyz is not ok"
            time.sleep(0.5)  # a busy API server may need a moment
        return None

    def healthy(self) -> bool:
        """All recorded processes alive and the API server ready."""
        return self.unhealthy_reason() is None
