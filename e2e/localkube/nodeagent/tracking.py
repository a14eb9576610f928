"""Which pod processes a node agent has started, on disk, so none outlives a crash.

Each running container is recorded as ``<state dir>/processes/<pod uid>.json``
(pid, start time, pod). A restarted agent, or ``localkube down``, kills what is
recorded: a pod process never survives its agent unnoticed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from localkube.procs import Proc

log = logging.getLogger(__name__)


class Tracker:
    """Records of the pod processes of one node."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "processes"
        self.dir.mkdir(parents=True, exist_ok=True)

    def record(self, uid: str, proc: Proc, pod: str) -> None:
        path = self.dir / f"{uid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pod": pod, "process": proc.to_dict()}))
        tmp.replace(path)

    def forget(self, uid: str) -> None:
        (self.dir / f"{uid}.json").unlink(missing_ok=True)

    def kill_all(self) -> list[str]:
        """Kill every recorded process (orphans of a previous agent); return their pods."""
        return kill_tracked_processes(self.dir.parent)


def kill_tracked_processes(state_dir: Path) -> list[str]:
    """Kill the process groups recorded under ``state_dir`` and drop the records."""
    killed = []
    for path in sorted((state_dir / "processes").glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            proc = Proc.from_dict(doc["process"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if proc.alive():
            log.info("killing orphaned process %d of pod %s", proc.pid, doc.get("pod"))
            proc.stop(timeout=5)
            killed.append(doc.get("pod", "?"))
        path.unlink(missing_ok=True)
    return killed
