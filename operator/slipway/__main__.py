"""``python -m slipway``: run the Slipway operator."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = (
    "Run the Slipway operator: reconciles TrainingRun, ModelArtifact and InferenceDeployment "
    "(slipway.dev/v1alpha1). Flags default to SLIPWAY_* environment variables."
)


def build_parser() -> argparse.ArgumentParser:
    """The flags of slipway.settings (each defaulting to its variable), and the namespaces watched."""
    from slipway.settings import add_flags

    p = argparse.ArgumentParser(prog="slipway", description=DESCRIPTION)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    add_flags(p)
    return p


def peer_identity() -> str:
    """This process's identity among kopf's peers, as kopf makes it (user@host/start), without
    needing the password database: kopf's own asks ``getpass.getuser()``, which fails for a UID
    with no passwd entry (the image's 65532 when USER is unset, OpenShift's arbitrary UIDs) and
    stopped the operator at start with "getpwuid(): uid not found: 65532"."""
    import getpass
    import os
    import socket
    import time

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid-{os.getuid()}"
    return f"{user}@{socket.gethostname()}/{int(time.time())}/{os.getpid()}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from slipway import heap

    heap.limit_malloc_arenas()  # before any thread starts
    heap.start_trimming()
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
    from slipway.config import CONFIG_FIELDS, OperatorConfig
    from slipway.redact import redact_log_records
    from slipway.settings import SETTINGS

    redact_log_records()  # before any record: kopf's own, its tracebacks, the HTTP clients'
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.FULL)
    try:
        flags = {s.name: getattr(args, s.dest) for s in SETTINGS if s.flag and s.name in CONFIG_FIELDS}
        config = OperatorConfig(**{**flags, "prices_file": args.prices_file or None}, namespaces=tuple(args.namespace))
        config.check_tls()  # a TLS file that cannot be used stops the start, naming its flag (never what it holds)
    except ValueError as exc:  # a bad address: its message names the flag, never the credentials
        parser.error(str(exc))
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=args.standalone,  # read by the startup handler: no leader election
        liveness_endpoint=args.liveness or None,
        memo=kopf.Memo(config=config),
        identity=peer_identity(),  # type: ignore[arg-type]  # kopf's Identity: a NewType of str it does not export
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
