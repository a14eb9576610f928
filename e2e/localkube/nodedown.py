"""Stopping the real node (see :mod:`localkube.realnode`) without leaving anything on the machine:
its pods torn down through CRI while containerd still runs (their networks, namespaces and
containers), then, once every process is stopped, what a crash may have left: runc containers,
containerd shims, mounts under the cluster folder, the bridge, and the iptables chains of the CNI
network, the kubelet and kube-proxy."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
from pathlib import Path

from localkube.procs import Proc
from localkube.realnode import BRIDGE, NETWORK, NODE_BINARY, ROUTE_LOCALNET, containerd_socket, node_dir

log = logging.getLogger(__name__)


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def remove_pods(cluster_dir: Path, processes: list[Proc], binary: Path = NODE_BINARY) -> None:
    """Stop the kubelet (so it starts nothing again), then remove every pod through containerd."""
    for proc in processes:
        if proc.name == "kubelet":
            proc.stop(timeout=20)
    containerd = next((p for p in processes if p.name == "containerd"), None)
    if containerd is None or not containerd.alive():
        return
    done = _run([str(binary), "remove-all-pods", f"unix://{containerd_socket(cluster_dir)}"], timeout=150)
    if done.returncode != 0:
        log.warning("removing the real node's pods: %s", done.stderr.strip())


def _runc_containers(cluster_dir: Path) -> None:
    root = node_dir(cluster_dir) / "containerd" / "runc" / "k8s.io"
    if not root.is_dir():
        return
    for state in root.iterdir():
        done = _run(["runc", f"--root={root}", "delete", "--force", state.name])
        if done.returncode != 0:
            log.warning("runc delete %s: %s", state.name, done.stderr.strip())


def _shims(cluster_dir: Path) -> None:
    """SIGKILL the containerd shims started for this node's containerd (matched by its socket)."""
    address = str(containerd_socket(cluster_dir))
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"-address" in args
            and address.encode() in args
            and Path(args[0].decode()).name.startswith("containerd-shim")
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(cmdline.parent.name), signal.SIGKILL)


def _unmount(cluster_dir: Path) -> None:
    """Unmount everything mounted under the cluster folder (rootfs overlays, shm, volumes), deepest first."""
    prefix = str(cluster_dir) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        if _run(["umount", point]).returncode != 0:
            _run(["umount", "-l", point])


def _cni_chains() -> None:
    """Delete the NAT rules and chains the bridge plugin made for this node's network (a crashed
    teardown leaves them; the CNI DEL of a removed pod deletes its own)."""
    rules = _run(["iptables", "-t", "nat", "-S", "POSTROUTING"]).stdout.splitlines()
    for rule in rules:
        if f'name: \\"{NETWORK}\\"' not in rule and f'name: "{NETWORK}"' not in rule:
            continue
        args = shlex.split(rule)
        _run(["iptables", "-t", "nat", "-D", *args[1:]])
        if "-j" in args:
            chain = args[args.index("-j") + 1]
            if chain.startswith("CNI-"):
                _run(["iptables", "-t", "nat", "-F", chain])
                _run(["iptables", "-t", "nat", "-X", chain])


def _kube_chains(binary: Path) -> None:
    """kube-proxy's own cleanup of its rules, then the kubelet's canary and hint chains."""
    done = _run([str(binary.parent / "kube-proxy"), "--cleanup"], timeout=60) if binary.exists() else None
    if done is not None and done.returncode != 0:
        log.warning("kube-proxy --cleanup: %s", done.stderr.strip()[-400:])
    for tool in ("iptables", "ip6tables"):
        # kube-proxy's guard for route_localnet ("block incoming localnet connections"), which
        # --cleanup keeps.
        for hook in ("INPUT", "OUTPUT"):
            _run([tool, "-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL"])
        if _run([tool, "-t", "filter", "-F", "KUBE-FIREWALL"]).returncode == 0:
            _run([tool, "-t", "filter", "-X", "KUBE-FIREWALL"])
        for table in ("mangle", "nat", "filter"):
            for chain in ("KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"):
                if _run([tool, "-t", table, "-F", chain]).returncode == 0:
                    _run([tool, "-t", table, "-X", chain])


def cleanup(cluster_dir: Path, binary: Path = NODE_BINARY) -> None:
    """After every process of the cluster stopped: what is left of the real node goes."""
    if not node_dir(cluster_dir).exists():
        return
    _runc_containers(cluster_dir)
    _shims(cluster_dir)
    _unmount(cluster_dir)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "delete", BRIDGE])
    _cni_chains()
    _kube_chains(binary)
    original = node_dir(cluster_dir) / "route_localnet.orig"
    if original.exists():
        ROUTE_LOCALNET.write_text(original.read_text())
        original.unlink()


def leftovers(cluster_dir: Path) -> list[str]:
    """What of the real node is still on the machine (empty once :func:`cleanup` did its work)."""
    found = []
    prefix = str(cluster_dir) + "/"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    found += [f"mount {m}" for m in mounts if m.startswith(prefix)]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
    for table in ("nat", "filter", "mangle"):
        rules = _run(["iptables", "-t", table, "-S"]).stdout.splitlines()
        found += [f"iptables {table}: {line}" for line in rules if NETWORK in line or "KUBE-" in line]
    address = str(containerd_socket(cluster_dir)).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if address in cmdline.read_bytes().split(b"\0"):
                found.append(f"process {cmdline.parent.name}")
    return found
