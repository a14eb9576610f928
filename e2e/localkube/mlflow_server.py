"""Start and stop a real MLflow tracking server for tests and the local cluster.

MLflow lives in its own virtualenv (``.cache/mlflow-venv``, made by ``make
mlflow-env``) because its pins conflict with the kubernetes client's.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
MLFLOW_BIN = ROOT / ".cache" / "mlflow-venv" / "bin" / "mlflow"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# A lean server: no job runner (its extra worker processes are not needed).
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@dataclass
class MlflowServer:
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path

    def stop(self, timeout: float = 15) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def launch_mlflow(
    workdir: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    allowed_hosts: str | None = None,
    mlflow_bin: Path = MLFLOW_BIN,
) -> MlflowServer:
    """Start ``mlflow server`` (SQLite store and artifacts under ``workdir``) without waiting for it;
    ``mlflow_bin`` is the ``mlflow`` of the release to run (the pinned one by default).

    The server runs in its own session: its pid is also its process group.
    """
    if not mlflow_bin.exists():
        raise RuntimeError(f"{mlflow_bin} is missing: run `make mlflow-env` (or `make install`) first")
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    cmd = [
        str(mlflow_bin), "server",
        "--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}",
        "--artifacts-destination", str(workdir / "artifacts"),
        "--serve-artifacts",
        "--workers", "1",
        "--host", host, "--port", str(port),
    ]  # fmt: skip
    if allowed_hosts:
        cmd += ["--allowed-hosts", allowed_hosts]
    env = dict(os.environ, **SERVER_ENV)
    log = open(workdir / "mlflow.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    return MlflowServer(url=f"http://{host}:{port}", process=proc, workdir=workdir)


def wait_healthy(server: MlflowServer, ready_timeout: float = 90) -> MlflowServer:
    """Wait until ``server`` answers /health; stop it and raise if it exits or times out."""
    proc, url, workdir = server.process, server.url, server.workdir
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode}; see {workdir / 'mlflow.log'}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)  # polling a starting server's /health
    server.stop()
    raise TimeoutError(f"mlflow server at {url} not healthy after {ready_timeout}s; see {workdir / 'mlflow.log'}")


def start_mlflow(
    workdir: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    allowed_hosts: str | None = None,
    ready_timeout: float = 90,
    mlflow_bin: Path = MLFLOW_BIN,
) -> MlflowServer:
    """Start ``mlflow server`` with a SQLite store under ``workdir``; wait for /health."""
    return wait_healthy(launch_mlflow(workdir, host, port, allowed_hosts, mlflow_bin), ready_timeout)
