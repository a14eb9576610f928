"""``kubectl slipway``: see a lifecycle as a tree, steer a rollout, wait for an object.

Installed with Slipway as the console script ``kubectl-slipway``: kubectl finds it on PATH, so
``kubectl slipway get idep/digits`` runs it. The text of every command is in
:data:`slipway.cli.args.EPILOG` and each command's help. This module runs the commands; the
arguments are :mod:`slipway.cli.args`, the API server :mod:`slipway.cli.client`, the kinds and
references :mod:`slipway.cli.refs`, the text :mod:`slipway.cli.render` and the decisions
:mod:`slipway.cli.view`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from slipway.cli import view
from slipway.cli.args import OK, REFUSED, STALLED, TIMED_OUT, USAGE, parser
from slipway.cli.client import (
    GROUP,
    REQUEST_TIMEOUT,
    VERSION,
    Cache,
    Failure,
    Session,
    api_failure,
    connect,
    list_kind,
    read,
)
from slipway.cli.refs import INFERENCE_DEPLOYMENT, KINDS, Kind, UsageError, parse_ref
from slipway.cli.render import render
from slipway.cli.tree import lifecycle

# -- commands --------------------------------------------------------------------------------------


def _ts() -> str:
    return time.strftime("%H:%M:%S")


def cmd_get(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = parse_ref(args.ref)
    where = f"{kind.kind} {session.namespace}/{name}"
    fix = f"check the name and -n/--namespace (kubectl get {kind.plural} -n {session.namespace} lists them)"

    def tree(objects: Callable[[Kind], list[dict[str, Any]]]) -> str:
        try:
            roots = lifecycle(kind, name, *(objects(k) for k in KINDS))
        except KeyError:
            raise Failure(f"{where} not found; {fix}") from None
        return render(roots)

    if not args.watch:
        out.write(tree(lambda k: list_kind(session, k, f"listing {k.plural}")[0]))
        return OK
    cache = Cache(session, KINDS)
    cache.start()
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    tty = out.isatty()
    last = ""
    try:
        while True:
            try:
                text = tree(cache.items)
            except Failure:
                text = f"{where} not found (deleted, or not created yet); still watching\n"
            if text != last:
                out.write("\x1b[H\x1b[2J" if tty else f"--- {_ts()}\n")
                out.write(text)
                out.flush()
                last = text
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return OK
            cache.next_change(remaining)
    except KeyboardInterrupt:
        return OK
    finally:
        cache.stop.set()


def cmd_wait(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = parse_ref(args.ref)
    target = view.wait_target(kind, args.target)
    where = f"{kind.kind} {session.namespace}/{name}"
    cache = Cache(session, [kind], name)
    cache.start()
    deadline = time.monotonic() + args.timeout
    seen = False
    progress: tuple[Any, ...] | None = None
    try:
        while True:
            obj = cache.get(kind, name)
            if obj is None:
                if seen:
                    raise Failure(f"{where} was deleted while waiting for {target}")
                raise Failure(
                    f"{where} not found; check the name and -n/--namespace "
                    f"(kubectl get {kind.plural} -n {session.namespace} lists them)"
                )
            seen = True
            state = view.wait_state(obj, target)
            if state.progress != progress:
                out.write(f"{_ts()} {kind.kind}/{name}: {state.line}\n")
                out.flush()
                progress = state.progress
            if state.done:
                out.write(f"{kind.kind}/{name} is {target}\n")
                return OK
            if state.stalled:
                raise Failure(f"{where} is Stalled while waiting for {target}: {state.stalled}", STALLED)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Failure(
                    f"timed out after {args.timeout:g}s waiting for {where} to be {target}; it is {state.line}",
                    TIMED_OUT,
                )
            cache.next_change(remaining)
    finally:
        cache.stop.set()


def _patch(session: Session, name: str, body: dict[str, Any], what: str) -> None:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        session.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            session.namespace,
            INFERENCE_DEPLOYMENT.plural,
            name,
            body,
            _request_timeout=REQUEST_TIMEOUT,
        )
    except (ApiException, HTTPError) as exc:
        if getattr(exc, "status", None) == 409:
            raise
        raise api_failure(exc, what, session, INFERENCE_DEPLOYMENT) from exc


def _with_conflict_retry(attempt: Callable[[], int]) -> int:
    """Patches carry the resourceVersion the decision was made on: if the object changed meanwhile,
    read it again and decide again."""
    from kubernetes.client.exceptions import ApiException

    for _ in range(5):
        try:
            return attempt()
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise Failure("the object kept changing under five attempts to patch it; try again")


def cmd_annotate(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = parse_ref(args.ref, default=INFERENCE_DEPLOYMENT)
    if kind is not INFERENCE_DEPLOYMENT:
        raise UsageError(f"{args.command} applies to an InferenceDeployment (idep), not a {kind.kind}")
    annotation = view.ACTIONS[args.command]
    where = f"InferenceDeployment {session.namespace}/{name}"

    def attempt() -> int:
        obj = read(session, kind, name, f"{args.command} {name}")
        if (obj["metadata"].get("annotations") or {}).get(annotation):
            out.write(f"{where}: {annotation} is already set; the operator removes it once it has acted\n")
            return OK
        refusal = view.action_refusal(args.command, obj)
        if refusal:
            raise Failure(refusal, REFUSED)
        body = {
            "metadata": {"annotations": {annotation: "true"}, "resourceVersion": obj["metadata"]["resourceVersion"]}
        }
        _patch(session, name, body, f"{args.command} {name}")
        out.write(
            f"{where}: {args.command} requested ({annotation}=true); the operator removes the annotation once "
            f"it has acted. Follow it: kubectl slipway get idep/{name} -w\n"
        )
        return OK

    return _with_conflict_retry(attempt)


def cmd_pause(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = parse_ref(args.ref, default=INFERENCE_DEPLOYMENT)
    if kind is not INFERENCE_DEPLOYMENT:
        raise UsageError(f"{args.command} applies to an InferenceDeployment (idep), not a {kind.kind}")
    paused = args.command == "pause"
    where = f"InferenceDeployment {session.namespace}/{name}"

    def attempt() -> int:
        obj = read(session, kind, name, f"{args.command} {name}")
        if bool(((obj.get("spec") or {}).get("rollout") or {}).get("paused")) == paused:
            out.write(f"{where}: spec.rollout.paused is already {str(paused).lower()}\n")
            return OK
        body = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": {"rollout": {"paused": paused}},
        }
        _patch(session, name, body, f"{args.command} {name}")
        effect = "held at its current step" if paused else "resumed"
        out.write(f"{where}: spec.rollout.paused={str(paused).lower()} ({effect})\n")
        return OK

    return _with_conflict_retry(attempt)


COMMANDS = {
    "get": cmd_get,
    "wait": cmd_wait,
    "promote": cmd_annotate,
    "abort": cmd_annotate,
    "retry": cmd_annotate,
    "pause": cmd_pause,
    "resume": cmd_pause,
}


def run(argv: Sequence[str], out: TextIO, err: TextIO, connect_: Callable[..., Session] = connect) -> int:
    """Parse, connect, run the command; every failure is one line on ``err`` and an exit code."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)

    def fail(message: str, code: int) -> int:
        err.write(f"error: {message}\n")
        return code

    try:
        if args.command in ("get", "wait"):
            kind, _ = parse_ref(args.ref)  # usage errors before any connection
            if args.command == "wait":
                view.wait_target(kind, args.target)
        session = connect_(args.kubeconfig, args.context, args.namespace)
        return COMMANDS[args.command](session, args, out)
    except UsageError as exc:
        return fail(str(exc), USAGE)
    except Failure as exc:
        return fail(str(exc), exc.code)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    try:
        code = run(sys.argv[1:] if argv is None else argv, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        code = 130
    # Watch threads may be blocked reading a long request: exit without waiting for them (an
    # interpreter shutting down around such threads can abort, losing the exit code).
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
