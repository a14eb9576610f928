"""Helpers for the operator's integration tests: CRD install, the operator in-process, waiting on status."""

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kopf.testing import KopfRunner
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.bootstrap import apply_crds
from localkube.kube import Kube
from localkube.wait import wait_for

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION = "slipway.dev", "v1alpha1"


def install_crds(kube: Kube) -> list[str]:
    """Apply the CRDs of crds/ (server-side: test workers may do it at once) and wait until the API
    server serves them; then the PriorityClasses Slipway's pods use."""
    docs = [yaml.safe_load(path.read_text()) for path in sorted((ROOT / "crds").glob("slipway.dev_*.yaml"))]
    names = apply_crds(kube, docs, field_manager="slipway-tests")
    install_priority_classes(kube)
    return names


def install_priority_classes(kube: Kube) -> None:
    """manifests/priorityclasses.yaml, as `kubectl apply -k manifests/` installs it: Slipway's pods use them.
    value and preemptionPolicy are immutable: an existing one stays."""
    for body in yaml.safe_load_all((ROOT / "manifests" / "priorityclasses.yaml").read_text()):
        kube.ensure("/apis/scheduling.k8s.io/v1/priorityclasses", body)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """The operator under kopf's test runner (a thread of this process), watching one namespace."""

    def __init__(self, cluster: Any, namespace: str, mlflow_url: str | None = None, kubeconfig: Any = None) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.mlflow_url = mlflow_url or cluster.mlflow_url
        self.kubeconfig = kubeconfig or cluster.kubeconfig  # another identity, e.g. an audited one
        self.runner: KopfRunner | None = None

    def start(self) -> None:
        os.environ["KUBECONFIG"] = str(self.kubeconfig)
        os.environ["SLIPWAY_MLFLOW_URL"] = self.mlflow_url or ""
        os.environ["SLIPWAY_PROMETHEUS_URL"] = self.cluster.prometheus_url or ""
        os.environ["SLIPWAY_METRICS_PORT"] = "0"
        args = ["run", "--standalone", "--namespace", self.namespace, "-m", "slipway.operator"]
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
            "POD_NAME": name,
            **(env or {}),
        }
        environ.pop("POD_NAMESPACE", None)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT)
        self.started = time.monotonic()

    def metric(self, name: str) -> float | None:
        """The sum of a metric's samples on this replica's /metrics; None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as answer:
                text = answer.read().decode()
        except OSError:
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


def read_or_none(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)`` (a Kubernetes client read), or None if the object does not exist (404)."""
    try:
        return read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


TRAIN = ["python", "-m", "slipway.workloads.train"]


def training_run(
    name: str,
    steps: int = 6,
    env: dict[str, str] | list[dict[str, Any]] | None = None,
    model: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A TrainingRun of the reference trainer, checkpointing every 2 steps (model ``digits-NAME``
    unless named); ``env`` as name/value pairs or as EnvVar entries (valueFrom, ...)."""
    entries = [{"name": k, "value": v} for k, v in env.items()] if isinstance(env, dict) else list(env or [])
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRun",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": model or f"digits-{name}"},
            "image": "ghcr.io/slipway-dev/slipway:0.1.0",
            "command": TRAIN,
            "args": ["--steps", str(steps), "--checkpoint-every", "2"],
            "env": entries,
            **spec,
        },
    }


def apply_object(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    plural = body["kind"].lower() + "s"
    return custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)  # type: ignore[no-any-return]


def get_object(api: client.ApiClient, namespace: str, kind: str, name: str) -> dict[str, Any]:
    return custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, kind.lower() + "s", name)  # type: ignore[no-any-return]


def patch_object(api: client.ApiClient, namespace: str, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """A merge patch of a Slipway object (as ``kubectl patch --type merge``)."""
    plural = kind.lower() + "s"
    return custom(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)  # type: ignore[no-any-return]


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond  # type: ignore[no-any-return]
    return {}


def wait_status(
    api: client.ApiClient,
    namespace: str,
    kind: str,
    name: str,
    predicate: Callable[[dict[str, Any]], bool],
    timeout: float,
    what: str,
) -> dict[str, Any]:
    """Poll the object until ``predicate`` holds; on timeout, fail showing its last status."""
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        nonlocal last
        last = get_object(api, namespace, kind, name)
        return last if predicate(last) else None

    try:
        return wait_for(check, timeout, f"{kind} {namespace}/{name}: {what}")  # type: ignore[no-any-return]
    except Exception as exc:
        raise AssertionError(f"{exc}\nlast status: {yaml.safe_dump(last.get('status'))}") from exc


def events_for(api: client.ApiClient, namespace: str, name: str) -> list[tuple[str, str]]:
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return [(e.reason, e.message) for e in events.items]


def train_run(mlflow_url: str, experiment: str, steps: int = 6, bad: bool = False) -> str:
    """Train the reference model into a new MLflow run (as a local process); return the run id."""
    import subprocess
    import sys

    from slipway.mlflow import MlflowClient

    with MlflowClient(mlflow_url) as mlflow:
        run_id = mlflow.create_run(mlflow.get_or_create_experiment(experiment), "train").run_id
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_url, "MLFLOW_RUN_ID": run_id}
    if bad:
        env["SLIPWAY_BAD_MODEL"] = "1"
    subprocess.run(
        [sys.executable, "-m", "slipway.workloads.train", "--steps", str(steps)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return run_id


def model_artifact(name: str, model: str, source: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelArtifact",
        "metadata": {"name": name},
        "spec": {"model": {"name": model}, "source": source, **spec},
    }


def phase_in(*phases: str) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


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


def report(text: str) -> None:
    """A measurement for the log (run with -s): kopf's test runner swaps sys.stdout while the operator runs."""
    sys.__stderr__.write(text + "\n")


WRITES = ("create", "update", "patch", "delete", "deletecollection")


def assert_writes_only_in(cluster: Any, user: str, since: Any, namespace: str) -> list[Any]:
    """``user`` (an operator's audited identity) wrote something since ``since``, and only in
    ``namespace`` (from the API server's audit log); returns those writes."""
    from localkube.audit import requests_by

    writes = [r for r in requests_by(cluster, user, since) if r.verb in WRITES]
    outside = [(r.verb, r.resource, r.namespace, r.name) for r in writes if r.namespace != namespace]
    assert writes and outside == [], outside
    return writes


# -- InferenceDeployments: versions of a model, the test's `digits`, its tracks -------------------

ERRORS = {"name": "errorRate", "max": 0.05}
SERVE = ["python", "-m", "slipway.workloads.serve"]


class Versions:
    """Versions of ``model`` registered from the run ``run_id`` (the ``trained`` fixture's)."""

    def __init__(self, mlflow: Any, model: str, run_id: str) -> None:
        self.mlflow, self.model, self.run_id = mlflow, model, run_id
        mlflow.get_or_create_registered_model(model)

    def publish(self, **faults: str) -> str:
        """Register a version (with fault tags that travel with it) and move `candidate` to it."""
        tags = {f"slipway.fault.{k}": v for k, v in faults.items()}
        version = self.mlflow.create_model_version(self.model, f"runs:/{self.run_id}/model", self.run_id, tags)
        self.mlflow.set_alias(self.model, "candidate", version.version)
        return str(version.version)

    def alias(self, name: str) -> str | None:
        found = self.mlflow.get_version_by_alias(self.model, name)
        return found.version if found else None

    def alias_becomes(self, name: str, version: str, timeout: float = 30) -> None:
        """Alias moves follow the decision on record (status first, then MLflow): wait for it."""
        wait_for(lambda: self.alias(name) == version, timeout, f"alias {name} of {self.model} -> {version}")


def deployment(model: str, metrics: tuple[dict[str, Any], ...] = (ERRORS,), **rollout: Any) -> dict[str, Any]:
    """The InferenceDeployment `digits` of ``model``'s `candidate`: 2 replicas, canary 25% then 50%,
    analysis every 5 s (``metrics``), 40 s progress deadline, surge 1; ``rollout`` overrides."""
    analysis = {"interval": "5s", "failureLimit": 1, "metrics": list(metrics)}
    steps = [{"weight": 25, "pause": "5s"}, {"weight": 50, "pause": "5s"}]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceDeployment", "metadata": {"name": "digits"},
            "spec": {"model": {"name": model, "alias": "candidate"}, "image": "ghcr.io/slipway-dev/slipway:0.1.0",
                     "command": SERVE, "autoscaling": {"minReplicas": 2, "maxReplicas": 2},
                     "rollout": {"steps": steps, "interval": "5s", "progressDeadlineSeconds": 40,
                                 "maxSurgeReplicas": 1, "analysis": analysis, **rollout}}}  # fmt: skip


def serving(api: client.ApiClient, namespace: str, version: str, timeout: float = 120) -> dict[str, Any]:
    """Wait until `digits` is Promoted with ``version`` stable."""

    def check(o: dict[str, Any]) -> bool:
        status = o.get("status") or {}
        return status.get("phase") == "Promoted" and (status.get("stable") or {}).get("modelVersion") == version

    return wait_status(api, namespace, "InferenceDeployment", "digits", check, timeout, f"version {version} promoted")


def wait_phase(api: client.ApiClient, namespace: str, phases: list[str], timeout: float, what: str,
               watch: Any = None) -> dict[str, Any]:  # fmt: skip
    """Wait until `digits` is in one of ``phases``; ``watch.sample()`` (if given) at every look."""

    def check(obj: dict[str, Any]) -> bool:
        if watch is not None:
            watch.sample()
        return phase_in(*phases)(obj)

    return wait_status(api, namespace, "InferenceDeployment", "digits", check, timeout, what)


def patch_spec(api: client.ApiClient, namespace: str, spec: dict[str, Any],
               annotations: dict[str, str] | None = None) -> None:  # fmt: skip
    """A merge patch of `digits`' spec (and annotations)."""
    body: dict[str, Any] = {"spec": spec, **({"metadata": {"annotations": annotations}} if annotations else {})}
    patch_object(api, namespace, "InferenceDeployment", "digits", body)


def pods_of(api: client.ApiClient, namespace: str, track: str) -> list[Any]:
    """The pods of a track (``stable``, ``canary``) not being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"slipway.dev/track={track}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def status_of(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    return get_object(api, namespace, "InferenceDeployment", "digits").get("status") or {}


PREEMPTING = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
              "metadata": {"name": "slipway-inference-preempting"}, "value": 1000000,
              "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False}  # fmt: skip
"""A PriorityClass serving may preempt training with, as an admin would opt in."""


# -- the tenant of tests/security, and Prometheus' own reading of a query --------------------------


def create_as(tenant: Any, namespace: str, body: dict[str, Any]) -> None:
    """Create a Slipway object as ``tenant`` (tests/security's ``tenant`` fixture)."""
    custom(tenant.api).create_namespaced_custom_object(GROUP, VERSION, namespace, body["kind"].lower() + "s", body)


def stalled_with(reason: str) -> Callable[[dict[str, Any]], bool]:
    return lambda o: condition(o, "Stalled").get("reason") == reason


PROMQL_ORACLE = ROOT / ".cache" / "promqlparse" / "promqlparse"
"""Prometheus' parser as a command (`make promql-oracle`, tests/tools/promqlparse)."""


def require_promql_oracle() -> None:
    if not PROMQL_ORACLE.exists():
        import pytest

        pytest.fail(f"{PROMQL_ORACLE.relative_to(ROOT)} is missing: run `make promql-oracle` (Prometheus' parser)")


def promql_parse(texts: list[str]) -> list[dict[str, Any]]:
    """Prometheus' reading of each query: one oracle process for the whole batch."""
    require_promql_oracle()
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    done = subprocess.run([str(PROMQL_ORACLE)], input=stdin, capture_output=True, text=True, check=True, timeout=120)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(texts), done.stderr
    return answers


def promql_escapes(answer: dict[str, Any], namespace: str) -> list[str]:
    """What a parser's answer reads outside the namespace: each selector without namespace="<ns>", or
    with another matcher on the namespace label (the same one twice is the same)."""
    found = []
    for mode, reading in answer.items():
        for selector in reading.get("selectors") or []:
            ns = [m for m in selector if m["name"] == "namespace"]
            if not ns or any(m != {"name": "namespace", "type": "=", "value": namespace} for m in ns):
                found.append(f"{mode}: {selector}")
    return found
