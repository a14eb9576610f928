"""``python -m slipway``: run the Slipway operator."""

from __future__ import annotations

import argparse
import os
import sys

DESCRIPTION = (
    "Run the Slipway operator: reconciles TrainingRun, ModelArtifact and InferenceDeployment "
    "(slipway.dev/v1alpha1). Flags default to SLIPWAY_* environment variables."
)


def _url_list(text: str) -> tuple[str, ...]:
    from slipway.config import parse_url_list

    try:
        return parse_url_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slipway", description=DESCRIPTION)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    p.add_argument("--standalone", action="store_true", help="do not coordinate with other replicas (no peering)")
    p.add_argument("--priority", type=int, default=int(os.environ.get("SLIPWAY_PRIORITY", "0")),
                   help="peering priority: the highest-priority replica works, the others wait")  # fmt: skip
    p.add_argument("--mlflow-url", default=os.environ.get("SLIPWAY_MLFLOW_URL"), help="MLflow tracking server")
    p.add_argument("--mlflow-public-url", default=os.environ.get("SLIPWAY_MLFLOW_PUBLIC_URL"),
                   help="MLflow address for links in status (default: --mlflow-url)")  # fmt: skip
    p.add_argument("--prometheus-url", default=os.environ.get("SLIPWAY_PROMETHEUS_URL"),
                   help="default Prometheus for canary analysis")  # fmt: skip
    p.add_argument("--allowed-prometheus-urls", type=_url_list,
                   default=os.environ.get("SLIPWAY_ALLOWED_PROMETHEUS_URLS", ""),
                   help="comma-separated Prometheus addresses a spec may name in "
                        "spec.rollout.analysis.prometheus.address (default: only --prometheus-url, "
                        "which is always allowed)")  # fmt: skip
    p.add_argument("--metrics-port", type=int, default=int(os.environ.get("SLIPWAY_METRICS_PORT", "8080")),
                   help="port of the operator's own /metrics (0 disables)")  # fmt: skip
    p.add_argument("--liveness", default=os.environ.get("SLIPWAY_LIVENESS", "http://0.0.0.0:8081/healthz"),
                   help="kopf's liveness endpoint URL")  # fmt: skip
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Imported late so that --help is instant and needs no cluster.
    import kopf

    import slipway.operator  # noqa: F401 - registers the handlers
    from slipway.config import OperatorConfig

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.FULL)
    config = OperatorConfig(
        mlflow_url=args.mlflow_url,
        mlflow_public_url=args.mlflow_public_url,
        prometheus_url=args.prometheus_url,
        allowed_prometheus_urls=args.allowed_prometheus_urls,
        metrics_port=args.metrics_port,
    )
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=args.standalone,
        priority=args.priority,
        peering_name=None if args.standalone else "slipway",
        liveness_endpoint=args.liveness or None,
        memo=kopf.Memo(config=config),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
