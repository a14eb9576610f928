"""``python -m localkube.nodeagent``: run one node agent until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from localkube.nodeagent.agent import Agent, AgentConfig
from localkube.nodeagent.node import NodeSpec


def parse(argv: list[str]) -> AgentConfig:
    p = argparse.ArgumentParser(prog="python -m localkube.nodeagent", description=__doc__)
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--node-name", default="slipway-local")
    p.add_argument("--node-index", type=int, default=0, help="selects the node's pod IP block")
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--pods-dir", type=Path, required=True)
    p.add_argument("--ca-file", type=Path, required=True)
    p.add_argument("--cpu", default="16")
    p.add_argument("--memory", default="64Gi")
    p.add_argument("--pods", type=int, default=110)
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--gpu-memory-mib", type=int, default=81920)
    p.add_argument("--gpu-product", default="NVIDIA-A100-SXM4-80GB")
    p.add_argument("--restart-backoff", type=float, default=10.0, help="first CrashLoopBackOff delay (s)")
    p.add_argument("--kubelet-port", type=int, default=0, help="serve the kubelet API here (0: not at all)")
    p.add_argument("--kubelet-cert", type=Path, help="the kubelet API's serving certificate")
    p.add_argument("--kubelet-key", type=Path)
    a = p.parse_args(argv)
    node = NodeSpec(
        name=a.node_name,
        cpu=a.cpu,
        memory=a.memory,
        pods=a.pods,
        gpus=a.gpus,
        gpu_memory_mib=a.gpu_memory_mib,
        gpu_product=a.gpu_product,
    )
    return AgentConfig(
        kubeconfig=a.kubeconfig,
        node=node,
        node_index=a.node_index,
        state_dir=a.state_dir,
        pods_dir=a.pods_dir,
        ca_file=a.ca_file,
        restart_backoff=a.restart_backoff,
        kubelet_port=a.kubelet_port,
        kubelet_cert=a.kubelet_cert,
        kubelet_key=a.kubelet_key,
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s")
    agent = Agent(parse(sys.argv[1:] if argv is None else argv))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    failed: list[BaseException] = []

    def run() -> None:
        try:
            agent.run()
        except BaseException as e:  # reported below
            failed.append(e)
            logging.exception("node agent failed")
        finally:
            stop.set()

    threading.Thread(target=run, name="watch", daemon=True).start()
    stop.wait()
    logging.info("stopping: killing pod processes")
    agent.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
