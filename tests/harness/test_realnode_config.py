"""The real node's configuration files (localkube.realnode), read back by the parsers their
programs use: containerd's TOML (one table per CRI section; a duplicated table stopped containerd
with "duplicated tables"), the CNI conflist and the kubelet's and kube-proxy's settings that this
machine needs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from localkube.nodeimages import PAUSE_IMAGE
from localkube.realnode import (
    BRIDGE,
    NETWORK,
    POD_SUBNET,
    check_runtime,
    cni_conflist,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    trust_registry,
)

PORTS = {"kubelet": 10250, "kubelet-healthz": 10248, "kube-proxy-healthz": 10256, "kube-proxy-metrics": 10249}


def test_containerd_config_is_one_toml_document_with_everything_under_its_root(tmp_path: Path) -> None:
    root = tmp_path / "realnode" / "containerd"
    doc = tomllib.loads(containerd_config(root))
    assert doc["version"] == 2
    assert doc["root"] == str(root / "root") and doc["state"] == str(root / "state")
    assert doc["grpc"]["address"] == str(root / "containerd.sock")
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == PAUSE_IMAGE  # local: no registry
    assert cri["restrict_oom_score_adj"] is True  # else runc: "can't get final child's PID from pipe: EOF"
    assert cri["containerd"]["default_runtime_name"] == "runc"  # else "container.Runtime.Name must be set"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["Root"] == str(root / "runc")  # runc's state not in /run/containerd/runc
    assert cri["cni"]["conf_dir"] == str(tmp_path / "realnode" / "cni" / "net.d")
    assert cri["registry"] == {"config_path": str(root / "certs.d")}  # hosts.toml per registry, read at each pull


def test_a_trusted_registry_is_pulled_from_over_plain_http(tmp_path: Path) -> None:
    path = trust_registry(tmp_path, "127.0.0.1:5000")
    assert path == tmp_path / "realnode" / "containerd" / "certs.d" / "127.0.0.1:5000" / "hosts.toml"
    hosts = tomllib.loads(path.read_text())
    assert hosts["server"] == "http://127.0.0.1:5000"  # not https, the default
    assert hosts["host"] == {"http://127.0.0.1:5000": {"capabilities": ["pull", "resolve"], "skip_verify": True}}


def test_cni_network_is_a_bridge_with_addresses_kept_in_the_cluster_folder(tmp_path: Path) -> None:
    conf = cni_conflist(tmp_path / "ipam")
    bridge = conf["plugins"][0]  # type: ignore[index]
    assert conf["name"] == NETWORK and bridge["type"] == "bridge" and bridge["bridge"] == BRIDGE
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "ipam")  # not /var/lib/cni
    assert bridge["ipam"]["ranges"] == [[{"subnet": POD_SUBNET}]]


def test_kubelet_serves_on_loopback_only_and_authorizes_through_the_api_server(tmp_path: Path) -> None:
    paths = [tmp_path / name for name in ("ca.crt", "tls.crt", "tls.key", "containerd.sock", "logs")]
    cfg = kubelet_config(PORTS, *paths)
    assert cfg["failCgroupV1"] is False and cfg["cgroupDriver"] == "cgroupfs" and cfg["cgroupsPerQOS"] is False
    assert cfg["address"] == "127.0.0.1" and cfg["healthzBindAddress"] == "127.0.0.1" and cfg["readOnlyPort"] == 0
    assert cfg["authentication"]["anonymous"] == {"enabled": False}  # type: ignore[index]
    assert cfg["authorization"] == {"mode": "Webhook"}
    assert cfg["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'containerd.sock'}"
    assert cfg["podLogsDir"] == str(tmp_path / "logs")  # not /var/log/pods
    # The imported images need no registry, whatever the kubelet pulled from one under another name.
    assert cfg["imagePullCredentialsVerificationPolicy"] == "NeverVerifyAllowlistedImages"
    assert cfg["preloadedImagesVerificationAllowlist"] == ["localhost/*"]


def test_kube_proxy_listens_on_loopback_for_the_pods_subnet(tmp_path: Path) -> None:
    cfg = kube_proxy_config(PORTS, tmp_path / "kubeconfig", "node-a")
    assert cfg["mode"] == "iptables" and cfg["clusterCIDR"] == POD_SUBNET and cfg["hostnameOverride"] == "node-a"
    assert str(cfg["healthzBindAddress"]).startswith("127.0.0.1:") and str(cfg["metricsBindAddress"]).startswith(
        "127.0.0.1:"
    )


@pytest.mark.parametrize(("runtime", "nodes", "message"), [("docker", 1, "unknown runtime 'docker'"),
                                                            ("containerd", 2, "runs one node, not 2")])  # fmt: skip
def test_runtime_choice_refused_before_anything_starts(runtime: str, nodes: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_runtime(runtime, nodes)
