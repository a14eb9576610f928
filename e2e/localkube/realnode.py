"""The real node of the local cluster (``localkube up --runtime containerd``): Debian's containerd and
runc, a CNI bridge with host-local addresses, and the kubelet and kube-proxy built from the control
plane's own Go modules (``make node``). Every file lives under ``<cluster dir>/realnode``; nothing is
written to the machine's containerd, kubelet or CNI folders.

The kubelet refuses a loopback node IP, and the cluster sends no traffic to the machine's interface
address, so the kubelet runs with ``--cloud-provider=external`` and this module plays the cloud
controller's one part that matters here: it sets the node's address to 127.0.0.1 (where the kubelet
serves) and lifts the ``uninitialized`` taint. The API server reaches the kubelet on loopback for
``kubectl logs`` and ``exec``; pods live in their own network namespaces on the bridge.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from localkube.kube import Kube, write_kubeconfig
from localkube.mlflow_server import free_port
from localkube.nodeimages import PAUSE_IMAGE, dist_archives, import_images, pause_archive
from localkube.pki import CertificateAuthority
from localkube.procs import Proc
from localkube.state import ROOT
from localkube.wait import wait_answers, wait_for

if TYPE_CHECKING:
    from localkube.cluster import Launcher

log = logging.getLogger(__name__)

NODE_BINARY = ROOT / ".cache" / "node" / "node"
CNI_BIN = Path("/usr/lib/cni")
NETWORK = "localkube-realnode"  # the CNI network's name: its iptables chains carry it in a comment
BRIDGE = "lkbr0"
POD_SUBNET = "10.244.0.0/24"
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
ROUTE_LOCALNET = Path("/proc/sys/net/ipv4/conf/all/route_localnet")

Spawn = Callable[[str, list[str], dict[str, str] | None], Proc]


def node_dir(cluster_dir: Path) -> Path:
    return cluster_dir / "realnode"


def containerd_socket(cluster_dir: Path) -> Path:
    return node_dir(cluster_dir) / "containerd" / "containerd.sock"


def check_prerequisites(binary: Path = NODE_BINARY) -> None:
    """Fail before anything starts, naming what is missing and how to get it."""
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: run `make node` first")
    for tool, package in (("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc"),
                          ("iptables", "iptables"), ("ip", "iproute2")):  # fmt: skip
        if shutil.which(tool) is None:
            raise FileNotFoundError(f"{tool} is missing: install Debian's {package} (apt-get install -y {package})")
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN / plugin).exists():
            raise FileNotFoundError(f"{CNI_BIN / plugin} is missing: install Debian's containernetworking-plugins")
    dist_archives()


def check_runtime(runtime: str, nodes: int) -> None:
    """``localkube up --runtime``: ``process`` (node agents) or ``containerd`` (one real node,
    its prerequisites checked before anything starts)."""
    if runtime == "containerd":
        if nodes != 1:
            raise ValueError(f"the containerd runtime runs one node, not {nodes}")
        check_prerequisites()
    elif runtime != "process":
        raise ValueError(f"unknown runtime {runtime!r}: use process or containerd")


def containerd_config(root: Path) -> str:
    """containerd 1.6's configuration: everything under ``root``; the CRI plugin with the local pause
    image, runc as the default runtime, the CNI folders of this node, registries' ``hosts.toml`` under
    ``certs.d`` (``trust_registry``), and ``restrict_oom_score_adj``
    (processes here may not lower their OOM score: without it every sandbox fails in runc with
    "can't get final child's PID from pipe: EOF")."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
[grpc]
  address = "{root / "containerd.sock"}"
[metrics]
  address = ""
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{root / "runc"}"
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{root.parent / "cni" / "net.d"}"
[{cri}.registry]
  config_path = "{root / "certs.d"}"
"""


def trust_registry(cluster_dir: Path, host: str) -> Path:
    """Let the node pull from the plain-HTTP registry ``host`` (``127.0.0.1:port``): its
    ``hosts.toml`` under the CRI's ``config_path``, which containerd reads at each pull, so a registry
    started after the node is trusted at once. Returns the file."""
    path = node_dir(cluster_dir) / "containerd" / "certs.d" / host / "hosts.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'server = "http://{host}"\n\n[host."http://{host}"]\n'
                    '  capabilities = ["pull", "resolve"]\n  skip_verify = true\n')  # fmt: skip
    return path


def cni_conflist(ipam_dir: Path) -> dict[str, object]:
    """A bridge (pods' gateway, masquerading to the outside) with host-local addresses kept under
    ``ipam_dir``, plus loopback."""
    return {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(
    ports: dict[str, int], ca: Path, cert: Path, key: Path, socket: Path, logs: Path
) -> dict[str, object]:
    """The kubelet's configuration for this machine: cgroup v1 allowed (``failCgroupV1: false``),
    cgroupfs without QoS cgroups or enforced allocatable, swap tolerated, served on loopback only,
    clients authenticated by the cluster CA and authorized by the API server (webhook), the node's own
    images (``localhost/``) never re-pulled to check credentials."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{socket}",
        "address": "127.0.0.1",
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet-healthz"],
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {
            "x509": {"clientCAFile": str(ca)},
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
        },  # fmt: skip
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(logs),
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        # The images imported from dist/ (localhost/...) are used as they are; an image the kubelet
        # pulls from a registry is checked as by default. Under the default policy, once the kubelet has
        # pulled an image by a registry's name (the release test), a pod naming the same image as
        # localhost/... would be made to pull it from "localhost", which no registry serves.
        "imagePullCredentialsVerificationPolicy": "NeverVerifyAllowlistedImages",
        "preloadedImagesVerificationAllowlist": ["localhost/*"],
        "nodeStatusUpdateFrequency": "5s",
        "shutdownGracePeriod": "0s",
    }


def kube_proxy_config(ports: dict[str, int], kubeconfig: Path, node: str) -> dict[str, object]:
    """kube-proxy in iptables mode for the pods' subnet; health and metrics on loopback; conntrack
    sysctls left as they are (``maxPerCore: 0``)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node,
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{ports['kube-proxy-healthz']}",
        "metricsBindAddress": f"127.0.0.1:{ports['kube-proxy-metrics']}",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


class RealNode:
    """Starts containerd, the kubelet and kube-proxy for one node; each recorded through ``spawn``."""

    def __init__(self, cluster_dir: Path, name: str, ca: CertificateAuthority, kube: Kube, apiserver_url: str,
                 spawn: Spawn, binary: Path = NODE_BINARY) -> None:  # fmt: skip
        self.dir = node_dir(cluster_dir)
        self.name, self.ca, self.kube, self.url, self.spawn, self.binary = name, ca, kube, apiserver_url, spawn, binary
        self.socket = containerd_socket(cluster_dir)
        self.ports = {
            p: free_port() for p in ("kubelet", "kubelet-healthz", "kube-proxy-healthz", "kube-proxy-metrics")
        }

    def _component(self, name: str) -> list[str]:
        link = self.binary.parent / name
        return [str(link)] if link.exists() else [str(self.binary), name]

    def _write(self, path: Path, text: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def start_containerd(self) -> None:
        config = self._write(self.dir / "containerd" / "config.toml", containerd_config(self.dir / "containerd"))
        conflist = json.dumps(cni_conflist(self.dir / "cni" / "ipam"), indent=2)
        self._write(self.dir / "cni" / "net.d" / "10-localkube.conflist", conflist)
        proc = self.spawn("containerd", ["containerd", f"--config={config}"], None)
        wait_for(lambda: self.socket.exists() or not proc.alive(), 30, f"containerd's socket {self.socket}")
        if not proc.alive():
            raise RuntimeError(f"containerd exited while starting; see {proc.log}")

    def import_images(self) -> list[str]:
        names = import_images(self.socket, [pause_archive(), *dist_archives()])
        log.info("imported into containerd: %s", ", ".join(names))
        return names

    def start_kubelet(self, node_cert: tuple[Path, Path], serving: tuple[Path, Path]) -> None:
        kubeconfig = self.dir / "kubelet" / "kubelet.kubeconfig"
        kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(
            kubeconfig, self.url, self.ca.pair.cert, node_cert[0], node_cert[1], user=f"system:node:{self.name}"
        )
        cfg = kubelet_config(self.ports, self.ca.pair.cert, serving[0], serving[1], self.socket, self.dir / "pod-logs")
        config = self._write(self.dir / "kubelet" / "config.yaml", json.dumps(cfg, indent=2))
        self.kubelet = self.spawn(
            "kubelet",
            self._component("kubelet")
            + [
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={self.name}",
                f"--root-dir={self.dir / 'kubelet' / 'root'}",
                f"--cert-dir={self.dir / 'kubelet' / 'pki'}",
                "--cloud-provider=external",
                "--v=1",
            ],  # fmt: skip
            None,
        )
        wait_answers(f"http://127.0.0.1:{self.ports['kubelet-healthz']}/healthz", self.kubelet.alive,
                     self.kubelet.log, 60, "the kubelet")  # fmt: skip

    def initialize(self) -> None:
        """What a cloud controller does for a new node: its addresses (loopback, where the kubelet
        serves), and the ``uninitialized`` taint lifted."""
        path = f"/api/v1/nodes/{self.name}"
        wait_for(lambda: self.kube.get_or_none(path), 60, f"the kubelet to register node {self.name}")
        addresses = [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.name}]
        node = self.kube.patch(f"{path}/status", {"status": {"addresses": addresses}}, kind="merge")
        taints = [t for t in node.get("spec", {}).get("taints", []) if t["key"] != UNINITIALIZED]
        self.kube.patch(path, {"spec": {"taints": taints or None}}, kind="merge")

    def start_kube_proxy(self) -> None:
        # kube-proxy turns route_localnet on (pods reach the API server's loopback endpoint through
        # the kubernetes Service); cluster-down puts the machine's value back.
        self._write(self.dir / "route_localnet.orig", ROUTE_LOCALNET.read_text())
        pair = self.ca.issue("kube-proxy", "system:kube-proxy")
        kubeconfig = self.dir / "kube-proxy" / "kube-proxy.kubeconfig"
        kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(kubeconfig, self.url, self.ca.pair.cert, pair.cert, pair.key, user="system:kube-proxy")
        cfg = kube_proxy_config(self.ports, kubeconfig, self.name)
        config = self._write(self.dir / "kube-proxy" / "config.yaml", json.dumps(cfg, indent=2))
        proc = self.spawn("kube-proxy", self._component("kube-proxy") + [f"--config={config}", "--v=1"], None)
        wait_answers(f"http://127.0.0.1:{self.ports['kube-proxy-healthz']}/healthz", proc.alive, proc.log, 60,
                     "kube-proxy")  # fmt: skip


def grant_kubelet_api(kube: Kube) -> None:
    """The API server's client identity towards kubelets may use their whole API (logs, exec, metrics),
    as kubeadm grants it: the kubelet authorizes every request through the API server."""
    kube.ensure(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "localkube:kube-apiserver-kubelet-api"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:kubelet-api-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}
            ],
        },
    )


def start_real_node(launcher: Launcher) -> None:
    """The cluster's one node, real: containerd with the images of dist/, the kubelet registered as
    the node and initialized, kube-proxy."""
    node = launcher.info.nodes[0]
    grant_kubelet_api(launcher.kube)
    real = RealNode(launcher.dir, node, launcher.ca, launcher.kube, launcher.info.apiserver_url,
                    lambda name, cmd, env: launcher._spawn(name, cmd, env=env))  # fmt: skip
    real.start_containerd()
    real.import_images()
    client, serving = launcher.certs[f"node-{node}"], launcher.certs[f"kubelet-{node}"]
    real.start_kubelet((client.cert, client.key), (serving.cert, serving.key))
    real.initialize()
    real.start_kube_proxy()
