"""The operator run by the tests: in-process under kopf's test runner, or as a replica process; and a
TCP relay that a test cuts to make an outage."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kopf.testing import KopfRunner

from slipway_testing.cluster import ROOT

# The key of the MLflow proofs (slipway.mlflow.proof) of the operators the tests run, as an operator
# pod gets it from its Secret: the same for every operator, so one restarted or replaced honours them.
TEST_PROOF_KEY = "slipway-tests-mlflow-proof-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """The operator under kopf's test runner (a thread of this process), watching one namespace (and ``also``)."""

    def __init__(
        self, cluster: Any, namespace: str, mlflow_url: str | None = None, kubeconfig: Any = None,
        also: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        self.cluster = cluster
        self.namespace = namespace
        self.also = also  # more namespaces it watches
        self.mlflow_url = mlflow_url or cluster.mlflow_url
        self.kubeconfig = kubeconfig or cluster.kubeconfig  # another identity, e.g. an audited one
        self.runner: KopfRunner | None = None

    def start(self) -> None:
        os.environ["KUBECONFIG"] = str(self.kubeconfig)
        os.environ["SLIPWAY_MLFLOW_URL"] = self.mlflow_url or ""
        os.environ["SLIPWAY_PROMETHEUS_URL"] = self.cluster.prometheus_url or ""
        os.environ["SLIPWAY_METRICS_PORT"] = "0"
        os.environ.setdefault("SLIPWAY_MLFLOW_PROOF_KEY", TEST_PROOF_KEY)  # one key for every operator of the run
        args = ["run", "--standalone", "--namespace", self.namespace, "-m", "slipway.operator"]
        args += [arg for more in self.also for arg in ("--namespace", more)]
        args += ["--liveness", f"http://127.0.0.1:{free_port()}/healthz"]
        self.runner = KopfRunner(args, timeout=60)
        self.runner.__enter__()

    def stop(self) -> None:
        """Stop as a crash would look to the cluster: no cleanup of children or status."""
        if self.runner is not None:
            runner, self.runner = self.runner, None
            runner.__exit__(None, None, None)

    def restart(self) -> None:
        self.stop()
        self.start()


class OperatorReplica:
    """``python -m slipway`` as a process, as one operator pod would run: named ``POD_NAME``, electing
    its leader in ``namespace`` (or ``standalone``), watching ``namespace``; its output in ``logs``.
    A process, so that a test can SIGKILL it at any line."""

    def __init__(
        self,
        name: str,
        cluster: Any,
        namespace: str,
        logs: Path,
        *,
        standalone: bool = False,
        kubeconfig: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.metrics_port = free_port()
        self.liveness = f"http://127.0.0.1:{free_port()}/healthz"
        self.log_path = logs / f"{name}.log"
        cmd = [sys.executable, "-m", "slipway", "-n", namespace, "--metrics-port", str(self.metrics_port),
               "--liveness", self.liveness]  # fmt: skip
        cmd += ["--standalone"] if standalone else ["--leader-election-namespace", namespace]
        environ = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig or cluster.kubeconfig),
            "SLIPWAY_MLFLOW_URL": cluster.mlflow_url or "",
            "SLIPWAY_PROMETHEUS_URL": cluster.prometheus_url or "",
            "SLIPWAY_METRICS_ADDRESS": "127.0.0.1",
            "SLIPWAY_MLFLOW_PROOF_KEY": os.environ.get("SLIPWAY_MLFLOW_PROOF_KEY", TEST_PROOF_KEY),
            "POD_NAME": name,
            **(env or {}),
        }
        environ.pop("POD_NAMESPACE", None)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT)
        self.started = time.monotonic()

    def metrics_text(self) -> str:
        """This replica's /metrics; "" while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as answer:
                return str(answer.read().decode())
        except OSError:
            return ""

    def metric(self, name: str) -> float | None:
        """The sum of a metric's samples on this replica's /metrics; None while it does not answer."""
        text = self.metrics_text()
        if not text:
            return None
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " ")
        )

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.liveness, timeout=5) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class TcpRelay:
    """A TCP relay on 127.0.0.1 to a target, that a test can cut and restore (an outage on demand)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: socket.socket | None = None
        self._threads: list[Any] = []
        self._open: set[socket.socket] = set()  # relayed connections, cut too when the relay stops

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        import threading

        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self._server = server

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    s.close()

        def accept() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                upstream = socket.create_connection(self.target)
                self._open.update((conn, upstream))
                for a, b in ((conn, upstream), (upstream, conn)):
                    threading.Thread(target=pipe, args=(a, b), daemon=True).start()

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """An outage: new connections are refused (shutdown wakes the blocked accept) and the open
        ones are cut, so a client's kept-alive connection does not outlive it."""
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
            self._server = None
        for sock in list(self._open):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._open.clear()
