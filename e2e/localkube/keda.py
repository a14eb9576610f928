"""KEDA in the local cluster: its operator (ScaledObjects: the HPA it makes, scaling to and from
zero, its Prometheus scaler) and its metrics adapter (the external metrics API,
``external.metrics.k8s.io``, which the HPA controller reads), each built from the Go module proxy
by ``e2e/keda/build.sh`` (``make keda``) and run as a local process, started when a test asks for
it (:func:`ensure_keda`).

As its release installs it: its CRDs, the operator's ClusterRole, the adapter registered as an
APIService (a Service of kube-system whose endpoint is the process on 127.0.0.1), and the
operator's gRPC metrics service, which the adapter calls with mutual TLS. The certificates are
issued by the cluster's CA (the release's own rotation is off). The external metrics API is its
own group: the cluster's custom metrics adapter (``custom.metrics.k8s.io``) is not touched.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import yaml

from localkube import bootstrap
from localkube.batch import _put, namespaced_role
from localkube.kube import Kube, component_kubeconfig
from localkube.mlflow_server import free_port
from localkube.pki import CertificateAuthority
from localkube.procs import Proc, spawn
from localkube.state import ROOT, ClusterInfo
from localkube.wait import wait_answers, wait_for

DIR = ROOT / ".cache" / "keda"
OPERATOR, ADAPTER = DIR / "keda-operator", DIR / "keda-adapter"
NAMESPACE = "keda"
USER = "localkube:keda"
SERVICE = "keda-metrics-apiserver"
GROUP = "external.metrics.k8s.io"
PROCESSES = ("keda-operator", "keda-adapter")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for f in sorted(path.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def crds(config: Path = DIR / "config") -> list[dict[str, Any]]:
    return [d for d in _docs(config / "crd" / "bases") if d.get("kind") == "CustomResourceDefinition"]


def rbac(config: Path = DIR / "config") -> list[tuple[str, dict[str, object]]]:
    """The operator's ClusterRole and its Role in its namespace, bound to the user both processes run
    as (the release runs both as the ServiceAccount keda-operator); the adapter's delegation."""
    rules: list[dict[str, object]] = []
    out: list[tuple[str, dict[str, object]]] = []
    for doc in yaml.safe_load_all((config / "rbac" / "role.yaml").read_text()):
        if not doc:
            continue
        if doc["kind"] == "ClusterRole":
            rules += doc.get("rules") or []
        elif doc["kind"] == "Role":
            out += namespaced_role(doc, f"keda-{doc['metadata']['name']}", NAMESPACE, USER)
    return bootstrap.cluster_role(USER, USER, rules) + out + bootstrap.aggregated_api_server(USER)


def _running(info: ClusterInfo, name: str) -> Proc | None:
    proc = next((p for p in info.processes if p.name == name), None)
    return proc if proc is not None and proc.alive() else None


def _digest() -> str:
    """What the running processes were built from: a new build starts them again."""
    return hashlib.sha256(b"".join(p.read_bytes()[: 1 << 20] for p in (OPERATOR, ADAPTER))).hexdigest()


def ensure_keda(directory: Path, timeout: float = 120) -> ClusterInfo:
    """Start KEDA in the cluster of ``directory`` unless it runs; returns once the operator is
    ready and the external metrics API is Available."""
    directory = directory.resolve()  # the processes run there: every path they get is absolute
    info = ClusterInfo.load(directory)
    if info is None:
        raise FileNotFoundError(f"no cluster recorded in {directory}")
    for binary in (OPERATOR, ADAPTER):
        if not binary.exists():
            raise FileNotFoundError(f"{binary} is missing: run `make keda` first")
    stamp = directory / "keda" / "digest"
    running = [_running(info, name) for name in PROCESSES]
    if all(running) and stamp.exists() and stamp.read_text() == _digest():
        return info
    for proc in running:
        if proc is not None:
            proc.stop()
    kube = Kube(info.kubeconfig)
    kube.ensure("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for path, obj in rbac():
        _put(kube, path, obj)
    bootstrap.apply_crds(kube, crds(), field_manager="localkube-keda")

    # One pair for the operator's gRPC service, the adapter's client and its API server: the
    # release's own secret holds one too (ca.crt, tls.crt, tls.key in one folder).
    ca = CertificateAuthority.load(info.pki)
    certs = directory / "keda" / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    pair = ca.issue("keda", USER, server=True, dns_names=("localhost", f"{SERVICE}.kube-system.svc"),
                    ip_addresses=("127.0.0.1",), mutual=True)  # fmt: skip
    (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
    (certs / "tls.key").write_bytes(pair.key.read_bytes())
    (certs / "ca.crt").write_bytes(ca.pair.cert.read_bytes())
    kubeconfig = component_kubeconfig(directory, info.apiserver_url, ca, "keda-client", USER)

    grpc, api, health, metrics, adapter_metrics = (free_port() for _ in range(5))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "",
           "WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE, "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE}  # fmt: skip
    logs = directory / "logs"
    operator = spawn("keda-operator", [
        str(OPERATOR), f"--kubeconfig={kubeconfig}", f"--cert-dir={certs}", "--enable-cert-rotation=false",
        "--enable-webhook-patching=false", "--enable-apiservice-patching=false", "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{metrics}", f"--health-probe-bind-address=127.0.0.1:{health}",
        f"--metrics-service-bind-address=127.0.0.1:{grpc}", "--zap-log-level=info",
    ], logs / "keda-operator.log", env=env, cwd=directory)  # fmt: skip
    adapter = spawn("keda-adapter", [
        str(ADAPTER), f"--kubeconfig={kubeconfig}", f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={api}", f"--port={adapter_metrics}",
        f"--cert-dir={certs}", f"--tls-cert-file={certs / 'tls.crt'}", f"--tls-private-key-file={certs / 'tls.key'}",
        f"--client-ca-file={certs / 'ca.crt'}", f"--metrics-service-address=127.0.0.1:{grpc}",
        "--metrics-service-grpc-authority=localhost", "--zap-log-level=info",
    ], logs / "keda-adapter.log", env=env, cwd=directory)  # fmt: skip
    info.record([operator, adapter])
    stamp.write_text(_digest())

    wait_answers(f"http://127.0.0.1:{health}/readyz", operator.alive, operator.log, timeout, "keda-operator")
    bootstrap.register_aggregated_api(kube, SERVICE, api, ca.pair.cert.read_text(), GROUP, ["v1beta1"])

    def available() -> bool:
        for proc in (operator, adapter):
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited while starting; see {proc.log}")
        svc = kube.get_or_none(f"/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.{GROUP}")
        conditions = {c["type"]: c["status"] for c in (svc or {}).get("status", {}).get("conditions", [])}
        return conditions.get("Available") == "True"

    wait_for(available, timeout, f"the APIService v1beta1.{GROUP} (keda-adapter) Available")
    return info
