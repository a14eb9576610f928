"""Scenario C, Slipway at scale, and Scenario D, a fresh operator resuming everything
(``python -m bench scale``; issue #13).

C: one local cluster (``localkube``: real control plane, one node agent, MLflow, Prometheus) plus
``--scale-nodes`` fake GPU nodes played by kwok (``bench/kwok.py``, 8 ``nvidia.com/gpu`` each).
The operator of this checkout runs as ``python -m slipway --standalone -n scale`` (a subprocess,
every setting at its default, user ``slipway-scale`` from ``localkube.audit.audited_kubeconfig`` so
the API server's audit log holds its requests and no one else's). First one model is trained for
real on the node agent (TrainingRun ``digits`` with an artifact: the ModelArtifact ``digits`` is
trained, registered and validated by real pods), so the deployments have a Validated artifact to
serve. Then the bench creates, interleaved, from one thread as fast as the API server takes them
(or, with ``--scale-apply-rate R``, at R objects a second from 8 threads, whatever the API server's
latency):

- ``--scale-runs`` TrainingRuns ``train-NNNN`` (1 GPU, 4 CPU, 16Gi each, nodeSelector
  ``type=kwok`` and the toleration of kwok's taint, no artifact: they stop after training); kwok
  completes each training pod (exit 0) ``--scale-train-seconds`` after it starts running;
- ``--scale-deployments`` InferenceDeployments ``serve-NNN`` (artifactRef ``digits``, one replica,
  1 CPU, 2Gi, the same placement through ``spec.podTemplate``), their pods Ready on kwok nodes.

Measured (seconds on the bench's clock, from the moment the bench sent the object's create):

- apply -> first child: the first ADDED watch event of a Job (TrainingRun) or of a Service, HPA or
  Deployment (InferenceDeployment) controlled by the object, as the bench's watch receives it
  (creationTimestamp has whole seconds only);
- apply -> ``Succeeded`` (TrainingRun) and apply -> ``Promoted`` with ``Ready=True`` (the
  InferenceDeployment serves its first version), from watch events on the objects;
- every change of an object's ``Ready`` condition; a *flap* is Ready going back to False after it
  was True (each one is listed, with whether and when it came back);
- the operator process's RSS and CPU seconds (``/proc/<pid>``) once a second, and its API
  requests from the audit log (tailed as it grows: by verb, per second).

C ends when every object has got there (or at ``--scale-timeout``: the notes then say how far it
got and where the time went). Then the bench waits for the operator to go quiet.

D: the operator is stopped (SIGTERM) and a fresh one started with the same settings. "Resumed"
means: the operator's ``/metrics`` carries the per-object series ``slipway_object_stalled`` of every
Slipway object in the namespace (a pass sets it at the end of each object's first pass, also for
an object that needs nothing), polled once a second. Counted: the time from starting the
process to resumed, and every API request of the operator from its start until 30 s after resumed
(``--scale-resume-grace``), by verb; the target for writes (create, update, patch, delete) is 0.

Both go to ``<run>/scale.json`` (``rundir.write(run, "scale", ...)``), the operator logs to
``<run>/scale-operator.log`` and ``<run>/scale-operator-restart.log``, kwok's to ``<run>/kwok/``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench import kwok, rundir, two_namespaces
from bench.harness import (
    GROUP,
    IMAGE,
    ROOT,
    VERSION,
    Operator,
    create_namespace,
    describe,
    git,
    install_crds,
    local_cluster,
    log,
    log_findings,
    operator_env,
)
from localkube.audit import audited_kubeconfig
from localkube.kube import Kube
from localkube.state import ClusterInfo
from localkube.wait import wait_for

USER = "slipway-scale"
NAMESPACE = "scale"
SEED = "digits"
WRITES = ("create", "update", "patch", "delete", "deletecollection")
CHILD_KINDS = {"TrainingRun": ("jobs",), "InferenceDeployment": ("services", "hpas", "deployments")}
CHILD_PATHS = {  # {ns}: the namespace watched
    "jobs": "/apis/batch/v1/namespaces/{ns}/jobs",
    "services": "/api/v1/namespaces/{ns}/services",
    "hpas": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
}
PLURAL = {
    "TrainingRun": "trainingruns",
    "ModelArtifact": "modelartifacts",
    "InferenceDeployment": "inferencedeployments",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("scale (scenarios C and D)")
    g.add_argument("--scale-runs", type=int, default=1000, help="TrainingRuns (default 1000)")
    g.add_argument("--scale-deployments", type=int, default=300, help="InferenceDeployments (default 300)")
    g.add_argument("--scale-nodes", type=int, default=50, help="kwok GPU nodes (default 50)")
    g.add_argument("--scale-gpus-per-node", type=int, default=8, help="nvidia.com/gpu per kwok node (default 8)")
    g.add_argument("--scale-train-seconds", type=float, default=60.0,
                   help="a training pod succeeds this long after it runs (default 60)")  # fmt: skip
    g.add_argument("--scale-timeout", type=float, default=1800.0,
                   help="seconds for every object to succeed or be promoted (default 1800)")  # fmt: skip
    g.add_argument("--scale-resume-timeout", type=float, default=600.0,
                   help="seconds for a fresh operator to resume every object (default 600)")  # fmt: skip
    g.add_argument("--scale-resume-grace", type=float, default=30.0,
                   help="writes are counted until this long after the fresh operator resumed (default 30)")  # fmt: skip
    g.add_argument("--scale-keep-cluster-dir", action="store_true", help="keep the stopped cluster's directory")
    g.add_argument(
        "--scale-apply-rate",
        type=float,
        default=0.0,
        help="objects created per second, from 8 threads (default 0: one thread, as fast as answered)",
    )
    g.add_argument("--scale-kueue-gpus", type=int, default=0,
                   help="C's Kueue variant: start Kueue (make kueue) and send every TrainingRun through a LocalQueue "
                        "of a ClusterQueue of this many GPUs (default 0: no Kueue)")  # fmt: skip
    g.add_argument("--scale-other-namespace", default="",
                   help="a second namespace the operator watches: while C's burst holds the slots, "
                        "--scale-other-objects TrainingRuns are created there one at a time and their apply -> first "
                        "child reported apart (bench/two_namespaces.py; default none)")  # fmt: skip
    g.add_argument("--scale-other-objects", type=int, default=20, help="its TrainingRuns (default 20)")
    g.add_argument("--scale-other-interval", type=float, default=0.5,
                   help="seconds between the other namespace's creates, the first one this long after the burst's "
                        "first (default 0.5)")  # fmt: skip
    g.add_argument("--scale-source", type=Path, default=ROOT,
                   help="a checkout whose operator/slipway is the operator run (default this one)")  # fmt: skip


# --------------------------------------------------------------------------- objects


def custom_path(kind: str, name: str | None = None, namespace: str = NAMESPACE) -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL[kind]}"
    return f"{path}/{name}" if name else path


def seed_run() -> dict[str, Any]:
    """The model trained for real (on the node agent), as in scenario B (bench/canary.py's training_run)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": SEED},
        "spec": {
            "model": {"name": SEED},
            "image": IMAGE,
            "command": ["python", "-m", "slipway.workloads.train"],
            "args": ["--steps", "4"],
            "artifact": {"quantization": {"method": "none"},
                         "validation": {"gates": [{"metric": "accuracy", "min": 0.5}]}, "aliases": ["candidate"]},
        },
    }  # fmt: skip


def training_run(name: str, queue: str | None = None) -> dict[str, Any]:
    placement = kwok.placement()
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "scale"},
            "image": IMAGE,
            "command": ["python", "-m", "slipway.workloads.train"],
            "resources": {"gpus": 1, "cpu": "4", "memory": "16Gi"},
            "nodeSelector": placement["nodeSelector"],
            "tolerations": placement["tolerations"],
            **({"queueName": queue} if queue else {}),
        },
    }


QUEUE = "gpus"
KUEUE_PATH = "/apis/kueue.x-k8s.io/v1beta2"


def start_kueue(info: ClusterInfo, admin: Kube, gpus: int) -> None:
    """Kueue in the bench's cluster, and a ClusterQueue of ``gpus`` GPUs (with the CPU and memory
    that many of the bench's runs request) behind the LocalQueue ``gpus`` of the bench's namespace."""
    from localkube.batch import ensure_kueue, gpu_quota

    ensure_kueue(info.directory)
    for plural, obj in gpu_quota(NAMESPACE, gpus, cpu=4 * gpus, memory=f"{16 * gpus}Gi", queue=QUEUE):
        where = f"/namespaces/{NAMESPACE}" if plural == "localqueues" else ""
        admin.create(f"{KUEUE_PATH}{where}/{plural}", obj)


def gpus_admitted(admin: Kube) -> int:
    """GPUs of the bench's ClusterQueue that Kueue counts as admitted now."""
    queue = admin.get_or_none(f"{KUEUE_PATH}/clusterqueues/cq-{NAMESPACE}") or {}
    for flavor in (queue.get("status") or {}).get("flavorsUsage") or []:
        for resource in flavor.get("resources") or []:
            if resource.get("name") == "nvidia.com/gpu":
                return int(resource.get("total") or 0)
    return 0


def inference_deployment(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"artifactRef": {"name": SEED}},
            "image": IMAGE,
            "command": ["python", "-m", "slipway.workloads.serve"],
            "resources": {"cpu": "1", "memory": "2Gi"},
            "podTemplate": kwok.placement(),
        },
    }


def plan(runs: int, deployments: int) -> list[tuple[str, str]]:
    """(kind, name) in the order of creation: the deployments spread evenly among the runs."""
    order: list[tuple[str, str]] = []
    made = 0
    for i in range(runs):
        order.append(("TrainingRun", f"train-{i:04d}"))
        while made < deployments and (made + 1) * runs <= (i + 1) * deployments:
            order.append(("InferenceDeployment", f"serve-{made:03d}"))
            made += 1
    order += [("InferenceDeployment", f"serve-{j:03d}") for j in range(made, deployments)]
    return order


# --------------------------------------------------------------------------- observation


class Observed:
    """What the bench's watches saw, on the bench's clock (epoch seconds at receipt)."""

    def __init__(self, objects: dict[tuple[str, str], float]) -> None:
        self.lock = threading.Lock()
        self.applied = objects  # (kind, name) -> when the create was sent (filled in as they are sent)
        self.first_child: dict[tuple[str, str], tuple[float, str]] = {}
        self.succeeded: dict[str, float] = {}
        self.promoted: dict[str, float] = {}
        self.ready: dict[tuple[str, str], str] = {}
        self.ready_changes: list[dict[str, Any]] = []
        self.flaps: list[dict[str, Any]] = []
        self.was_ready: set[tuple[str, str]] = set()
        self.events = 0

    def child(self, resource: str, obj: dict[str, Any], now: float) -> None:
        for ref in obj["metadata"].get("ownerReferences") or []:
            kind = ref.get("kind")
            if ref.get("controller") and kind in CHILD_KINDS and resource in CHILD_KINDS[kind]:
                key = (kind, ref["name"])
                with self.lock:
                    if key in self.applied and key not in self.first_child:  # the seed's are not counted
                        self.first_child[key] = (now, f"{resource}/{obj['metadata']['name']}")

    def parent(self, kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        key = (kind, name)
        with self.lock:
            if key not in self.applied:  # the seed model's run
                return
            self.events += 1
            if ready is not None and self.ready.get(key) != ready.get("status"):
                previous = self.ready.get(key)
                self.ready[key] = str(ready.get("status"))
                change = {"t": now, "kind": kind, "name": name, "from": previous, "to": ready.get("status"),
                          "reason": ready.get("reason"), "generation": obj["metadata"].get("generation")}  # fmt: skip
                self.ready_changes.append(change)
                if ready.get("status") == "True":
                    for flap in self.flaps:
                        if flap["kind"] == kind and flap["name"] == name and flap.get("back_at") is None:
                            flap["back_at"] = now
                    self.was_ready.add(key)
                elif key in self.was_ready:
                    self.flaps.append({**change, "back_at": None})
            phase = status.get("phase")
            is_ready = ready is not None and ready.get("status") == "True"
            if kind == "TrainingRun" and phase == "Succeeded" and name not in self.succeeded:
                self.succeeded[name] = now
            if kind == "InferenceDeployment" and phase == "Promoted" and is_ready and name not in self.promoted:
                self.promoted[name] = now


class Watches:
    """One thread per watch (the Slipway kinds and the children), each with its own client."""

    def __init__(self, info: ClusterInfo, observed: Observed, namespace: str = NAMESPACE) -> None:
        self.info = info
        self.observed = observed
        self.namespace = namespace
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.listed: set[str] = set()  # watches whose initial list is in

    def _run(self, path: str, handle: Callable[[dict[str, Any], float], None]) -> None:
        kube = Kube(self.info.kubeconfig, timeout=60)

        def on_list(items: list[dict[str, Any]]) -> None:
            now = time.time()
            for item in items:
                handle(item, now)
            self.listed.add(path)

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            if kind != "DELETED":
                handle(obj, time.time())

        try:
            kube.watch(path, on_list, on_event, self.stop.is_set)
        except Exception as e:  # noqa: BLE001 - reported in the notes
            self.errors.append(f"watch {path}: {e!r}")

    def start(self) -> None:
        targets: list[tuple[str, Callable[[dict[str, Any], float], None]]] = []
        ns = self.namespace
        for resource, path in CHILD_PATHS.items():
            targets.append((path.format(ns=ns), lambda obj, now, r=resource: self.observed.child(r, obj, now)))
        for kind in ("TrainingRun", "InferenceDeployment"):
            targets.append((custom_path(kind, None, ns), lambda obj, now, k=kind: self.observed.parent(k, obj, now)))
        for path, handle in targets:
            thread = threading.Thread(target=self._run, args=(path, handle), name=f"watch {path}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def wait_listed(self, timeout: float = 60) -> None:
        """Until every watch has its initial list: an ADDED event after it is a new object."""
        wait_for(lambda: len(self.listed) == len(self.threads), timeout, "the watches' initial lists")

    def close(self) -> None:
        self.stop.set()


class AuditTail:
    """The API server's audit log, read as it grows (and across a rotation): every request of
    ``user`` as (epoch seconds received, verb, resource, name)."""

    def __init__(self, path: Path, user: str) -> None:
        self.path = path
        self.needle = f'"username":"{user}"'
        self.user = user
        self.records: list[tuple[float, str, str, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="audit tail", daemon=True)
        self.started_watches: set[str] = set()

    def start(self, from_end: bool = True) -> AuditTail:
        self._file = self.path.open("rb")
        if from_end:
            self._file.seek(0, os.SEEK_END)
        self._inode = os.fstat(self._file.fileno()).st_ino
        self.thread.start()
        return self

    def _line(self, raw: bytes) -> None:
        if self.needle.encode() not in raw:
            return
        try:
            event = json.loads(raw)
        except ValueError:
            return
        stage, verb, audit_id = event.get("stage"), event.get("verb", ""), event.get("auditID", "")
        if verb == "watch":  # counted once, as it starts
            if stage not in ("ResponseStarted", "ResponseComplete") or audit_id in self.started_watches:
                return
            self.started_watches.add(audit_id)
        elif stage != "ResponseComplete":
            return
        ref = event.get("objectRef") or {}
        resource = ref.get("resource") or event.get("requestURI", "").split("?", 1)[0]
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        when = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        with self.lock:
            self.records.append((when, verb, resource, ref.get("name") or ""))

    def _run(self) -> None:
        buffer = b""
        while not self.stop.is_set():
            chunk = self._file.read(1 << 20)
            if chunk:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    self._line(raw)
                continue
            with contextlib.suppress(OSError):  # rotated: finish the old file, then follow the new one
                if os.stat(self.path).st_ino != self._inode:
                    self._file.close()
                    self._file = self.path.open("rb")
                    self._inode = os.fstat(self._file.fileno()).st_ino
                    buffer = b""
                    continue
            self.stop.wait(0.5)

    def between(self, start: float, end: float) -> list[tuple[float, str, str, str]]:
        with self.lock:
            return [r for r in self.records if start <= r[0] < end]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def cpu_rss(pid: int) -> tuple[float, int]:
    """(CPU seconds, user + system; RSS bytes) of a process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        return cpu, rss
    except (OSError, ValueError, IndexError):
        return 0.0, 0


def cluster_cpu(info: ClusterInfo) -> dict[str, float]:
    """CPU seconds so far of each recorded cluster process with its process group (etcd,
    kube-apiserver, MLflow's workers, kwok, ...)."""
    current = ClusterInfo.load(info.directory) or info
    groups: dict[int, float] = Counter()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            fields = text[text.rindex(")") + 2 :].split()
            groups[int(fields[2])] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return {p.name: round(groups.get(p.pid, 0.0), 1) for p in current.processes if p.alive()}


class Sampler:
    """Once a second: the operator's RSS and CPU, and how far the objects have got."""

    def __init__(self, pid: int, t0: float, counts: Callable[[], dict[str, int]] | None = None) -> None:
        self.pid, self.t0, self.counts = pid, t0, counts
        self.samples: list[dict[str, Any]] = []
        self.cpu0 = cpu_rss(pid)[0]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            cpu, rss = cpu_rss(self.pid)
            sample: dict[str, Any] = {"t": round(time.time() - self.t0, 2), "rss_bytes": rss,
                                      "cpu_seconds": round(cpu - self.cpu0, 2)}  # fmt: skip
            if self.counts is not None:
                sample.update(self.counts())
            self.samples.append(sample)
            self.stop.wait(1.0)

    def start(self) -> Sampler:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))  # nearest rank
    return ordered[index]


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    out: dict[str, Any] = {"n": len(values)}
    for q in (50, 90, 99):
        out[f"p{q}"] = round(percentile(values, q) or 0.0, 3)
    return out | {"max": round(max(values), 3), "mean": round(statistics.fmean(values), 3)}


def per_second(records: list[tuple[float, str, str, str]], t0: float, t1: float) -> list[int]:
    """Non-watch requests in each second of [t0, t1)."""
    slots = [0] * max(1, int(t1 - t0) + 1)
    for when, verb, _, _ in records:
        if verb != "watch" and t0 <= when < t1:
            slots[int(when - t0)] += 1
    return slots


def by_verb(records: list[tuple[float, str, str, str]]) -> dict[str, int]:
    return dict(sorted(Counter(verb for _, verb, _, _ in records).items()))


def by_verb_resource(records: list[tuple[float, str, str, str]]) -> dict[str, int]:
    return dict(Counter(f"{verb} {resource}" for _, verb, resource, _ in records).most_common())


METRIC_LINE = re.compile(r"^slipway_object_stalled\{([^}]*)\}", re.M)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def operator_objects(metrics_url: str) -> set[tuple[str, str]] | None:
    """(kind, name) of every object with a per-object series on the operator's /metrics."""
    try:
        text = httpx.get(metrics_url, timeout=10).text
    except httpx.HTTPError:
        return None
    found = set()
    for match in METRIC_LINE.finditer(text):
        labels = dict(LABEL.findall(match.group(1)))
        if labels.get("namespace") == NAMESPACE:
            found.add((labels.get("kind", ""), labels.get("name", "")))
    return found


def operator_counters(metrics_url: str) -> dict[str, float]:
    """The operator's own counters worth keeping: passes by kind and result, time in passes, external calls."""
    try:
        text = httpx.get(metrics_url, timeout=10).text
    except httpx.HTTPError:
        return {}
    keep = ("slipway_reconcile_total", "slipway_reconcile_duration_seconds_sum",
            "slipway_reconcile_duration_seconds_count", "slipway_external_requests_total",
            "slipway_child_actions_total")  # fmt: skip
    out = {}
    for line in text.splitlines():
        if line.startswith(keep) and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


# --------------------------------------------------------------------------- the run


def _start_operator(info: ClusterInfo, out: Path, log_name: str, args: argparse.Namespace) -> tuple[Operator, str]:
    kubeconfig = audited_kubeconfig(info, USER)
    assert info.mlflow_url and info.prometheus_url
    source = two_namespaces.source_of(args.scale_source)
    env = operator_env(source, kubeconfig, info.mlflow_url, info.prometheus_url, {})
    namespaces = [NAMESPACE, *([args.scale_other_namespace] if args.scale_other_namespace else [])]
    operator = Operator(source, env, namespaces, out / log_name)
    operator.check_import()
    operator.start()
    return operator, f"http://127.0.0.1:{env['SLIPWAY_METRICS_PORT']}/metrics"


def _wait_seed(admin: Kube, operator: Operator, timeout: float) -> float:
    t0 = time.monotonic()

    def validated() -> bool:
        if not operator.alive():
            raise SystemExit(f"the operator exited: see {operator.log_path}")
        artifact = admin.get_or_none(custom_path("ModelArtifact", SEED))
        return bool(artifact and (artifact.get("status") or {}).get("phase") == "Validated")

    try:
        wait_for(validated, timeout, f"ModelArtifact {SEED} Validated", interval=1)
    except TimeoutError:
        artifact = describe(admin.get_or_none(custom_path("ModelArtifact", SEED)))
        trained = describe(admin.get_or_none(custom_path("TrainingRun", SEED)))
        raise TimeoutError(f"the seed model: artifact {artifact}; run {trained}") from None
    return time.monotonic() - t0


def _quiet(audit: AuditTail, seconds: float, max_seconds: float) -> dict[str, Any]:
    """Wait until the operator made no request but watches for ``seconds`` (at most ``max_seconds``)."""
    t0 = time.time()
    while True:
        now = time.time()
        recent = [r for r in audit.between(now - seconds, now + 1) if r[1] != "watch"]
        if not recent and now - t0 >= seconds:
            return {"quiet": True, "waited_seconds": round(now - t0, 1)}
        if now - t0 >= max_seconds:
            return {"quiet": False, "waited_seconds": round(now - t0, 1), "recent_requests": len(recent)}
        time.sleep(1)


def run(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    runs, deployments = args.scale_runs, args.scale_deployments
    data: dict[str, Any] = {
        "scenario": "C",
        "config": {
            "training_runs": runs,
            "deployments": deployments,
            "nodes": args.scale_nodes,
            "train_seconds": args.scale_train_seconds,
            "gpus_per_node": args.scale_gpus_per_node,
            "timeout_seconds": args.scale_timeout,
            "kueue_gpus": args.scale_kueue_gpus,
            "apply_rate": args.scale_apply_rate,
            "other_namespace": args.scale_other_namespace or None,
            "other_objects": args.scale_other_objects if args.scale_other_namespace else 0,
            "other_interval_seconds": args.scale_other_interval,
        },  # fmt: skip
        "source": {
            "commit": git(args.scale_source, "rev-parse", "HEAD"),  # the operator's (--scale-source)
            "dirty": git(args.scale_source, "status", "--porcelain", "--untracked-files=no", "--", "operator", "bench"),
            "operator_source": str(args.scale_source.resolve()),
        },
        "notes": [],
    }
    try:
        _run(run_dir, args, data)
    except BaseException as e:
        data["notes"].append(f"scenario failed: {type(e).__name__}: {e}")
        raise
    finally:
        rundir.write(run_dir, "scale", data)
    return data


def _run(run_dir: Path, args: argparse.Namespace, data: dict[str, Any]) -> None:
    notes: list[str] = data["notes"]
    order = plan(args.scale_runs, args.scale_deployments)
    with local_cluster(args.scale_keep_cluster_dir, prefix="slipway-scale-") as info:
        admin = Kube(info.kubeconfig)
        install_crds(admin, ROOT / "crds")
        create_namespace(admin, NAMESPACE)
        if args.scale_other_namespace:
            create_namespace(admin, args.scale_other_namespace)
        operator, metrics_url = _start_operator(info, run_dir, "scale-operator.log", args)
        try:
            admin.create(custom_path("TrainingRun"), seed_run())
            log(f"operator pid {operator.pid}; training the seed model {SEED} on the node agent")
            gpus = args.scale_gpus_per_node
            with kwok.running(info, args.scale_nodes, run_dir / "kwok", train_seconds=args.scale_train_seconds,
                              gpus_per_node=gpus) as fake:  # fmt: skip
                log(f"{len(fake.names)} kwok nodes Ready ({gpus} GPUs each)")
                data["seed_seconds"] = round(_wait_seed(admin, operator, 600), 1)
                log(f"seed model Validated after {data['seed_seconds']} s")
                if args.scale_kueue_gpus:
                    start_kueue(info, admin, args.scale_kueue_gpus)
                    log(f"Kueue running; ClusterQueue of {args.scale_kueue_gpus} GPUs behind LocalQueue {QUEUE}")
                scale_c(info, admin, operator, metrics_url, order, args, data)
                operator = scale_d(info, admin, operator, run_dir, args, data)
                data["kwok_log"] = log_findings(fake.log)
        finally:
            operator.stop()
            for name in ("scale-operator.log", "scale-operator-restart.log"):
                if (run_dir / name).exists():
                    data.setdefault("operator_logs", {})[name] = log_findings(run_dir / name)
    if data.get("ready_flaps"):
        notes.append(f"{data['ready_flaps']} Ready flaps (True -> False after being True): see flaps")


def scale_c(
    info: ClusterInfo,
    admin: Kube,
    operator: Operator,
    metrics_url: str,
    order: list[tuple[str, str]],
    args: argparse.Namespace,
    data: dict[str, Any],
) -> None:
    notes: list[str] = data["notes"]
    runs = [n for k, n in order if k == "TrainingRun"]
    deps = [n for k, n in order if k == "InferenceDeployment"]
    observed = Observed({})
    watches = Watches(info, observed)
    watches.start()
    audit = AuditTail(info.audit_log or info.directory / "logs" / "audit.log", USER).start()
    assert operator.pid is not None
    cluster_cpu_before = cluster_cpu(info)
    t0 = time.time()

    def counts() -> dict[str, int]:
        with observed.lock:
            return {"applied": len(observed.applied), "first_child": len(observed.first_child),
                    "succeeded": len(observed.succeeded), "promoted": len(observed.promoted)}  # fmt: skip

    sampler = Sampler(operator.pid, t0, counts).start()
    watches.wait_listed()  # an ADDED event is never mistaken for the initial list
    other = _other_namespace(info, admin, metrics_url, args) if args.scale_other_namespace else None
    log(f"scenario C: creating {len(runs)} TrainingRuns and {len(deps)} InferenceDeployments")
    create_seconds: list[float] = []
    t_apply0 = time.time()
    queue = QUEUE if args.scale_kueue_gpus else None
    if other is not None:
        other.start(t_apply0)

    def create(i: int, kind: str, name: str) -> None:
        if args.scale_apply_rate:
            time.sleep(max(0.0, t_apply0 + i / args.scale_apply_rate - time.time()))
        body = training_run(name, queue) if kind == "TrainingRun" else inference_deployment(name)
        sent = time.time()
        with observed.lock:
            observed.applied[(kind, name)] = sent
        admin.create(custom_path(kind), body)
        create_seconds.append(time.time() - sent)

    with concurrent.futures.ThreadPoolExecutor(8 if args.scale_apply_rate else 1) as pool:
        for done in [pool.submit(create, i, kind, name) for i, (kind, name) in enumerate(order)]:
            done.result()
    t_applied = time.time()
    data["apply_seconds"] = round(t_applied - t_apply0, 2)
    data["create_request_seconds"] = summary(create_seconds)
    log(f"created {len(order)} objects in {data['apply_seconds']} s")

    deadline = t_apply0 + args.scale_timeout
    last_log = 0.0
    admitted_max = 0
    while True:
        if args.scale_kueue_gpus:
            admitted_max = max(admitted_max, gpus_admitted(admin))
        c = counts()
        other_done = other is None or other.done()  # every time: it reads the histogram once they all came
        done = c["succeeded"] >= len(runs) and c["promoted"] >= len(deps) and c["first_child"] >= len(order)
        if done and other_done:
            break
        if not operator.alive():
            notes.append(f"the operator exited during scenario C (code {operator.proc and operator.proc.returncode})")
            break
        if time.time() > deadline:
            notes.append(f"scenario C did not finish within --scale-timeout={args.scale_timeout:.0f} s: {c}")
            break
        if time.time() - last_log > 60:  # listing every pod costs the API server: once a minute
            last_log = time.time()
            phases = kwok.pods_by_phase(admin, NAMESPACE)
            log(f"t={time.time() - t_apply0:.0f}s {c}; kwok pods {phases}; "
                f"operator RSS {cpu_rss(operator.pid)[1] / 2**20:.0f} MiB")  # fmt: skip
        time.sleep(1)
    t_done = time.time()
    log(f"scenario C: {counts()} after {t_done - t_apply0:.0f} s")
    data["c_seconds"] = round(t_done - t_apply0, 1)
    if args.scale_kueue_gpus:
        data["kueue_gpus_admitted_max"] = admitted_max
    data["operator_counters_after_c"] = operator_counters(metrics_url)
    data["quiet_after_c"] = _quiet(audit, 10, 120)
    t_end = time.time()
    sampler.close()
    watches.close()
    data["cluster_cpu_seconds_c"] = {k: round(v - cluster_cpu_before.get(k, 0.0), 1)
                                     for k, v in cluster_cpu(info).items()}  # fmt: skip

    with observed.lock:
        applied = dict(observed.applied)
        first = dict(observed.first_child)
        succeeded, promoted = dict(observed.succeeded), dict(observed.promoted)
        flaps, changes = list(observed.flaps), list(observed.ready_changes)
    by_kind: dict[str, list[float]] = {"TrainingRun": [], "InferenceDeployment": []}
    for (kind, name), sent in applied.items():
        if (kind, name) in first:
            when, _child = first[(kind, name)]
            by_kind[kind].append(round(when - sent, 3))
    data["apply_to_first_child"] = by_kind["TrainingRun"] + by_kind["InferenceDeployment"]
    data["first_child_by_kind"] = by_kind
    data["first_child_resources"] = dict(Counter(child.split("/", 1)[0] for _, child in first.values()))
    data["apply_to_succeeded"] = [round(succeeded[n] - applied[("TrainingRun", n)], 3) for n in runs if n in succeeded]
    data["apply_to_promoted"] = [round(promoted[n] - applied[("InferenceDeployment", n)], 3)
                                 for n in deps if n in promoted]  # fmt: skip
    data["summary"] = {
        "apply_to_first_child": summary(data["apply_to_first_child"]),
        "first_child_TrainingRun": summary(by_kind["TrainingRun"]),
        "first_child_InferenceDeployment": summary(by_kind["InferenceDeployment"]),
        "apply_to_succeeded": summary(data["apply_to_succeeded"]),
        "apply_to_promoted": summary(data["apply_to_promoted"]),
    }
    samples = sampler.samples
    data["rss_bytes_max"] = max((s["rss_bytes"] for s in samples), default=0)
    data["cpu_seconds"] = samples[-1]["cpu_seconds"] if samples else 0.0
    records = audit.between(t_apply0, t_end)
    non_watch = [r for r in records if r[1] != "watch"]
    window = max(1.0, t_done - t_apply0)
    data["api_requests"] = len(non_watch)
    data["api_requests_per_second"] = round(len(non_watch) / window, 2)
    rps = per_second(records, t_apply0, t_end)
    data["api_requests_per_second_peak"] = max(rps)
    data["requests_by_verb"] = by_verb(records)
    data["requests_by_verb_resource"] = by_verb_resource(records)
    data["requests_after_done"] = by_verb_resource([r for r in records if r[0] >= t_done])
    if other is not None:
        data["other_namespace"] = result = other.result(observed, t_apply0, operator_slots(operator), summary)
        data["summary"]["other_namespace_first_child"] = result["summary"]
        notes.append(f"{args.scale_other_namespace}: apply -> first child {result['summary']}, bound "
                     f"{result['bound_seconds']} s (2 x D, D <= {result['longest_pass']['seconds_at_most']} s); "
                     f"{NAMESPACE}: {data['summary']['apply_to_first_child']}")  # fmt: skip
    data["ready_flaps"] = len(flaps)
    data["flaps"] = [
        {**f, "t": round(f["t"] - t0, 2), "back_at": None if f["back_at"] is None else round(f["back_at"] - t0, 2)}
        for f in flaps
    ]
    data["ready_changes"] = len(changes)
    timeline = []
    for s in samples:
        second = int(s["t"] - (t_apply0 - t0))
        timeline.append({**s, "api_requests": rps[second] if 0 <= second < len(rps) else 0})
    data["timeline"] = timeline
    data["timeline_t0"] = "the bench's watches start; objects are created from t=" + f"{t_apply0 - t0:.1f} s"
    data["watch_errors"] = watches.errors
    audit.close()
    missing_child = [f"{k}/{n}" for (k, n) in applied if (k, n) not in first]
    if missing_child:
        notes.append(f"{len(missing_child)} objects never got a child: {missing_child[:10]}")
    p99 = data["summary"]["apply_to_first_child"].get("p99")
    if p99 is not None:
        notes.append(f"apply -> first child p99 {p99:.2f} s (goal <= 2 s); RSS max "
                     f"{data['rss_bytes_max'] / 2**20:.0f} MiB (goal < 250 MB)")  # fmt: skip
    log(f"scenario C summary: {json.dumps(data['summary'])}")


def operator_slots(operator: Operator) -> int | None:
    return two_namespaces.operator_slots(operator.env, operator.log_path.parent)


def _other_namespace(
    info: ClusterInfo, admin: Kube, metrics_url: str, args: argparse.Namespace
) -> two_namespaces.Other:
    """The other namespace's watches (listed) and its creates, not started yet (bench/two_namespaces.py)."""
    namespace = args.scale_other_namespace
    observed = Observed({})
    watches = Watches(info, observed, namespace)
    watches.start()
    watches.wait_listed()

    def create(name: str) -> None:
        with observed.lock:
            observed.applied[("TrainingRun", name)] = time.time()
        admin.create(custom_path("TrainingRun", namespace=namespace), training_run(name))

    other = two_namespaces.Other(args.scale_other_objects, args.scale_other_interval, observed, create, metrics_url)
    other.watches = watches
    return other


def scale_d(
    info: ClusterInfo, admin: Kube, operator: Operator, run_dir: Path, args: argparse.Namespace, data: dict[str, Any]
) -> Operator:
    """Stop the operator, start a fresh one, time how long until it has passed over every object."""
    start: dict[str, Any] = {"scenario": "D", "notes": []}
    data["start"] = start
    expected = set()
    for kind in ("TrainingRun", "ModelArtifact", "InferenceDeployment"):
        for item in admin.get(custom_path(kind))["items"]:
            expected.add((kind, item["metadata"]["name"]))
    start["objects"] = len(expected)
    start["objects_by_kind"] = dict(Counter(k for k, _ in expected))
    audit = AuditTail(info.audit_log or info.directory / "logs" / "audit.log", USER).start()
    log(f"scenario D: stopping the operator (pid {operator.pid})")
    operator.stop()
    fresh, metrics_url = _start_operator(info, run_dir, "scale-operator-restart.log", args)
    t0 = time.time()
    assert fresh.pid is not None
    sampler = Sampler(fresh.pid, t0).start()
    timeline: list[dict[str, Any]] = []
    resumed_at: float | None = None
    deadline = t0 + args.scale_resume_timeout
    while time.time() < deadline:
        if not fresh.alive():
            start["notes"].append(f"the fresh operator exited (code {fresh.proc and fresh.proc.returncode})")
            break
        seen = operator_objects(metrics_url)
        now = time.time()
        count = len(expected & seen) if seen is not None else 0
        timeline.append({"t": round(now - t0, 2), "resumed": count})
        if count >= len(expected):
            resumed_at = now
            break
        time.sleep(1)
    if resumed_at is None:
        start["notes"].append(f"not every object resumed within {args.scale_resume_timeout:.0f} s")
        end = time.time()
    else:
        log(f"scenario D: {len(expected)} objects resumed after {resumed_at - t0:.1f} s; "
            f"counting requests for {args.scale_resume_grace:.0f} s more")  # fmt: skip
        time.sleep(args.scale_resume_grace)  # the window of requests counted after resuming
        end = time.time()
    sampler.close()
    records = audit.between(t0 - 1, end)
    audit.close()
    writes = [r for r in records if r[1] in WRITES]
    start["resume_seconds"] = round(resumed_at - t0, 2) if resumed_at is not None else None
    start["window_seconds"] = round(end - t0, 1)
    start["writes"] = len(writes)
    start["write_requests"] = [{"t": round(w[0] - t0, 2), "verb": w[1], "resource": w[2], "name": w[3]}
                               for w in writes[:200]]  # fmt: skip
    start["requests_by_verb"] = by_verb(records)
    start["requests_by_verb_resource"] = by_verb_resource(records)
    start["rss_bytes_max"] = max((s["rss_bytes"] for s in sampler.samples), default=0)
    start["cpu_seconds"] = sampler.samples[-1]["cpu_seconds"] if sampler.samples else 0.0
    start["timeline"] = timeline
    start["resumed_means"] = ("every Slipway object of the namespace has its slipway_object_stalled series on the "
                              "fresh operator's /metrics (set at the end of its first pass); t from starting the "
                              "process, which includes importing Python and kopf's first lists")  # fmt: skip
    start["notes"].append(f"{len(writes)} writes by the fresh operator from its start to "
                          f"{args.scale_resume_grace:.0f} s after it resumed (target 0)")  # fmt: skip
    return fresh
