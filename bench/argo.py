"""Argo Rollouts (``github.com/argoproj/argo-rollouts`` v1.10.1), the peer the benchmarks measure
Slipway against: its CRDs, its controller as a local process, and the objects of a basic canary.

The controller and the CRDs come from ``bench/build-argo-rollouts.sh`` (``make argo-rollouts``):
``.cache/argo-rollouts/rollouts-controller`` and ``.cache/argo-rollouts/crds/*-crd.yaml``::

    from bench import argo

    argo.install_crds(admin)                              # server-side apply
    with argo.running(info, directory=run / "argo") as controller:
        ...                                               # controller.pid, controller.alive()

- :func:`install_crds`: the CRDs are too large for a client-side apply (its last-applied
  annotation would pass the 256 KiB limit), so each is sent as a server-side apply (``PATCH``
  ``application/apply-patch+yaml``, field manager ``slipway-bench``, ``force``); returns once
  every one is Established and its kind is listable.
- :class:`Controller`: ``rollouts-controller`` against the local cluster with leader election
  off (``--leader-elect=false``), its metrics and healthz on free ports, under a client
  certificate of its own (user :data:`USER`, from ``localkube.audit.audited_kubeconfig``), so the
  API server's audit log holds every request it makes. That identity is in ``system:masters``
  (as every audited identity is), which RBAC never restricts: the controller can do all that its
  ClusterRole in Argo's install manifests allows and more, and no ClusterRoleBinding is needed.
  The process is recorded among the cluster's processes (``state.json``) so that
  ``localkube.cluster.down`` stops it too if the benchmark dies.
- :class:`ProcSampler`: CPU seconds and RSS of a process and its children from ``/proc``.
- Builders: :func:`rollout` (basic canary: no ``trafficRouting``, so traffic follows the replica
  ratio over one Service; ``setWeight`` steps; a background analysis from an AnalysisTemplate),
  :func:`service`, :func:`analysis_template` (the Prometheus provider).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from localkube.audit import audited_kubeconfig
from localkube.bootstrap import apply_crds
from localkube.kube import Kube
from localkube.mlflow_server import free_port
from localkube.procs import Proc, spawn
from localkube.state import ROOT, ClusterInfo
from localkube.wait import wait_answers

VERSION = "v1.10.1"
ARGO_DIR = ROOT / ".cache" / "argo-rollouts"
BINARY = ARGO_DIR / "rollouts-controller"
CRDS = ARGO_DIR / "crds"
GROUP, API_VERSION = "argoproj.io", "v1alpha1"
USER = "argo-rollouts"
"""The controller's audited identity (the CommonName of its client certificate)."""
FIELD_MANAGER = "slipway-bench"


def binary() -> Path:
    path = Path(os.environ.get("SLIPWAY_BENCH_ARGO_ROLLOUTS", BINARY))
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `make argo-rollouts` (bash bench/build-argo-rollouts.sh {BINARY})"
        )
    return path


def path(namespace: str, plural: str, name: str | None = None) -> str:
    collection = f"/apis/{GROUP}/{API_VERSION}/namespaces/{namespace}/{plural}"
    return f"{collection}/{name}" if name else collection


# --------------------------------------------------------------------------- CRDs


def install_crds(kube: Kube, crds: Path = CRDS, timeout: float = 120) -> list[str]:
    """Server-side apply every ``*-crd.yaml`` of ``crds``; wait until Established and listable."""
    files = sorted(crds.glob("*-crd.yaml"))
    if not files:
        raise FileNotFoundError(f"no *-crd.yaml in {crds}: run `make argo-rollouts`")
    return apply_crds(kube, [yaml.safe_load(file.read_text()) for file in files], FIELD_MANAGER, timeout)


# --------------------------------------------------------------------------- process sampling


def _children(pid: int) -> list[int]:
    """``pid`` and its descendants (from the parent pids of ``/proc/*/stat``)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (plus the children it waited for)."""
    total = 0.0
    for one in _children(pid):
        try:
            text = Path(f"/proc/{one}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 here (after pid and comm)
        total += sum(int(f) for f in fields[11:15]) / CLOCK_TICKS
    return total


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` and its descendants, in bytes."""
    total = 0
    for one in _children(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


class ProcSampler:
    """Samples a process tree's CPU seconds and RSS every ``period`` seconds in a thread, between
    :meth:`start` and :meth:`stop` (epoch-second timestamps)."""

    def __init__(self, pid: int, period: float = 1.0) -> None:
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, float, int]] = []  # (time, cpu seconds, rss bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[float, float, int]:
        point = (time.time(), cpu_seconds(self.pid), rss_bytes(self.pid))
        self.samples.append(point)
        return point

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def start(self) -> ProcSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(10)
        self.sample()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        first, last = self.samples[0], self.samples[-1]
        return {
            "seconds": round(last[0] - first[0], 2),
            "cpu_seconds": round(last[1] - first[1], 3),
            "rss_bytes_max": max(s[2] for s in self.samples),
            "rss_bytes_end": last[2],
            "rss_bytes_start": first[2],
            "samples": len(self.samples),
        }


# --------------------------------------------------------------------------- the controller


class Controller:
    """``rollouts-controller`` as a local process against the cluster of ``info``."""

    def __init__(
        self, info: ClusterInfo, directory: Path, log_name: str = "argo-rollouts.log", loglevel: str = "info",
        extra: list[str] | None = None, namespace: str | None = None,
    ) -> None:  # fmt: skip
        """``namespace``: run in Argo's namespaced mode (``--namespaced``: it watches only that
        namespace, which it reads from its kubeconfig's context), else cluster-wide (the default
        install)."""
        self.info = info
        self.directory = directory
        self.namespace = namespace
        self.kubeconfig = audited_kubeconfig(info, USER)
        if namespace:
            self.kubeconfig = namespaced_kubeconfig(self.kubeconfig, namespace, directory)
        self.loglevel = loglevel
        self.extra = list(extra or [])
        self.log_path = directory / log_name
        self.proc: Proc | None = None
        self.healthz_port = 0
        self.metrics_port = 0
        self.starts: list[dict[str, float]] = []

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def command(self) -> list[str]:
        return [
            str(binary()),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            f"--healthzPort={self.healthz_port}",
            f"--metricsPort={self.metrics_port}",
            f"--loglevel={self.loglevel}",
            "--logformat=text",
            *(["--namespaced"] if self.namespace else []),
            *self.extra,
        ]

    def start(self, timeout: float = 60) -> None:
        """Start the controller (its log appended to :attr:`log_path`) and wait for its /healthz."""
        if self.alive():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.healthz_port, self.metrics_port = free_port(), free_port()
        started = time.time()
        with self.log_path.open("a") as out:
            out.write(f"\n===== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(self.command())}\n")
        # POD_NAMESPACE: where it looks for its ConfigMap argo-rollouts-config (absent: the defaults)
        self.proc = spawn("argo-rollouts", self.command(), self.log_path, env={"POD_NAMESPACE": "argo-rollouts"},
                          cwd=self.directory)  # fmt: skip
        _record(self.info, self.proc)
        wait_answers(f"http://127.0.0.1:{self.healthz_port}/healthz", self.alive, self.log_path, timeout,
                     "the Argo Rollouts controller")  # fmt: skip
        self.starts.append({"started": started, "healthy": time.time()})

    def stop(self, timeout: float = 20) -> None:
        if self.proc is not None:
            self.proc.stop(timeout)
            _forget(self.info, self.proc)
            with self.log_path.open("a") as out:
                out.write(f"\n===== {time.strftime('%Y-%m-%dT%H:%M:%S')} stopped\n")
        self.proc = None

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text


def namespaced_kubeconfig(kubeconfig: Path, namespace: str, directory: Path) -> Path:
    """A copy of ``kubeconfig`` whose context names ``namespace`` (the same user and certificate)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    for context in doc.get("contexts") or []:
        context["context"]["namespace"] = namespace
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{USER}-{namespace}.kubeconfig"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def _record(info: ClusterInfo, proc: Proc) -> None:
    """Add the controller to the cluster's recorded processes, so that ``down`` stops it too."""
    current = ClusterInfo.load(info.directory) or info
    current.processes.append(proc)
    current.save()


def _forget(info: ClusterInfo, proc: Proc) -> None:
    current = ClusterInfo.load(info.directory)
    if current is not None:
        current.processes = [p for p in current.processes if (p.pid, p.ticks) != (proc.pid, proc.ticks)]
        current.save()


@contextlib.contextmanager
def running(info: ClusterInfo, directory: Path, **options: Any) -> Iterator[Controller]:
    controller = Controller(info, directory, **options)
    controller.start()
    try:
        yield controller
    finally:
        controller.stop()


# --------------------------------------------------------------------------- the objects


def analysis_template(
    name: str, query: str, interval: str, failure_limit: int, threshold: float, prometheus_url: str,
    args: tuple[str, ...] = ("version",),
) -> dict[str, Any]:  # fmt: skip
    """One metric, ``errorRate``: ``query`` (with ``{{args.<name>}}`` placeholders) every
    ``interval``, failed above ``threshold``; the run fails after ``failure_limit + 1`` failures.

    Only a failure condition (``len(result) > 0 && result[0] > threshold``): a measurement that
    does not fail passes, so no data (no series yet, or 0/0 before the first request) counts
    neither way toward the failure limit, as Slipway's ``noData: inconclusive`` does not (an
    Argo *Inconclusive* measurement would pause the rollout instead)."""
    return {
        "apiVersion": f"{GROUP}/{API_VERSION}",
        "kind": "AnalysisTemplate",
        "metadata": {"name": name},
        "spec": {
            "args": [{"name": arg} for arg in args],
            "metrics": [
                {
                    "name": "errorRate",
                    "interval": interval,
                    "failureLimit": failure_limit,
                    "failureCondition": f"len(result) > 0 && result[0] > {threshold}",
                    "provider": {"prometheus": {"address": prometheus_url, "query": query}},
                }
            ],
        },
    }


def service(name: str, selector: dict[str, str], port: int) -> dict[str, Any]:
    """The one Service over both ReplicaSets (basic canary: traffic by replica ratio)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": dict(selector), "ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }


def rollout(
    name: str,
    template: dict[str, Any],
    selector: dict[str, str],
    replicas: int,
    steps: list[dict[str, Any]],
    analysis: dict[str, Any] | None = None,
    canary_labels: dict[str, str] | None = None,
    stable_labels: dict[str, str] | None = None,
    max_surge: int | str = 1,
    max_unavailable: int | str = 0,
) -> dict[str, Any]:
    """A Rollout with a basic canary strategy (no trafficRouting) over the pod ``template``.

    ``analysis`` is the background analysis (``templates``, ``args``, ``startingStep``);
    ``canary_labels``/``stable_labels`` are its ephemeral pod metadata (``canaryMetadata``,
    ``stableMetadata``): the canary ReplicaSet's pods carry the first from creation, the stable's
    the second."""
    canary: dict[str, Any] = {"steps": steps, "maxSurge": max_surge, "maxUnavailable": max_unavailable}
    if analysis:
        canary["analysis"] = analysis
    if canary_labels:
        canary["canaryMetadata"] = {"labels": dict(canary_labels)}
    if stable_labels:
        canary["stableMetadata"] = {"labels": dict(stable_labels)}
    return {
        "apiVersion": f"{GROUP}/{API_VERSION}",
        "kind": "Rollout",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": dict(selector)},
            "template": template,
            "strategy": {"canary": canary},
        },
    }


def is_healthy(ro: dict[str, Any] | None, ready: int | None = None) -> bool:
    """The Rollout settled: phase Healthy at its generation, not aborted, ``ready`` pods ready."""
    if ro is None:
        return False
    status = ro.get("status") or {}
    generation = str(ro["metadata"].get("generation"))
    if status.get("phase") != "Healthy" or status.get("abort") or str(status.get("observedGeneration")) != generation:
        return False
    want = ready if ready is not None else ro["spec"].get("replicas", 1)
    return (status.get("availableReplicas") or 0) >= want and status.get("stableRS") == status.get("currentPodHash")


def slipway_pod_template(
    spec: dict[str, Any], name: str, namespace: str, model: str, version: str, mlflow_url: str | None,
    priority_class: str = "slipway-inference", credentials_secret: str = "slipway-mlflow-credentials",
) -> dict[str, Any]:  # fmt: skip
    """The pod template Slipway renders for ``version`` of ``model`` from the InferenceDeployment
    ``spec`` (``slipway.inference.build.deployment``, as the operator calls it), made
    fit for a Rollout: both of Argo's ReplicaSets run one template, so Slipway's per-track parts go
    (the ``slipway.dev/track`` label, which the Rollout's canary/stable metadata set instead, the
    ``SLIPWAY_TRACK`` variable, which the server does not read, the revision label and the
    managed-by label, which would make the pods Slipway's). Image, command, env, probes, port,
    the Prometheus annotations, the priority class and the placement stay as Slipway has them."""
    from slipway.inference import build
    from slipway.inference.model import InferenceDeploymentSpec
    from slipway.mlflow.uris import model_version_uri
    from slipway.names import MANAGED_BY
    from slipway.podspec import with_credentials

    parsed = InferenceDeploymentSpec.model_validate(spec)
    uri = model_version_uri(model, version)
    body = build.deployment(
        name, namespace, parsed, "stable", version, uri, mlflow_url, None, model, "", priority_class
    )
    body = with_credentials(body, credentials_secret)
    template = body["spec"]["template"]
    labels = template["metadata"]["labels"]
    for key in (*MANAGED_BY, build.TRACK_LABEL, build.REVISION_LABEL):
        labels.pop(key, None)
    for container in template["spec"]["containers"]:
        container["env"] = [e for e in container.get("env") or [] if e["name"] != "SLIPWAY_TRACK"]
    return template
