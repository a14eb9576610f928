"""``python -m localkube up|down|status``: the local Kubernetes cluster for tests and demos."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from localkube.cluster import ClusterConfig, ClusterRunning, down, process_report, up
from localkube.state import DEFAULT_DIR, ClusterInfo


def _up(a: argparse.Namespace) -> int:
    cfg = ClusterConfig(
        directory=a.dir.resolve(),
        nodes=a.nodes,
        node_name=a.node_name,
        cpu=a.cpu,
        memory=a.memory,
        gpus=a.gpus,
        gpu_memory_mib=a.gpu_memory_mib,
        gpu_product=a.gpu_product,
        mlflow=a.mlflow,
        prometheus=a.prometheus,
        scrape_interval=a.scrape_interval,
        gateway_api=a.gateway_api,
        restart_backoff=a.restart_backoff,
        runtime=a.runtime,
    )
    started = time.monotonic()
    try:
        info = up(cfg)
    except (ClusterRunning, FileExistsError, FileNotFoundError, ValueError) as e:
        print(f"localkube: {e}", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError) as e:
        print(f"localkube: up failed, everything it started is stopped again: {e}", file=sys.stderr)
        return 1
    print(f"cluster ready in {time.monotonic() - started:.1f}s")
    _print_info(info)
    return 0


def _print_info(info: ClusterInfo) -> None:
    print(f"  API server   {info.apiserver_url}")
    print(f"  kubeconfig   {info.kubeconfig}   (export KUBECONFIG={info.kubeconfig})")
    print(f"  nodes        {', '.join(info.nodes)}")
    print(f"  MLflow       {info.mlflow_url or '-'}")
    print(f"  Prometheus   {info.prometheus_url or '-'}")
    if info.gateway_port:
        print(f"  gateway      http://127.0.0.1:{info.gateway_port}  (GatewayClass localkube; listeners on this port)")
    print(f"  logs         {info.directory / 'logs'}/  pods: {info.directory / 'pods'}/")


def _down(a: argparse.Namespace) -> int:
    info = down(a.dir.resolve())
    print("nothing recorded; nothing to stop" if info is None else f"stopped the cluster in {info.directory}")
    return 0


def _status(a: argparse.Namespace) -> int:
    info = ClusterInfo.load(a.dir.resolve())
    if info is None:
        print(f"no cluster recorded in {a.dir}")
        return 1
    healthy = info.healthy()
    print(f"cluster in {info.directory}: {'healthy' if healthy else 'NOT healthy'}")
    _print_info(info)
    print(process_report(info.directory))
    return 0 if healthy else 1


def _batch(a: argparse.Namespace) -> int:
    from localkube.batch import ensure_jobset, ensure_kueue

    directory = a.dir.resolve()
    ensure_jobset(directory)
    ensure_kueue(directory)
    print(f"Kueue and JobSet run in the cluster in {directory} (logs: {directory / 'logs'}/kueue.log, jobset.log)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localkube", description=__doc__)
    p.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="cluster directory (default: $LOCALKUBE_DIR or .cluster)"
    )
    sub = p.add_subparsers(dest="command", required=True)
    u = sub.add_parser("up", help="start the cluster in the background and wait until it is ready")
    u.add_argument("--nodes", type=int, default=1)
    u.add_argument("--node-name", default="slipway-local")
    u.add_argument("--cpu", default="16")
    u.add_argument("--memory", default="64Gi")
    u.add_argument("--gpus", type=int, default=4, help="nvidia.com/gpu capacity per node")
    u.add_argument("--gpu-memory-mib", type=int, default=81920)
    u.add_argument("--gpu-product", default="NVIDIA-A100-SXM4-80GB")
    u.add_argument("--no-mlflow", dest="mlflow", action="store_false")
    u.add_argument("--no-prometheus", dest="prometheus", action="store_false")
    u.add_argument("--scrape-interval", default="5s")
    u.add_argument(
        "--gateway-api",
        action="store_true",
        help="install the Gateway API standard CRDs and run the gateway (Traefik, `make traefik`)",
    )
    u.add_argument(
        "--runtime",
        choices=("process", "containerd"),
        default="process",
        help="process: pods as local processes (default); containerd: one real node (kubelet, containerd, runc, "
        "CNI bridge, kube-proxy; `make node`, images from dist/)",
    )
    u.add_argument("--restart-backoff", type=float, default=10.0, help="first CrashLoopBackOff delay (s)")
    u.set_defaults(func=_up)
    sub.add_parser("down", help="stop what `up` started").set_defaults(func=_down)
    sub.add_parser("status", help="show the cluster's processes and addresses").set_defaults(func=_status)
    sub.add_parser(
        "batch", help="start Kueue and JobSet in the running cluster (`make kueue jobset`), webhooks served"
    ).set_defaults(func=_batch)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="localkube: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return int(a.func(a))


if __name__ == "__main__":
    sys.exit(main())
