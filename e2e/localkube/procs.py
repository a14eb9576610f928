"""Background processes: start detached in their own session, stop by process group.

A process is identified by its pid *and* its start time (from ``/proc``), so a
recycled pid is never signalled by mistake.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass
class Proc:
    """A process started by localkube."""

    name: str
    pid: int
    ticks: int
    log: str = ""
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set on top of the launcher's environment

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Proc:
        return cls(**d)

    def start_again(self, cwd: Path | None = None) -> Proc:
        """The same command with the same environment settings, its output appended to the same log."""
        return spawn(self.name, self.cmd, Path(self.log), env=self.env, cwd=cwd)

    def alive(self) -> bool:
        _reap(self.pid)
        return start_ticks(self.pid) == self.ticks

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM the process group, wait up to ``timeout``, then SIGKILL it."""
        if not self.alive():
            return
        _killpg(self.pid, signal.SIGTERM)
        if wait_dead(self, timeout):
            return
        _killpg(self.pid, signal.SIGKILL)
        wait_dead(self, 5)


def _killpg(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_dead(proc: Proc, timeout: float) -> bool:
    """Wait until ``proc`` has exited; True if it did within ``timeout``."""
    deadline = time.monotonic() + timeout
    while proc.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # polling a process that is not necessarily our child
    return True


def spawn(
    name: str,
    cmd: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Proc:
    """Start ``cmd`` detached (new session, stdin from /dev/null, output appended to ``log``), with
    ``env`` set on top of this process's environment (and recorded, so a restart keeps it)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    ticks = start_ticks(popen.pid)
    if ticks is None:
        popen.wait()
        raise RuntimeError(f"{name} exited at once with {popen.returncode}; see {log}")
    # The Popen object is dropped: liveness is tracked through /proc, and
    # _reap() collects the exit status while we are still the parent.
    popen.returncode = 0  # silence "subprocess still running" warnings on garbage collection
    return Proc(name=name, pid=popen.pid, ticks=ticks, log=str(log), cmd=list(cmd), env=dict(env or {}))


def group_rss_kib(pgid: int) -> int:
    """Total resident set size of the processes in process group ``pgid``, in KiB."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            total += rss_kib(int(stat.parent.name))
    return total


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
