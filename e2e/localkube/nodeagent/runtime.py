"""Container processes: start through ``podexec.py``, wait, stop by process group."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localkube.nodeagent.logs import LogWriter
from localkube.procs import Proc, start_ticks
from localkube.state import ROOT

PODEXEC = Path(__file__).with_name("podexec.py")
WORKLOAD_ROOT = ROOT  # the project: its .venv runs the pods' commands


@dataclass
class ContainerProcess:
    """A running (or finished) container process; the pid is also its process group."""

    popen: subprocess.Popen[bytes]
    proc: Proc
    spec_path: Path
    started_mono: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        """None while running; the exit code, or 128+signal if killed."""
        rc = self.popen.poll()
        if rc is None:
            return None
        return 128 - rc if rc < 0 else rc

    def start_error(self) -> str | None:
        """The reason the container could not start, if podexec reported one."""
        try:
            return Path(str(self.spec_path) + ".error").read_text()
        except OSError:
            return None

    def signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self, grace: float) -> int:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds; return the exit code."""
        if self.popen.poll() is None:
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=max(grace, 0))
        self.signal_group(signal.SIGKILL)  # also whatever the main process left behind
        self.popen.wait()
        code = self.exit_code()
        assert code is not None
        return code


def start(
    name: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    hostname: str,
    mounts: list[dict[str, Any]],
    run_dir: Path,
    log: Path,
    on_exit: Callable[[], None],
) -> ContainerProcess:
    """Start the container's process (its own session); its stdout and stderr go to the
    CRI-format log file ``log`` (see :mod:`localkube.nodeagent.logs`).

    ``on_exit`` is called from a watcher thread when the process has ended and its output is
    written.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / "exec.json"
    Path(str(spec_path) + ".error").unlink(missing_ok=True)
    fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # env may hold secrets
    with os.fdopen(fd, "w") as f:
        keep = [str(WORKLOAD_ROOT)]
        json.dump({"argv": argv, "env": env, "cwd": cwd, "hostname": hostname, "mounts": mounts, "keep": keep}, f)
    writer = LogWriter(log)
    popen = subprocess.Popen(
        [sys.executable, "-I", "-S", str(PODEXEC), str(spec_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
        start_new_session=True,
    )
    assert popen.stdout is not None and popen.stderr is not None
    writer.pump(popen.stdout, "stdout")
    writer.pump(popen.stderr, "stderr")
    proc = Proc(name=name, pid=popen.pid, ticks=start_ticks(popen.pid) or 0, log=str(log))
    container = ContainerProcess(popen=popen, proc=proc, spec_path=spec_path, started_mono=time.monotonic())

    def watch() -> None:
        popen.wait()
        writer.wait(2.0)  # children that keep the pipes open are killed with the group
        on_exit()

    threading.Thread(target=watch, name=f"wait-{name}", daemon=True).start()
    return container
