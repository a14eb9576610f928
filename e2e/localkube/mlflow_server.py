"""Start and stop a real MLflow tracking server for tests and the local cluster.

MLflow lives in its own virtualenv (``.cache/mlflow-venv``, made by ``make
mlflow-env``) because its pins conflict with the kubernetes client's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
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


# MLflow's basic-auth app (mlflow/server/auth/config.py reads the file MLFLOW_AUTH_CONFIG_PATH names,
# section [mlflow]); the admin is created from it the first time the app starts. NO_PERMISSIONS by
# default: a user reaches only what is granted to it (MLflow's own default, READ, lets every user read
# every experiment).
AUTH_CONFIG = """[mlflow]
default_permission = NO_PERMISSIONS
database_uri = sqlite:///{db}
admin_username = {username}
admin_password = {password}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
grant_default_workspace_access = false
"""
ADMIN = "admin"


@dataclass
class MlflowServer:
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    # (username, password) of the basic-auth app's admin; None: a server without authentication.
    admin: tuple[str, str] | None = None

    def stop(self, timeout: float = 15) -> None:
        """Stop the server and its workers: ``mlflow server`` runs gunicorn or uvicorn as children,
        which outlive it when only it is signalled; they share its session's process group."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # workers left behind by a server that exited

    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            self.process.send_signal(sig)


def auth_env(workdir: Path) -> tuple[dict[str, str], tuple[str, str]]:
    """The environment of a server with MLflow's basic-auth app: its config file (written to
    ``workdir/basic_auth.ini``, readable by its owner only, with a generated admin password) and
    the static key of its CSRF protection (MLFLOW_FLASK_SERVER_SECRET_KEY); and the admin."""
    password = secrets.token_urlsafe(24)
    path = workdir / "basic_auth.ini"
    path.touch(mode=0o600)
    path.write_text(AUTH_CONFIG.format(db=workdir / "basic_auth.db", username=ADMIN, password=password))
    env = {"MLFLOW_AUTH_CONFIG_PATH": str(path), "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32)}
    return env, (ADMIN, password)


def launch_mlflow(
    workdir: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    allowed_hosts: str | None = None,
    mlflow_bin: Path = MLFLOW_BIN,
    *,
    auth: bool = False,
) -> MlflowServer:
    """Start ``mlflow server`` (SQLite store and artifacts under ``workdir``) without waiting for it;
    ``mlflow_bin`` is the ``mlflow`` of the release to run (the pinned one by default). ``auth``: with
    MLflow's basic-auth app (``--app-name basic-auth``, the ``mlflow[auth]`` extra), every request
    but /health authenticated, an admin in ``MlflowServer.admin`` and no permission by default.

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
    admin = None
    if auth:
        cmd += ["--app-name", "basic-auth"]
        extra, admin = auth_env(workdir)
        env.update(extra)
    log = open(workdir / "mlflow.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    return MlflowServer(url=f"http://{host}:{port}", process=proc, workdir=workdir, admin=admin)


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
    *,
    auth: bool = False,
) -> MlflowServer:
    """Start ``mlflow server`` with a SQLite store under ``workdir``; wait for /health. ``auth``: see
    launch_mlflow."""
    return wait_healthy(launch_mlflow(workdir, host, port, allowed_hosts, mlflow_bin, auth=auth), ready_timeout)
