"""What the benchmarks of ``bench/`` share: a local cluster, the Slipway CRDs, the operator of a
checkout as a subprocess, and the run's provenance (commit, machine, the operator's log).

Imported by the scenarios (``bench/scenario_*.py``). Nothing here runs under ``make test`` or CI.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from localkube.audit import requests_by, summarize
from localkube.bootstrap import apply_crds
from localkube.cluster import ClusterConfig, down, up
from localkube.kube import Kube
from localkube.state import ClusterInfo
from localkube.wait import wait_for

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION = "slipway.dev", "v1alpha1"
IMAGE = "ghcr.io/slipway-dev/slipway:0.1.0"
PROOF_KEY = secrets.token_hex(32)


def log(text: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the cluster


@contextlib.contextmanager
def local_cluster(keep_dir: bool = False, prefix: str = "slipway-bench-") -> Iterator[ClusterInfo]:
    """A local cluster (``localkube``) with MLflow and Prometheus in a new directory under ``/tmp``;
    stopped and removed on the way out, also on failure or Ctrl-C (the directory is kept with
    ``keep_dir``)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    log(f"cluster in {directory}")
    try:
        t0 = time.monotonic()
        info = up(ClusterConfig(directory=directory))
        log(f"cluster ready in {time.monotonic() - t0:.1f}s: {info.apiserver_url}")
        if not (info.mlflow_url and info.prometheus_url):
            raise SystemExit("the cluster has no MLflow or no Prometheus")
        yield info
    finally:
        log("stopping the cluster")
        down(directory)
        if keep_dir:
            log(f"cluster directory kept: {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


def install_crds(kube: Kube, crds: Path) -> list[str]:
    """Apply the CRDs of ``crds/slipway.dev_*.yaml``; wait until they are Established and served."""
    docs = [yaml.safe_load(path.read_text()) for path in sorted(crds.glob("slipway.dev_*.yaml"))]
    if not docs:
        raise FileNotFoundError(f"no slipway.dev_*.yaml in {crds}")
    names = apply_crds(kube, docs, field_manager="slipway-bench")
    # Slipway's pods use the PriorityClasses of manifests/ (as `kubectl apply -k manifests/` installs them).
    for body in yaml.safe_load_all((crds.parent / "manifests" / "priorityclasses.yaml").read_text()):
        kube.ensure("/apis/scheduling.k8s.io/v1/priorityclasses", body)
    return names


def create_namespace(kube: Kube, name: str) -> None:
    """A namespace, once its default ServiceAccount exists (pods need it)."""
    kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    wait_for(lambda: kube.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 60,
             f"the default service account of {name}")  # fmt: skip


def is_ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return ready.get("status") == "True" and status.get("observedGeneration") == obj["metadata"].get("generation")


def describe(obj: dict[str, Any] | None) -> str:
    if obj is None:
        return "absent"
    status = obj.get("status") or {}
    conds = ", ".join(f"{c['type']}={c['status']}/{c.get('reason', '')}" for c in status.get("conditions") or [])
    return f"phase {status.get('phase')}; {conds or 'no conditions'}"


# --------------------------------------------------------------------------- the operator under test


class Operator:
    """``python -m slipway`` of the checkout under test, as a subprocess in its own session."""

    def __init__(
        self, source: Path, env: dict[str, str], namespaces: str | Sequence[str], log_path: Path,
        launcher: Sequence[str] = ("-m", "slipway"),
    ) -> None:  # fmt: skip
        """``launcher``: what follows the interpreter in place of ``-m slipway`` (``bench.memprofile``
        runs the operator under tracemalloc)."""
        self.source = source
        self.env = env
        self.namespaces = [namespaces] if isinstance(namespaces, str) else list(namespaces)
        self.log_path = log_path
        self.launcher = list(launcher)
        self.proc: subprocess.Popen[bytes] | None = None

    def check_import(self) -> str:
        """Where the subprocess imports ``slipway`` from; must be ``DIR/operator/slipway``."""
        out = subprocess.run(
            [sys.executable, "-c", "import slipway; print(slipway.__file__)"],
            env=self.env, cwd=self.log_path.parent, capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        expected = (self.source / "operator" / "slipway").resolve()
        if Path(out).resolve().parent != expected:
            raise RuntimeError(f"the operator would import slipway from {out}, not from {expected}")
        return out

    def start(self) -> None:
        liveness = f"http://127.0.0.1:{free_port()}/healthz"
        scope = [arg for ns in self.namespaces for arg in ("-n", ns)]
        cmd = [sys.executable, *self.launcher, "--standalone", *scope, "--liveness", liveness]
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, env=self.env, cwd=self.log_path.parent, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def operator_env(source: Path, kubeconfig: Path, mlflow: str, prometheus: str, extra: dict[str, str]) -> dict[str, str]:
    """The environment of the operator: this one without any SLIPWAY_* or PYTHONPATH, then the bench's own."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("SLIPWAY_") and k not in ("PYTHONPATH", "KUBECONFIG")
    }
    env.update(
        PYTHONPATH=str(source / "operator"),
        PYTHONUNBUFFERED="1",
        KUBECONFIG=str(kubeconfig),
        SLIPWAY_MLFLOW_URL=mlflow,
        SLIPWAY_PROMETHEUS_URL=prometheus,
        SLIPWAY_METRICS_PORT=str(free_port()),
        SLIPWAY_METRICS_ADDRESS="127.0.0.1",
        # the proof key from the setting, not a Secret in slipway-system (the bench's cluster has no such namespace)
        SLIPWAY_MLFLOW_PROOF_KEY=PROOF_KEY,
    )
    env.update(extra)
    return env


# --------------------------------------------------------------------------- provenance


LEVEL = re.compile(r"\[\s*(ERROR|WARNING|CRITICAL)\s*\]|\b(ERROR|WARNING|CRITICAL)\b")
TIMESTAMP = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T][\d:.,]+\]?\s*")


def log_findings(path: Path, limit: int = 15) -> dict[str, Any]:
    """Warnings, errors and tracebacks in the operator's log, grouped by message (timestamps removed)."""
    text = path.read_text(errors="replace") if path.exists() else ""
    messages: Counter[str] = Counter()
    for line in text.splitlines():
        if LEVEL.search(line) or line.startswith("Traceback"):
            messages[TIMESTAMP.sub("", line)[:300]] += 1
    return {
        "lines": sum(messages.values()),
        "tracebacks": text.count("Traceback (most recent call last)"),
        "top": [{"count": n, "message": m} for m, n in messages.most_common(limit)],
    }


def git(source: Path, *args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(source), *args], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine() -> dict[str, Any]:
    mem = next(
        (line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")), "0"
    )
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())  # fmt: skip
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(int(mem) / 1024 / 1024, 1),
            "kernel": platform.release(), "python": platform.python_version()}  # fmt: skip


class PollingThreads:
    """Two polls in threads for one trial, ``poll_kube`` every ``kube_period`` s and
    ``poll_prometheus`` every ``prom_period`` s, until the ``with`` block ends. A poll that raises
    (an API or Prometheus blink) is counted in ``errors``, the first five reported to
    :meth:`poll_error`, and polled again."""

    def __init__(self, prometheus_url: str, kube_period: float, prom_period: float) -> None:
        import httpx

        self.prom = httpx.Client(base_url=prometheus_url, timeout=5)
        self.stop = threading.Event()
        self.errors = 0
        self.threads = [
            threading.Thread(target=self._loop, args=(poll, period), daemon=True)
            for poll, period in ((self.poll_kube, kube_period), (self.poll_prometheus, prom_period))
        ]

    def poll_kube(self) -> None:
        raise NotImplementedError

    def poll_prometheus(self) -> None:
        raise NotImplementedError

    def poll_error(self, text: str) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)
        self.prom.close()

    def _loop(self, poll: Any, period: float) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                poll()
            except Exception as exc:  # an API or Prometheus blink: count it, poll again
                self.errors += 1
                if self.errors <= 5:
                    self.poll_error(f"poll error: {exc!r}"[:300])
            self.stop.wait(max(0.0, period - (time.monotonic() - started)))


def settle(info: ClusterInfo, user: str, quiet_seconds: float, max_seconds: float) -> dict[str, Any]:
    """Wait until ``user`` made no request but watches (audit log) for ``quiet_seconds``, at most ``max_seconds``."""
    started = time.monotonic()
    while True:
        now = datetime.now(UTC)
        recent = [r for r in requests_by(info, user, now - timedelta(seconds=quiet_seconds)) if r.verb != "watch"]
        waited = time.monotonic() - started
        if not recent and waited >= quiet_seconds:
            return {"quiet": True, "waited_seconds": round(waited, 1)}
        if waited >= max_seconds:
            return {"quiet": False, "waited_seconds": round(waited, 1), "last_requests": summarize(recent)}
        time.sleep(2)
