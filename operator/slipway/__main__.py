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
    p.add_argument("--standalone", action="store_true",
                   help="no leader election: this replica always reconciles (one replica only, tests)")  # fmt: skip
    ha = p.add_argument_group(
        "leader election",
        "Replicas share a coordination.k8s.io/v1 Lease named slipway-operator: its holder reconciles, the "
        "others stand by with warm caches and take over when it is not renewed for the lease duration.",
    )
    ha.add_argument("--leader-election-namespace",
                    default=os.environ.get("SLIPWAY_LEADER_ELECTION_NAMESPACE")
                    or os.environ.get("POD_NAMESPACE") or "slipway-system",
                    help="namespace of the Lease (default: $POD_NAMESPACE, else slipway-system)")  # fmt: skip
    ha.add_argument("--lease-duration", type=float, metavar="SECONDS",
                    default=float(os.environ.get("SLIPWAY_LEASE_DURATION_SECONDS") or 15),
                    help="a Lease not renewed for this long may be taken over (default 15)")  # fmt: skip
    ha.add_argument("--lease-renew-deadline", type=float, metavar="SECONDS",
                    default=float(os.environ.get("SLIPWAY_LEASE_RENEW_DEADLINE_SECONDS") or 10),
                    help="a leader whose last successful renewal was sent this long ago has lost the Lease "
                         "and exits, before anyone may take over (default 10)")  # fmt: skip
    ha.add_argument("--lease-renew-interval", type=float, metavar="SECONDS", help=argparse.SUPPRESS)
    ha.add_argument("--lease-retry-period", type=float, metavar="SECONDS",
                    default=float(os.environ.get("SLIPWAY_LEASE_RETRY_SECONDS") or 2),
                    help="how often the leader renews the Lease and a standby reads it (default 2)")  # fmt: skip
    p.add_argument("--stuck-pass-seconds", type=float, metavar="SECONDS",
                   default=float(os.environ.get("SLIPWAY_STUCK_PASS_SECONDS") or 300),
                   help="the liveness endpoint fails while a reconciliation pass runs for longer "
                        "(a stuck thread; default 300)")  # fmt: skip
    p.add_argument("--mlflow-url", default=os.environ.get("SLIPWAY_MLFLOW_URL"), help="MLflow tracking server")
    p.add_argument("--mlflow-public-url", default=os.environ.get("SLIPWAY_MLFLOW_PUBLIC_URL"),
                   help="MLflow address for links in status (default: --mlflow-url)")  # fmt: skip
    p.add_argument("--prices-file", default=os.environ.get("SLIPWAY_PRICES_FILE"), metavar="FILE",
                   help="the price table (YAML or JSON: currency, gpuHour, cpuHour, memoryGiBHour), read again "
                        "when it changes; none: costs say no price is configured")  # fmt: skip
    p.add_argument("--prometheus-url", default=os.environ.get("SLIPWAY_PROMETHEUS_URL"),
                   help="default Prometheus for canary analysis")  # fmt: skip
    p.add_argument("--require-model-allowlist", action="store_true",
                   default=os.environ.get("SLIPWAY_REQUIRE_MODEL_ALLOWLIST", "").lower() in ("1", "true", "yes"),
                   help="multi-tenant mode: a namespace may use only the MLflow models its slipway.dev/allowed-models "
                        "annotation lists (comma-separated globs, set by cluster admins); none without it")  # fmt: skip
    p.add_argument("--allowed-gateways", default=os.environ.get("SLIPWAY_ALLOWED_GATEWAYS", ""),
                   help="comma-separated namespace/name globs of Gateways in other namespaces that any "
                        "spec.traffic.parentRefs may name (a namespace's slipway.dev/allowed-gateways adds more; "
                        "a Gateway of the object's own namespace is always allowed)")  # fmt: skip
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
    parser = build_parser()
    args = parser.parse_args(argv)
    from slipway.leader import Timing

    if args.lease_renew_interval is not None:  # the flag of earlier versions: deadline = duration - interval
        args.lease_renew_deadline = args.lease_duration - args.lease_renew_interval
    try:
        Timing(args.lease_duration, args.lease_renew_deadline, args.lease_retry_period)
    except ValueError as exc:
        parser.error(str(exc))
    # Imported late so that --help is instant and needs no cluster.
    import kopf

    import slipway.operator  # noqa: F401 - registers the handlers
    from slipway.config import OperatorConfig, parse_list
    from slipway.redact import redact_log_records

    redact_log_records()  # before any record: kopf's own, its tracebacks, the HTTP clients'
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.FULL)
    try:
        config = OperatorConfig(
            mlflow_url=args.mlflow_url,
            mlflow_public_url=args.mlflow_public_url,
            prometheus_url=args.prometheus_url,
            allowed_prometheus_urls=args.allowed_prometheus_urls,
            require_model_allowlist=args.require_model_allowlist,
            allowed_gateways=parse_list(args.allowed_gateways),
            metrics_port=args.metrics_port,
            leader_election_namespace=args.leader_election_namespace,
            namespaces=tuple(args.namespace),
            lease_duration_seconds=args.lease_duration,
            lease_renew_deadline_seconds=args.lease_renew_deadline,
            lease_retry_seconds=args.lease_retry_period,
            stuck_pass_seconds=args.stuck_pass_seconds,
            prices_file=args.prices_file or None,
        )
    except ValueError as exc:  # a bad address: its message names the flag, never the credentials
        parser.error(str(exc))
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=args.standalone,  # read by the startup handler: no leader election
        liveness_endpoint=args.liveness or None,
        memo=kopf.Memo(config=config),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
