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

import pytest

from localkube.cluster import ClusterConfig, down, up
from localkube.kube import Kube
from localkube.realnode import node_dir
from localkube.state import ClusterInfo
from slipway_testing import ROOT

KUBECTL = ROOT / ".cache" / "controlplane" / "kubectl"
REALNODE_DIR = Path(os.environ.get("LOCALKUBE_REALNODE_DIR", ROOT / ".cache" / "cluster-realnode"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "realnode: runs pods on the real node (kubelet, containerd); its own phase")


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
