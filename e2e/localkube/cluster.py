"""Start and stop the local cluster: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler (all from ``.cache/controlplane``), node agents, the volume
provisioner, Prometheus and MLflow, each a detached process logging to
``<dir>/logs/<name>.log``.
"""

from __future__ import annotations

import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from localkube import audit, bootstrap, prometheus
from localkube.kube import Kube, write_kubeconfig
from localkube.mlflow_server import SERVER_ENV as MLFLOW_SERVER_ENV
from localkube.mlflow_server import free_port, launch_mlflow, wait_healthy
from localkube.nodeagent.node import NodeSpec
from localkube.pki import CertificateAuthority, CertPair, service_account_keys
from localkube.procs import Proc, spawn, start_ticks
from localkube.state import ROOT, ClusterInfo
from localkube.wait import wait_for

log = logging.getLogger(__name__)

CONTROLPLANE = ROOT / ".cache" / "controlplane" / "controlplane"
METRICS_SERVER = ROOT / ".cache" / "metrics-server" / "metrics-server"
SERVICE_CIDR = "10.0.0.0/16"  # room for thousands of Services (a /24 holds 254: the scale bench makes 300+)
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass
class ClusterConfig:
    """What ``localkube up`` starts."""

    directory: Path
    nodes: int = 1
    node_name: str = "slipway-local"
    # What each node advertises: the node agent's defaults, in one place.
    cpu: str = NodeSpec.cpu
    memory: str = NodeSpec.memory
    pods: int = NodeSpec.pods
    gpus: int = NodeSpec.gpus
    gpu_memory_mib: int = NodeSpec.gpu_memory_mib
    gpu_product: str = NodeSpec.gpu_product
    mlflow: bool = True
    prometheus: bool = True
    scrape_interval: str = "5s"
    gateway_api: bool = False
    restart_backoff: float = 10.0
    # "process": node agents run pods as local processes (the fast default); "containerd": one real
    # node, the kubelet and kube-proxy on containerd, runc and a CNI bridge (localkube.realnode).
    runtime: str = "process"
    metrics_server: bool = True  # with Prometheus, also the custom metrics adapter
    # Prometheus metrics the adapter serves as Pods metrics (custom.metrics.k8s.io).
    pod_metrics: tuple[str, ...] = ("slipway_requests_in_flight", "vllm:num_requests_running")
    # The HPA controller's scale-down stabilization window (upstream default 5m), short so that
    # a test sees replicas return once load stops.
    hpa_downscale_stabilization: str = "30s"
    binary: Path = CONTROLPLANE
    metrics_server_binary: Path = METRICS_SERVER

    def node_names(self) -> list[str]:
        """``slipway-local``, then ``slipway-local-2``, ``slipway-local-3``..."""
        return [self.node_name if i == 0 else f"{self.node_name}-{i + 1}" for i in range(self.nodes)]


class ClusterRunning(RuntimeError):
    """A cluster recorded in the directory is still running."""


class Launcher:
    """Brings a cluster up step by step, recording each process as soon as it starts."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.dir = cfg.directory
        self.info = ClusterInfo(directory=self.dir)
        self.logs = self.dir / "logs"

    # -- helpers ---------------------------------------------------------------
    def _component(self, name: str) -> list[str]:
        link = self.cfg.binary.parent / name
        return [str(link)] if link.exists() else [str(self.cfg.binary), name]

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = spawn(name, cmd, self.logs / f"{name}.log", env=env, cwd=self.dir)
        self.info.processes.append(proc)
        self.info.save()
        log.info("started %s (pid %d)", name, proc.pid)
        return proc

    def _wait_healthy(self, proc: Proc, url: str, timeout: float, **kw: object) -> None:
        """Wait until ``url`` answers 200; fail at once if ``proc`` exits."""
        exited = False

        def check() -> bool:
            nonlocal exited
            if not proc.alive():
                exited = True
                return True
            try:
                return httpx.get(url, timeout=2, **kw).status_code == 200  # type: ignore[arg-type]
            except httpx.HTTPError:
                return False

        try:
            wait_for(check, timeout, f"{proc.name} at {url}")
        except TimeoutError as e:
            raise TimeoutError(f"{e}; see {proc.log}") from None
        if exited:
            raise RuntimeError(f"{proc.name} exited while starting; see {proc.log}")

    def _kubeconfig(self, name: str, pair: CertPair) -> Path:
        path = self.dir / "kubeconfigs" / f"{name}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(path, self.info.apiserver_url, self.ca.pair.cert, pair.cert, pair.key, user=name)
        return path

    # -- steps -----------------------------------------------------------------
    def prepare(self) -> None:
        if not self.cfg.binary.exists():
            raise FileNotFoundError(f"{self.cfg.binary} is missing: run `make controlplane` first")
        if self.cfg.prometheus:
            prometheus.binary()  # fail before starting anything
        if self.cfg.metrics_server and not self.cfg.metrics_server_binary.exists():
            raise FileNotFoundError(f"{self.cfg.metrics_server_binary} is missing: run `make metrics-server` first")
        from localkube.realnode import check_runtime

        check_runtime(self.cfg.runtime, self.cfg.nodes)
        previous = ClusterInfo.load(self.dir)
        if previous and not previous.stopped and previous.any_alive():
            raise ClusterRunning(f"a cluster is already running in {self.dir} (stop it with `localkube down`)")
        if self.dir.exists():
            if previous is None and any(self.dir.iterdir()):
                raise FileExistsError(f"{self.dir} is not empty and holds no localkube cluster; not touching it")
            shutil.rmtree(self.dir)
        self.logs.mkdir(parents=True)
        self.ports = {
            name: free_port()
            for name in (
                "etcd",
                "etcd-peer",
                "apiserver",
                "controller-manager",
                "scheduler",
                "metrics-server",
                "metrics-adapter",
            )
        }
        self.kubelet_ports = {node: free_port() for node in self.cfg.node_names()}
        self.info.apiserver_url = f"https://127.0.0.1:{self.ports['apiserver']}"
        self.info.nodes = self.cfg.node_names()
        self.info.save()
        self._pki()

    def _pki(self) -> None:
        self.ca = CertificateAuthority(self.info.pki)
        ca = self.ca
        self.certs = {
            "apiserver": ca.issue(
                "apiserver",
                "kube-apiserver",
                server=True,
                dns_names=(
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                ),
                ip_addresses=("127.0.0.1", "10.0.0.1"),
            ),
            "admin": ca.issue("admin", "localkube-admin", ("system:masters",)),
            "controller-manager": ca.issue("controller-manager", "system:kube-controller-manager"),
            "scheduler": ca.issue("scheduler", "system:kube-scheduler"),
            "provisioner": ca.issue("provisioner", bootstrap.PROVISIONER_USER),
            "prometheus": ca.issue("prometheus", bootstrap.PROMETHEUS_USER),
            "front-proxy-client": ca.issue("front-proxy-client", "front-proxy-client"),
            # The API server's identity towards the node agents' kubelet API (kubectl logs).
            "apiserver-kubelet-client": ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client"),
            "metrics-server": ca.issue("metrics-server", bootstrap.METRICS_SERVER_USER),
            "metrics-adapter": ca.issue("metrics-adapter", bootstrap.METRICS_ADAPTER_USER),
            "metrics-adapter-serving": ca.issue(
                "metrics-adapter-serving",
                "custom-metrics-adapter",
                server=True,
                dns_names=("custom-metrics-adapter.kube-system.svc", "localhost"),
                ip_addresses=("127.0.0.1",),
            ),
            "metrics-server-serving": ca.issue(
                "metrics-server-serving",
                "metrics-server",
                server=True,
                dns_names=("metrics-server.kube-system.svc", "localhost"),
                ip_addresses=("127.0.0.1",),
            ),
        }
        for node in self.info.nodes:
            self.certs[f"node-{node}"] = ca.issue(f"node-{node}", f"system:node:{node}", ("system:nodes",))
            self.certs[f"kubelet-{node}"] = ca.issue(
                f"kubelet-{node}",
                f"system:node:{node}",
                ("system:nodes",),
                server=True,
                dns_names=(node, "localhost"),
                ip_addresses=("127.0.0.1",),
            )
        self.sa = service_account_keys(self.info.pki)

    def start_etcd(self) -> None:
        port, peer = self.ports["etcd"], self.ports["etcd-peer"]
        proc = self._spawn(
            "etcd",
            self._component("etcd")
            + [
                "--name=localkube",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{port}",
                f"--advertise-client-urls=http://127.0.0.1:{port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=localkube=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait_healthy(proc, f"http://127.0.0.1:{port}/health", 30)

    def start_apiserver(self) -> None:
        pki = self.info.pki
        # Requests of users in localkube:audited only (see localkube.audit), written as each one completes.
        audit_policy = audit.write_policy(self.dir / audit.POLICY_FILE)
        audit_log = self.dir / audit.LOG_FILE
        cmd = self._component("kube-apiserver") + [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={self.certs['apiserver'].cert}",
            f"--tls-private-key-file={self.certs['apiserver'].key}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={self.sa.cert}",
            f"--service-account-signing-key-file={self.sa.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--profiling=false",
            # Aggregation-layer settings (also stop the components' "missing requestheader CA" noise).
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.certs['front-proxy-client'].cert}",
            f"--proxy-client-key-file={self.certs['front-proxy-client'].key}",
            # Aggregated APIs (metrics.k8s.io) are reached at their endpoints, not a Service IP.
            "--enable-aggregator-routing=true",
            # The node agents' kubelet API (pods/log, metrics), verified against the cluster CA.
            f"--kubelet-client-certificate={self.certs['apiserver-kubelet-client'].cert}",
            f"--kubelet-client-key={self.certs['apiserver-kubelet-client'].key}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--audit-policy-file={audit_policy}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # each event written as its stage happens: no batching delay
            "--audit-log-maxsize=50",
            "--audit-log-maxbackup=1",
        ]
        # Pods live on 127.0.x.y: the build accepts loopback endpoints only with this (see build.sh).
        env = {"LOCALKUBE_ALLOW_LOOPBACK_ENDPOINTS": "true"}
        self.info.audit_log = audit_log  # recorded with the process
        proc = self._spawn("kube-apiserver", cmd, env=env)
        kubeconfig = self.info.kubeconfig
        write_kubeconfig(
            kubeconfig, self.info.apiserver_url, self.ca.pair.cert, self.certs["admin"].cert, self.certs["admin"].key
        )
        self._wait_healthy(proc, f"{self.info.apiserver_url}/readyz", 90, verify=self.info.admin_ssl_context())
        self.kube = Kube(kubeconfig)
        bootstrap.apply(self.kube)

    def start_controller_manager(self) -> None:
        kc = self._kubeconfig("controller-manager", self.certs["controller-manager"])
        pki = self.info.pki
        port = self.ports["controller-manager"]
        self.kcm = self._spawn(
            "kube-controller-manager",
            self._component("kube-controller-manager")
            + [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'controller-manager-certs'}",
                "--leader-elect=false",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.sa.key}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--horizontal-pod-autoscaler-downscale-stabilization={self.cfg.hpa_downscale_stabilization}",
            ],
        )

    def start_scheduler(self) -> None:
        kc = self._kubeconfig("scheduler", self.certs["scheduler"])
        self.scheduler = self._spawn(
            "kube-scheduler",
            self._component("kube-scheduler")
            + [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
                f"--cert-dir={self.dir / 'scheduler-certs'}",
                "--leader-elect=false",
            ],
        )

    def wait_controllers(self) -> None:
        for proc, port in ((self.kcm, "controller-manager"), (self.scheduler, "scheduler")):
            self._wait_healthy(proc, f"https://127.0.0.1:{self.ports[port]}/healthz", 60, verify=False)

    def start_provisioner(self) -> None:
        kc = self._kubeconfig("provisioner", self.certs["provisioner"])
        self._spawn(
            "provisioner",
            [
                sys.executable,
                "-m",
                "localkube.provisioner",
                f"--kubeconfig={kc}",
                f"--volumes-dir={self.dir / 'volumes'}",
            ],
            env={"PYTHONUNBUFFERED": "1"},
        )

    def start_node_agents(self) -> None:
        cfg = self.cfg
        for index, node in enumerate(self.info.nodes):
            kc = self._kubeconfig(f"node-{node}", self.certs[f"node-{node}"])
            self._spawn(
                f"nodeagent-{node}",
                [
                    sys.executable,
                    "-m",
                    "localkube.nodeagent",
                    f"--kubeconfig={kc}",
                    f"--node-name={node}",
                    f"--node-index={index}",
                    f"--state-dir={self.dir / 'nodes' / node}",
                    f"--pods-dir={self.dir / 'pods'}",
                    f"--ca-file={self.ca.pair.cert}",
                    f"--cpu={cfg.cpu}",
                    f"--memory={cfg.memory}",
                    f"--pods={cfg.pods}",
                    f"--gpus={cfg.gpus}",
                    f"--gpu-memory-mib={cfg.gpu_memory_mib}",
                    f"--gpu-product={cfg.gpu_product}",
                    f"--restart-backoff={cfg.restart_backoff}",
                    f"--kubelet-port={self.kubelet_ports[node]}",
                    f"--kubelet-cert={self.certs[f'kubelet-{node}'].cert}",
                    f"--kubelet-key={self.certs[f'kubelet-{node}'].key}",
                ],
                env={"PYTHONUNBUFFERED": "1"},
            )

    def wait_nodes_ready(self, timeout: float = 90) -> None:
        def ready() -> bool:
            for name in self.info.nodes:
                node = self.kube.get_or_none(f"/api/v1/nodes/{name}")
                if node is None:
                    return False
                conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
                taints = {t["key"] for t in node.get("spec", {}).get("taints", [])}
                if conditions.get("Ready") != "True" or "node.kubernetes.io/not-ready" in taints:
                    return False
            return True

        wait_for(ready, timeout, f"nodes {self.info.nodes} Ready without the not-ready taint", interval=0.3)
        # The serviceaccount and root-ca publisher controllers make "default" usable for pods.
        wait_for(
            lambda: (
                self.kube.get_or_none("/api/v1/namespaces/default/serviceaccounts/default")
                and self.kube.get_or_none("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            ),
            timeout,
            "the default service account and kube-root-ca.crt",
        )

    def start_metrics_server(self) -> None:
        """metrics-server, registered as ``v1beta1.metrics.k8s.io`` (``kubectl top``, CPU HPAs)."""
        kc = self._kubeconfig("metrics-server", self.certs["metrics-server"])
        port = self.ports["metrics-server"]
        serving = self.certs["metrics-server-serving"]
        self.metrics_server = self._spawn(
            "metrics-server",
            [
                str(self.cfg.metrics_server_binary),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--kubelet-certificate-authority={self.ca.pair.cert}",
                "--kubelet-use-node-status-port",
                "--kubelet-preferred-address-types=InternalIP",
                "--metric-resolution=10s",
                "--kubelet-request-timeout=5s",
            ],
        )
        ca = self.ca.pair.cert.read_text()
        bootstrap.register_aggregated_api(self.kube, "metrics-server", port, ca, "metrics.k8s.io", ["v1beta1"])

    def start_metrics_adapter(self) -> None:
        """The custom metrics adapter (``metrics-adapter`` of the control-plane binary), registered as
        ``custom.metrics.k8s.io``: Pods metrics for HPAs, read from the cluster's Prometheus."""
        kc = self._kubeconfig("metrics-adapter", self.certs["metrics-adapter"])
        port = self.ports["metrics-adapter"]
        serving = self.certs["metrics-adapter-serving"]
        self.metrics_adapter = self._spawn(
            "metrics-adapter",
            self._component("metrics-adapter")
            + [
                f"--lister-kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--prometheus-url={self.info.prometheus_url}",
                *(f"--pod-metric={m}" for m in self.cfg.pod_metrics),
            ],
        )
        ca = self.ca.pair.cert.read_text()
        group = "custom.metrics.k8s.io"
        bootstrap.register_aggregated_api(self.kube, "custom-metrics-adapter", port, ca, group, ["v1beta1", "v1beta2"])

    def wait_aggregated_apis(self, timeout: float = 60) -> None:
        """Wait until every APIService registered by :meth:`start_metrics_server` and
        :meth:`start_metrics_adapter` is Available; fail at once if its process exits."""
        wanted = []
        if self.cfg.metrics_server:
            wanted.append((self.metrics_server, "v1beta1.metrics.k8s.io"))
        if self.cfg.metrics_server and self.cfg.prometheus:
            wanted += [(self.metrics_adapter, f"{v}.custom.metrics.k8s.io") for v in ("v1beta1", "v1beta2")]
        for proc, name in wanted:

            def available(proc: Proc = proc, name: str = name) -> bool:
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited while starting; see {proc.log}")
                svc = self.kube.get_or_none(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
                conditions = {c["type"]: c["status"] for c in (svc or {}).get("status", {}).get("conditions", [])}
                return conditions.get("Available") == "True"

            wait_for(available, timeout, f"the APIService {name} ({proc.name}) Available")

    def start_prometheus(self) -> None:
        port = free_port()
        pdir = self.dir / "prometheus"
        pdir.mkdir()
        config = prometheus.write_config(
            pdir / "prometheus.yml",
            apiserver_url=self.info.apiserver_url,
            ca=self.ca.pair.cert,
            client=self.certs["prometheus"],
            scrape_interval=self.cfg.scrape_interval,
        )
        proc = self._spawn("prometheus", prometheus.command(config, pdir / "data", port))
        url = f"http://127.0.0.1:{port}"
        self._wait_healthy(proc, f"{url}/-/ready", 60)
        self.info.prometheus_url = url
        self.info.save()

    def launch_mlflow(self) -> None:
        """Start MLflow first (it takes seconds to boot) and record it; see :meth:`wait_mlflow`."""
        self.mlflow = launch_mlflow(self.dir / "mlflow")
        pid = self.mlflow.process.pid
        proc = Proc(name="mlflow", pid=pid, ticks=start_ticks(pid) or 0, log=str(self.dir / "mlflow" / "mlflow.log"))
        proc.cmd = [str(a) for a in self.mlflow.process.args]  # type: ignore[union-attr]
        proc.env = dict(MLFLOW_SERVER_ENV)
        self.info.processes.append(proc)
        self.info.save()

    def wait_mlflow(self) -> None:
        wait_healthy(self.mlflow)
        self.info.mlflow_url = self.mlflow.url
        self.info.save()

    def start_gateway(self) -> None:
        from localkube.gateway import ensure_gateway

        self.info = ensure_gateway(self.dir)


def up(cfg: ClusterConfig) -> ClusterInfo:
    """Start a cluster in ``cfg.directory``; return its info once everything is ready.

    On failure everything started so far is stopped again.
    """
    launcher = Launcher(cfg)
    launcher.prepare()
    try:
        if cfg.mlflow:
            launcher.launch_mlflow()
        launcher.start_etcd()
        launcher.start_apiserver()
        launcher.start_controller_manager()
        launcher.start_scheduler()
        launcher.start_provisioner()
        if cfg.runtime == "containerd":
            from localkube.realnode import start_real_node

            start_real_node(launcher)  # containerd, images of dist/, the kubelet, kube-proxy
        else:
            launcher.start_node_agents()
        launcher.wait_controllers()
        launcher.wait_nodes_ready()
        if cfg.metrics_server:
            launcher.start_metrics_server()
        if cfg.prometheus:
            launcher.start_prometheus()
        if cfg.metrics_server and cfg.prometheus:
            launcher.start_metrics_adapter()
        if cfg.gateway_api:
            launcher.start_gateway()
        launcher.wait_aggregated_apis()
        if cfg.mlflow:
            launcher.wait_mlflow()
    except BaseException:
        down(cfg.directory)
        raise
    return launcher.info


def down(directory: Path) -> ClusterInfo | None:
    """Stop every process recorded in ``directory``'s state file, newest first, and their pods."""
    info = ClusterInfo.load(directory)
    if info is None:
        return None
    from localkube import nodedown

    nodedown.remove_pods(directory, info.processes)  # a real node's pods, while containerd runs
    for proc in reversed(info.processes):
        proc.stop(timeout=20 if proc.name.startswith("nodeagent-") else 10)
    nodedown.cleanup(directory)
    # A node agent that died hard leaves its pods' processes behind: stop those too.
    from localkube.nodeagent.tracking import kill_tracked_processes

    for node_dir in sorted((directory / "nodes").glob("*")):
        kill_tracked_processes(node_dir)
    info.stopped = True
    info.save()
    return info


def _recorded(directory: Path, name: str) -> tuple[ClusterInfo, int]:
    info = ClusterInfo.load(directory)
    if info is None:
        raise FileNotFoundError(f"no cluster recorded in {directory}")
    names = [p.name for p in info.processes]
    if name not in names:
        raise KeyError(f"no process {name!r} in the cluster of {directory} (it has {', '.join(names)})")
    return info, names.index(name)


def stop_process(directory: Path, name: str) -> None:
    """Stop one recorded process (SIGTERM, then SIGKILL): an outage of that component."""
    info, index = _recorded(directory, name)
    info.processes[index].stop()


def start_process(directory: Path, name: str) -> Proc:
    """Start a stopped process again with its recorded command and environment (same ports, same data)."""
    info, index = _recorded(directory, name)
    old = info.processes[index]
    if old.alive():
        raise RuntimeError(f"{name} (pid {old.pid}) is still running")
    new = old.start_again(cwd=directory)
    info.processes[index] = new
    info.save()
    return new


def restart(directory: Path, name: str) -> Proc:
    """Stop the recorded process ``name`` (if alive) and start it again with the same command.

    Meant for crash-recovery tests of any component: node agents, the provisioner, the API server.
    """
    stop_process(directory, name)
    return start_process(directory, name)


def process_report(directory: Path) -> str:
    """One line per process: name, pid, alive, RSS of its process group."""
    from localkube.procs import group_rss_kib

    info = ClusterInfo.load(directory)
    if info is None:
        return f"no cluster recorded in {directory}"
    lines = []
    for p in info.processes:
        alive = p.alive()
        rss = f"{group_rss_kib(p.pid) / 1024:.0f} MiB" if alive else "-"
        lines.append(f"{p.name:32} pid {p.pid:<8} {'running' if alive else 'stopped':8} rss {rss}")
    return "\n".join(lines)


class ExtraApiServer:
    """One more kube-apiserver on the cluster's etcd, with the recorded one's command and ``flags`` added
    (e.g. ``--watch-cache=false``): a second API endpoint that a test can misconfigure without touching
    the one every other test uses. The same certificates (they name 127.0.0.1), its own port, serving
    certificates and audit log. A context manager: stopped on exit."""

    def __init__(self, directory: Path, name: str, flags: list[str]) -> None:
        info, index = _recorded(directory, "kube-apiserver")
        recorded = info.processes[index]
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        own = directory / name
        replaced = {"--secure-port": str(self.port), "--cert-dir": str(own / "certs"),
                    "--audit-log-path": str(own / "audit.log")}  # fmt: skip
        cmd = [f"{arg.split('=', 1)[0]}={replaced[arg.split('=', 1)[0]]}" if arg.split("=", 1)[0] in replaced else arg
               for arg in recorded.cmd]  # fmt: skip
        self.etcd_url = next(a.split("=", 1)[1] for a in cmd if a.startswith("--etcd-servers=")).split(",")[0]
        self.info = info
        self.proc = spawn(name, cmd + flags, own / f"{name}.log", env=recorded.env, cwd=directory)

    def __enter__(self) -> ExtraApiServer:
        def ready() -> bool:
            if not self.proc.alive():
                raise RuntimeError(f"{self.proc.name} exited while starting; see {self.proc.log}")
            try:
                answer = httpx.get(f"{self.url}/readyz", timeout=2, verify=self.info.admin_ssl_context())
            except httpx.HTTPError:
                return False
            return answer.status_code == 200

        try:
            wait_for(ready, 90, f"{self.proc.name} at {self.url}")
        except BaseException:
            self.proc.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.stop()


def compact_etcd(etcd_url: str) -> int:
    """Compact etcd's history up to its current revision, as the API server does every 5 minutes: a
    watch that resumes from an older resourceVersion without the API server's watch cache is answered
    410 Gone. Returns the revision."""
    head = httpx.post(f"{etcd_url}/v3/kv/range", json={"key": "AA=="}, timeout=10)
    head.raise_for_status()
    revision = int(head.json()["header"]["revision"])
    done = httpx.post(f"{etcd_url}/v3/kv/compaction", json={"revision": str(revision), "physical": True}, timeout=30)
    done.raise_for_status()
    return revision
