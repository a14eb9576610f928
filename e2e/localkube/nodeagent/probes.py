"""Readiness and liveness probes: ``httpGet``, ``tcpSocket`` and ``exec``.

Defaults as in Kubernetes: period 10s, timeout 1s, success threshold 1,
failure threshold 3; ``host`` defaults to the pod IP. ``exec`` probes run in
the container's mount namespace (``nsenter``) with its environment.
"""

from __future__ import annotations

import http.client
import logging
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

JSON = dict[str, Any]


def _port(value: int | str, container: JSON) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for p in container.get("ports", []):
        if p.get("name") == value:
            return int(p["containerPort"])
    raise ValueError(f"named port {value!r} not found in the container")


def check(probe: JSON, pod_ip: str, container: JSON, pid: int | None, env: dict[str, str]) -> bool:
    """Run ``probe`` once; True on success."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            h = probe["httpGet"]
            conn_cls = http.client.HTTPSConnection if h.get("scheme") == "HTTPS" else http.client.HTTPConnection
            kwargs: JSON = {"timeout": timeout}
            if conn_cls is http.client.HTTPSConnection:
                import ssl

                kwargs["context"] = ssl._create_unverified_context()  # kubelet does not verify either
            conn = conn_cls(h.get("host") or pod_ip, _port(h["port"], container), **kwargs)
            try:
                headers = {x["name"]: x["value"] for x in h.get("httpHeaders", [])}
                headers.setdefault("User-Agent", "kube-probe/1.35")
                conn.request("GET", h.get("path", "/"), headers=headers)
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if "tcpSocket" in probe:
            t = probe["tcpSocket"]
            with socket.create_connection((t.get("host") or pod_ip, _port(t["port"], container)), timeout):
                return True
        if "exec" in probe:
            cmd = probe["exec"].get("command", [])
            if pid:
                cmd = ["nsenter", f"--target={pid}", "--mount", "--uts", "--", *cmd]
            return subprocess.run(cmd, env=env, timeout=timeout, capture_output=True).returncode == 0
        log.warning("probe %s is not supported by localkube; treating it as failed", sorted(probe))
        return False
    except (OSError, ValueError, subprocess.TimeoutExpired, http.client.HTTPException):
        return False


@dataclass
class Prober:
    """One probe's schedule and thresholds; ``result`` is the current verdict."""

    probe: JSON
    started: float
    result: bool
    successes: int = 0
    failures: int = 0
    next_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.next_at = self.started + float(self.probe.get("initialDelaySeconds", 0))

    @property
    def period(self) -> float:
        return float(self.probe.get("periodSeconds", 10))

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def run(self, pod_ip: str, container: JSON, pid: int | None, env: dict[str, str]) -> bool:
        """Probe now; return True if the verdict changed."""
        ok = check(self.probe, pod_ip, container, pid, env)
        self.next_at = time.monotonic() + self.period
        before = self.result
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.probe.get("successThreshold", 1)):
                self.result = True
        else:
            self.failures, self.successes = self.failures + 1, 0
            if self.failures >= int(self.probe.get("failureThreshold", 3)):
                self.result = False
        return self.result != before
