"""The real-node phase: a local cluster whose node is a kubelet on containerd, runc and a CNI bridge
(``localkube up --runtime containerd``), running the images ``make image`` built.

Run on its own (it is not part of ``make test``'s other phases)::

    make node image && .venv/bin/python -m pytest -p no:xdist -q -m realnode tests/realnode

The cluster in ``$LOCALKUBE_REALNODE_DIR`` (default ``.cache/cluster-realnode``) is used if it runs
with a real node (``LOCALKUBE_DIR=.cache/cluster-realnode make cluster-up RUNTIME=containerd``);
otherwise the session starts one there and stops it at the end. Nothing is skipped: a runtime that
cannot start fails the phase with the reason.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from localkube.cluster import ClusterConfig, down, up
from localkube.kube import Kube
from localkube.nodeimages import as_root, dist_archives, import_images
from localkube.realnode import containerd_socket, node_dir
from localkube.state import ClusterInfo
from localkube.wait import wait_for
from slipway_testing import ROOT

KUBECTL = ROOT / ".cache" / "controlplane" / "kubectl"
HELM = ROOT / ".cache" / "helm" / "helm"
CHART = ROOT / "charts" / "slipway"
CRDS_CHART = ROOT / "charts" / "slipway-crds"
REALNODE_DIR = Path(os.environ.get("LOCALKUBE_REALNODE_DIR", ROOT / ".cache" / "cluster-realnode"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "realnode: runs pods on the real node (kubelet, containerd); its own phase")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The release's install from a registry (test_release_install.py) first among the real node's
    tests: its pulls are timed on a node that has run neither image yet. A container of an earlier
    test keeps the image's layers unpacked for a while after its pod is gone, and a pull then
    fetches none of them."""
    here = Path(__file__).parent
    first = [i for i in items if i.path.name == "test_release_install.py" and i.path.parent == here]
    if first:
        rest = [i for i in items if i not in first]
        at = next(n for n, i in enumerate(rest + first) if i.path.parent == here)
        items[:] = rest[:at] + first + rest[at:]


@dataclass
class RealCluster:
    info: ClusterInfo
    kube: Kube
    up_seconds: float | None  # None: an already running cluster was used

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(KUBECTL), f"--kubeconfig={self.info.kubeconfig}", *args],
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
        return done

    def helm(self, *args: str, timeout: float = 240) -> str:
        if not HELM.exists():
            pytest.fail(f"{HELM} is missing: run `make helm`", pytrace=False)
        home = HELM.parent / "home"  # Helm's own cache and config, away from the user's
        env = {"HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
               "HELM_DATA_HOME": str(home / "data"), "KUBECONFIG": str(self.info.kubeconfig),
               "PATH": "/usr/bin:/bin"}  # fmt: skip
        done = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=timeout, env=env)
        if done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
        return done.stdout

    def host_service(self, ns: str, name: str, url: str) -> str:
        """A Service in ``ns`` for a process of the machine listening on ``url`` (127.0.0.1:port):
        its EndpointSlice names the loopback address, which kube-proxy reaches as it reaches the API
        server's. Returns the URL pods use (the Service's ClusterIP)."""
        port = urlsplit(url).port
        svc = self.kube.create(f"/api/v1/namespaces/{ns}/services", {"metadata": {"name": name},
                               "spec": {"ports": [{"name": "http", "port": port, "targetPort": port}]}})  # fmt: skip
        self.kube.create(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
            "metadata": {"name": f"{name}-host", "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.1"]}],
        })  # fmt: skip
        return f"http://{svc['spec']['clusterIP']}:{port}"

    def node_image(self, name: str) -> tuple[str, str]:
        """``localhost/<name>`` as containerd has it (imported from ``make image``'s archives): repository, tag."""
        node = self.kube.get(f"/api/v1/nodes/{self.info.nodes[0]}")
        names = [n for image in node["status"].get("images", []) for n in image["names"]]
        tags = [n for n in names if n.startswith(f"localhost/{name}:")]
        assert tags, f"no localhost/{name} image on the node (run `make image`): {names}"
        repository, tag = tags[0].rsplit(":", 1)
        return repository, tag

    def root_image(self, image: str) -> str:
        """``image`` (``localhost/<name>:<tag>``, imported from dist/) with its USER removed, as an image
        built to run as root is, imported into the node's containerd: its name."""
        repository, tag = image.rsplit(":", 1)
        name = f"{repository}-root:{tag}"
        archive = next(a for a in dist_archives() if repository.rsplit("/", 1)[1] in a.name)
        rooted = as_root(
            archive, name, ROOT / ".cache" / "node" / f"{archive.name.removesuffix('.oci.tar')}-root.oci.tar"
        )
        import_images(containerd_socket(self.info.directory), [rooted])
        return name

    def install_crds(self, chart: Path = CRDS_CHART) -> None:
        """The CRDs as docs/install.md installs them, before any operator: the release slipway-crds of
        ``chart`` in slipway-system (CRDs an earlier release left, kept on its uninstall, are taken over)."""
        install = ["upgrade", "--install", "slipway-crds", str(chart), "-n", "slipway-system", "--create-namespace"]
        self.helm(*install, "--take-ownership")

    def install_operator(
        self, release: str, ns: str, *values: str, chart: Path = CHART, crds: Path = CRDS_CHART
    ) -> None:
        """``helm install`` of ``chart`` (default charts/slipway, with the images of the node) into
        ``ns`` (made beforehand), the cluster's MLflow and Prometheus behind Services of ``ns``, after
        the CRD chart ``crds``."""
        self.install_crds(crds)
        mlflow = self.host_service(ns, "mlflow", self.info.mlflow_url or "")
        prometheus = self.host_service(ns, "prometheus", self.info.prometheus_url or "")
        images: list[str] = []
        if chart == CHART:
            operator, operator_tag = self.node_image("slipway-operator")
            images = [f"image.repository={operator}", f"image.tag={operator_tag}"]
        sets = [*images, "image.pullPolicy=IfNotPresent", f"mlflow.url={mlflow}", f"prometheus.url={prometheus}",
                *values]  # fmt: skip
        self.helm("install", release, str(chart), "-n", ns, *[a for s in sets for a in ("--set", s)])
        self.operator_pods(ns)

    def ready_pods(self, ns: str) -> tuple[list[dict], str | None]:
        """The namespace's Ready pods, and why a container crash-loops if one does (not waited out)."""
        pods = self.kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        for pod in pods:
            for status in pod.get("status", {}).get("containerStatuses") or []:
                last = status.get("lastState", {}).get("terminated")
                if status.get("restartCount", 0) >= 2 and last:
                    name = pod["metadata"]["name"]
                    logs = self.kubectl("-n", ns, "logs", name, "--previous", check=False).stdout
                    return [], f"{name} restarts ({last.get('reason')}, exit {last.get('exitCode')}):\n{logs[-1500:]}"
        return [p for p in pods if all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])], None

    def operator_pods(self, ns: str, replicas: int = 2) -> list[dict]:
        """Wait until the chart's ``replicas`` operator pods in ``ns`` are Running and Ready; a
        crash-looping one fails at once with its log."""
        crashed: list[str] = []

        def all_ready() -> list[dict] | bool | None:
            pods, crash = self.ready_pods(ns)
            if crash:
                crashed.append(crash)
                return True
            return pods if len(pods) == replicas else None

        pods = wait_for(all_ready, 180, f"the {replicas} operator replicas of {ns} Running and Ready")
        assert not crashed, crashed[0]
        assert isinstance(pods, list)
        return pods

    def assert_restricted_replicas(self, ns: str, pods: list[dict]) -> str:
        """Each operator pod of ``ns`` Running in a container as UID 65532, its root filesystem read-only,
        and one of them holding the Lease slipway-operator: its name."""
        names = sorted(p["metadata"]["name"] for p in pods)
        for pod in pods:
            assert pod["status"]["phase"] == "Running"
            assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
            name = pod["metadata"]["name"]
            assert self.kubectl("-n", ns, "exec", name, "--", "id", "-u").stdout.strip() == "65532"
            write = self.kubectl("-n", ns, "exec", name, "--", "python", "-c", "open('/w', 'w')", check=False)
            assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr
        holder = wait_for(lambda: (self.kube.get_or_none(
            f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/slipway-operator") or {}).get("spec", {})
            .get("holderIdentity"), 60, "a replica holding the Lease slipway-operator")  # fmt: skip
        assert holder in names, (holder, names)
        return str(holder)


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    running = ClusterInfo.load(REALNODE_DIR)
    if running is not None and node_dir(REALNODE_DIR).exists() and running.unhealthy_reason() is None:
        yield RealCluster(running, Kube(running.kubeconfig), None)
        return
    start = time.monotonic()
    try:
        info = up(ClusterConfig(directory=REALNODE_DIR, runtime="containerd"))
    except Exception as e:  # noqa: BLE001 - any reason the runtime cannot start fails the phase, named
        pytest.fail(f"the real node could not start in {REALNODE_DIR}: {type(e).__name__}: {e}", pytrace=False)
    try:
        yield RealCluster(info, Kube(info.kubeconfig), time.monotonic() - start)
    finally:
        down(REALNODE_DIR)
