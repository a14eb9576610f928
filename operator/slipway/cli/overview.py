"""``kubectl slipway list``, ``history`` and ``version``: read, then print what
:mod:`slipway.cli.listing`, :mod:`slipway.cli.history` and :mod:`slipway.cli.versions` make of it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from slipway import __version__
from slipway.cli import history, listing, output, versions
from slipway.cli.args import OK
from slipway.cli.client import ApiError, Failure, Session, api_failure, events_of, list_anywhere, list_kind, read
from slipway.cli.refs import INFERENCE_DEPLOYMENT, KINDS, UsageError, parse_ref, resolve_kind


def cmd_list(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    chosen = [resolve_kind(word) for word in args.kinds] or list(KINDS)
    kinds = [kind for kind in KINDS if kind in chosen]
    found = [
        (kind, obj)
        for kind in kinds
        for obj in list_kind(session, kind, f"listing {kind.plural}", all_namespaces=args.all_namespaces)[0]
    ]
    if args.output:
        out.write(output.render(output.as_list(obj for _, obj in found), args.output))
        return OK
    if not found:
        where = "in any namespace" if args.all_namespaces else f"in namespace {session.namespace}"
        what = " or ".join(", ".join(f"{kind.kind}s" for kind in kinds).rsplit(", ", 1))
        out.write(f"No {what} found {where}.\n")
        return OK
    out.write(listing.table(listing.lines(found, datetime.now(UTC)), args.all_namespaces))
    return OK


def cmd_history(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = parse_ref(args.ref, default=INFERENCE_DEPLOYMENT)
    if kind is not INFERENCE_DEPLOYMENT:
        raise UsageError(f"history applies to an InferenceDeployment (idep), not a {kind.kind}")
    obj = read(session, kind, name, f"history of {name}")
    events = events_of(session, kind, name, f"history of {name}: reading its Events")
    uid = (obj.get("metadata") or {}).get("uid")
    mine = [e for e in events if not uid or (e.get("involvedObject") or {}).get("uid") in (uid, None)]
    out.write(history.render(obj, history.entries(obj, mine), len(mine)))
    return OK


def cmd_version(open_session: Callable[[], Session], args: argparse.Namespace, out: TextIO) -> int:
    """The plugin's version; then (unless --client) the operator's, or why it could not be read."""
    out.write(f"plugin: {__version__}\n")
    out.flush()
    if args.client:
        return OK
    try:
        session = open_session()
    except Failure as exc:
        raise Failure(f"operator: unknown; {exc}", exc.code) from exc
    try:
        found, namespace = list_anywhere(
            session, "apps/v1", "deployments", [versions.OPERATOR_NAMESPACE], versions.OPERATOR_SELECTOR
        )
    except ApiError as exc:
        raise Failure(f"operator: unknown; {api_failure(exc, 'reading the operator Deployment', session)}") from exc
    searched = "in any namespace"
    if namespace is not None:
        searched = f"in namespace {namespace} (you may not list Deployments in every namespace)"
    out.write("\n".join(versions.operator_lines(found, searched)) + "\n")
    return OK
