"""The local cluster's Gateway API data plane: Traefik v3 (``make traefik``, built from the
Go module proxy by ``e2e/gateway/build-traefik.sh``) as a local process with its Kubernetes
Gateway provider. It routes HTTPRoutes of Gateways of the GatewayClass ``localkube`` by
their backend weights to the pods of the backend Services (read from EndpointSlices).

Traefik binds a Gateway listener to the entryPoint with the same port, so the cluster's
Gateways listen on ``ClusterInfo.gateway_port`` (a free port chosen at start, printed by
``localkube up`` and kept in ``state.json``), on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localkube import bootstrap, prometheus
from localkube.kube import Kube, component_kubeconfig
from localkube.mlflow_server import free_port
from localkube.pki import CertificateAuthority
from localkube.procs import spawn
from localkube.state import ROOT, ClusterInfo
from localkube.wait import wait_answers, wait_for

TRAEFIK = ROOT / ".cache" / "traefik" / "traefik"
GATEWAY_CLASS = "localkube"
CONTROLLER = "traefik.io/gateway-controller"
# Each Traefik reads the GatewayClasses carrying its value of this label, and so the Gateways of
# those classes alone: a private gateway's Gateway is not the cluster gateway's too (both would
# write its status, each undoing the other's, many times a second).
CLASS_LABEL = "localkube.dev/gateway"
USER = "localkube:gateway"
PROCESS = "gateway"


def gateway_class(name: str, owner: str) -> dict[str, object]:
    """The GatewayClass ``name``, read by the Traefik whose selector is ``owner``."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": name, "labels": {CLASS_LABEL: owner}},
        "spec": {"controllerName": CONTROLLER},
    }


def objects() -> list[tuple[str, dict[str, object]]]:
    """The GatewayClass and the RBAC of Traefik's Gateway provider (as its Helm chart grants it)."""
    read = ["get", "list", "watch"]
    kinds = ["gatewayclasses", "gateways", "httproutes", "grpcroutes", "tcproutes", "tlsroutes", "backendtlspolicies"]
    out = bootstrap.cluster_role(
        USER,
        USER,
        [
            {"apiGroups": [""], "resources": ["namespaces", "services", "secrets", "configmaps"], "verbs": read},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            {"apiGroups": ["gateway.networking.k8s.io"], "resources": [*kinds, "referencegrants"], "verbs": read},
            {
                "apiGroups": ["gateway.networking.k8s.io"],
                "resources": [f"{k}/status" for k in kinds],
                "verbs": ["update", "patch"],
            },
        ],
    )
    out.append(("/apis/gateway.networking.k8s.io/v1/gatewayclasses", gateway_class(GATEWAY_CLASS, "cluster")))
    return out


def ensure_gateway(directory: Path, binary: Path = TRAEFIK, timeout: float = 60) -> ClusterInfo:
    """Start the gateway of the cluster in ``directory`` unless it runs; its CRDs (the Gateway API
    standard channel), GatewayClass and RBAC first. Returns the cluster's info, with
    ``gateway_port`` set."""
    info = ClusterInfo.load(directory)
    if info is None:
        raise FileNotFoundError(f"no cluster recorded in {directory}")
    running = next((p for p in info.processes if p.name == PROCESS), None)
    if running is not None and running.alive() and info.gateway_port:
        return info
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: run `make traefik` first")
    kube = Kube(info.kubeconfig)
    bootstrap.apply_gateway_api_crds(kube)
    for path, obj in objects():
        wait_for(lambda path=path, obj=obj: kube.ensure(path, obj), 30, f"{path} served")  # type: ignore[misc]
    kubeconfig = component_kubeconfig(
        directory, info.apiserver_url, CertificateAuthority.load(info.pki), "gateway", USER
    )
    port, admin = free_port(), free_port()
    proc = spawn(PROCESS, command(binary, port, admin), directory / "logs" / f"{PROCESS}.log",
                 env=environment(kubeconfig), cwd=directory)  # fmt: skip
    info.record([proc], gateway_port=port)

    wait_answers(f"http://127.0.0.1:{admin}/ping", proc.alive, proc.log, timeout, "the gateway (Traefik)")
    if info.prometheus_url:
        prometheus.add_scrape_job(directory / "prometheus" / "prometheus.yml", info.prometheus_url,
                                  scrape_job(PROCESS, admin))  # fmt: skip
    return info


@dataclass(frozen=True)
class PrivateGateway:
    """A gateway of one namespace's own (see :func:`private_gateway`)."""

    port: int  # its Gateways' listener port
    admin: int  # ping and /metrics
    job: str  # its Prometheus scrape job
    gateway_class: str  # the GatewayClass of its Gateways (no other Traefik reads it)


@contextmanager
def private_gateway(directory: Path, namespace: str, timeout: float = 60) -> Iterator[PrivateGateway]:
    """A Traefik of its own for ``namespace``'s Gateways (the cluster's gateway started with
    metrics, and a test that wants a gateway no other test sends through), scraped by the cluster's
    Prometheus as the job ``gateway-<namespace>``, reading the Gateways of its own GatewayClass
    (``gateway_class``: the cluster's gateway does not read them); stopped, and its job and class
    removed, on exit."""
    info = ensure_gateway(directory)
    kube = Kube(info.kubeconfig)
    class_name = f"{GATEWAY_CLASS}-{namespace}"[:253]
    classes = "/apis/gateway.networking.k8s.io/v1/gatewayclasses"
    kube.ensure(classes, gateway_class(class_name, namespace))
    kubeconfig = directory / "kubeconfigs" / "gateway.kubeconfig"
    port, admin = free_port(), free_port()
    name = f"{PROCESS}-{namespace}"
    log = directory / "logs" / f"{name}.log"
    proc = spawn(name, command(TRAEFIK, port, admin, namespace), log, env=environment(kubeconfig), cwd=directory)
    config, job = directory / "prometheus" / "prometheus.yml", f"{PROCESS}-{namespace}"
    try:
        wait_answers(f"http://127.0.0.1:{admin}/ping", proc.alive, proc.log, timeout, f"{name} (Traefik)")
        if info.prometheus_url:
            prometheus.add_scrape_job(config, info.prometheus_url, scrape_job(job, admin))
        yield PrivateGateway(port, admin, job, class_name)
    finally:
        proc.stop()
        kube.delete(f"{classes}/{class_name}")
        if info.prometheus_url:
            prometheus.remove_scrape_job(config, info.prometheus_url, job)


def environment(kubeconfig: Path) -> dict[str, str]:
    # Outside a pod: Traefik would take in-cluster credentials if these were set.
    return {"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""}


def command(binary: Path, port: int, admin: int, namespace: str = "") -> list[str]:
    """Traefik's command line: Gateways' listeners on the entryPoint ``web`` (127.0.0.1:``port``),
    ping and Prometheus metrics (per service: ``traefik_service_requests_total`` and
    ``traefik_service_request_duration_seconds``) on ``traefik`` (127.0.0.1:``admin``); the
    cluster's GatewayClass, or with ``namespace`` that namespace's Gateway API objects and its
    private class."""
    owner = namespace or "cluster"
    watched = [f"--providers.kubernetesgateway.labelselector={CLASS_LABEL}={owner}"]
    if namespace:
        watched.append(f"--providers.kubernetesgateway.namespaces={namespace}")
    return [
        str(binary),
        f"--entryPoints.web.address=127.0.0.1:{port}",
        f"--entryPoints.traefik.address=127.0.0.1:{admin}",
        "--ping=true",
        "--ping.entryPoint=traefik",
        "--metrics.prometheus=true",
        "--metrics.prometheus.entryPoint=traefik",
        "--metrics.prometheus.addServicesLabels=true",
        "--providers.kubernetesgateway=true",
        "--providers.kubernetesgateway.statusaddress.ip=127.0.0.1",
        *watched,
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
        "--log.level=INFO",
        "--log.noColor=true",
    ]


def scrape_job(name: str, admin: int) -> dict[str, object]:
    """The Prometheus scrape job of a gateway whose metrics are served on 127.0.0.1:``admin``."""
    return {"job_name": name, "scrape_interval": "2s", "scrape_timeout": "2s",
            "static_configs": [{"targets": [f"127.0.0.1:{admin}"]}]}  # fmt: skip


def gateway(name: str, namespace: str, port: int, gateway_class: str = GATEWAY_CLASS) -> dict[str, object]:
    """A Gateway of the cluster's class (or ``gateway_class``) with one HTTP listener on the
    gateway's port, open to routes of every namespace."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "gatewayClassName": gateway_class,
            "listeners": [
                {"name": "http", "port": port, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}
            ],
        },
    }
