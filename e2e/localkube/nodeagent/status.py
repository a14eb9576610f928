"""Pod status as the kubelet reports it: phase, conditions, container statuses."""

from __future__ import annotations

import copy
import datetime
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


def now() -> str:
    """RFC 3339 timestamp, seconds precision, UTC."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    """RFC 3339 timestamp with microseconds (Lease renewTime)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class ContainerStatus:
    """The status of one container localkube runs (the first container, or an init container)."""

    name: str
    image: str
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    state: JSON = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JSON = field(default_factory=dict)
    container_id: str = ""

    def waiting(self, reason: str, message: str = "") -> None:
        self.state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        self.ready = self.started = False

    def running(self, pid: int) -> None:
        self.container_id = f"localkube://{pid}"
        self.state = {"running": {"startedAt": now()}}
        self.started = True
        self.ready = False

    def terminated(self, exit_code: int, reason: str, message: str = "") -> None:
        started_at = self.state.get("running", {}).get("startedAt", now())
        term: JSON = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started_at,
            "finishedAt": now(),
            "containerID": self.container_id,
        }
        if message:
            term["message"] = message
        self.state = {"terminated": term}
        self.ready = self.started = False

    def completed(self) -> bool:
        """An init container that ran to success."""
        return self.state.get("terminated", {}).get("exitCode") == 0

    def to_dict(self) -> JSON:
        out: JSON = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


@dataclass
class PodStatus:
    """Everything the node agent owns in a pod's status."""

    container: ContainerStatus
    others: list[JSON] = field(default_factory=list)
    init: list[ContainerStatus] = field(default_factory=list)  # spec.initContainers, in order
    phase: str = "Pending"
    pod_ip: str = ""
    start_time: str = field(default_factory=now)
    sandbox_ready: bool = False
    reason: str = ""
    message: str = ""
    _conditions: dict[str, JSON] = field(default_factory=dict)

    def _condition(self, kind: str, status: bool, reason: str = "", message: str = "") -> JSON:
        value = "True" if status else "False"
        old = self._conditions.get(kind)
        changed = old is None or old["status"] != value
        cond: JSON = {
            "type": kind,
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": now() if changed else old["lastTransitionTime"],  # type: ignore[index]
        }
        if reason and not status:
            cond["reason"] = reason
        if message and not status:
            cond["message"] = message
        self._conditions[kind] = cond
        return cond

    def to_dict(self) -> JSON:
        terminal = self.phase in ("Succeeded", "Failed")
        ready = self.container.ready and not terminal
        if terminal:
            why, msg = "PodCompleted", ""
        else:
            why, msg = "ContainersNotReady", f"containers with unready status: [{self.container.name}]"
        pending = [c.name for c in self.init if not c.completed()]
        init_msg = f"containers with incomplete status: [{' '.join(pending)}]"
        conditions = [
            self._condition("PodReadyToStartContainers", self.sandbox_ready and not terminal),
            self._condition("Initialized", not pending, "ContainersNotInitialized", init_msg),
            self._condition("ContainersReady", ready, why, msg),
            self._condition("Ready", ready, why, msg),
        ]
        status: JSON = {
            "phase": self.phase,
            "conditions": conditions,
            "containerStatuses": [self.container.to_dict(), *self.others],
            **({"initContainerStatuses": [c.to_dict() for c in self.init]} if self.init else {}),
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
        }
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.reason:
            status["reason"] = self.reason
            status["message"] = self.message
        return copy.deepcopy(status)


def other_containers(pod: JSON) -> list[JSON]:
    """Statuses for containers after the first, which localkube does not run."""
    return [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "waiting": {
                    "reason": "NotRunByLocalkube",
                    "message": "localkube runs only the first container of a pod",
                }
            },
        }
        for c in pod["spec"]["containers"][1:]
    ]
