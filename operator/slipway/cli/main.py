"""``kubectl slipway``: see a lifecycle as a tree, list, steer a rollout, wait for an object.

Installed as ``kubectl-slipway`` (the console script of the Python package, or the single-file
plugin ``make release`` builds): kubectl finds it on PATH, so ``kubectl slipway get idep/digits``
runs it. The text of every command is in :data:`slipway.cli.args.EPILOG` and each command's help.
This module parses, connects and runs ``get`` and ``wait``; ``list``, ``history`` and ``version``
are :mod:`slipway.cli.overview`, the steering commands :mod:`slipway.cli.steer`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from slipway.cli import completion, output, overview, steer, view
from slipway.cli.args import OK, STALLED, TIMED_OUT, USAGE, parser
from slipway.cli.cache import Cache
from slipway.cli.client import Failure, Session, connect, list_kind
from slipway.cli.refs import INFERENCE_DEPLOYMENT, KINDS, Kind, UsageError, parse_ref, resolve_kind
from slipway.cli.render import render
from slipway.cli.tree import Node, lifecycle

# -- commands --------------------------------------------------------------------------------------


def _ts() -> str:
    return time.strftime("%H:%M:%S")


def _objects_of(roots: list[Node]) -> list[dict[str, Any]]:
    """The objects of the trees, each once, roots first (a missing one is left out)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}

    def walk(node: Node) -> None:
        if node.obj is not None:
            found.setdefault((node.kind.kind, node.name), dict(node.obj))
        for child in node.children:
            walk(child)

    for root in roots:
        walk(root)
    return list(found.values())


def cmd_get(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = parse_ref(args.ref)
    where = f"{kind.kind} {session.namespace}/{name}"
    fix = f"check the name and -n/--namespace (kubectl get {kind.plural} -n {session.namespace} lists them)"

    def roots(objects: Callable[[Kind], list[dict[str, Any]]]) -> list[Node]:
        try:
            return lifecycle(kind, name, *(objects(k) for k in KINDS))
        except KeyError:
            raise Failure(f"{where} not found; {fix}") from None

    def tree(objects: Callable[[Kind], list[dict[str, Any]]]) -> str:
        found = roots(objects)
        if args.output:
            return output.render(output.as_list(_objects_of(found)), args.output)
        return render(found)

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
        cache.close()


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
        cache.close()


COMMANDS: dict[str, Callable[[Session, argparse.Namespace, TextIO], int]] = {
    "get": cmd_get,
    "list": overview.cmd_list,
    "history": overview.cmd_history,
    "wait": cmd_wait,
    "promote": steer.cmd_annotate,
    "abort": steer.cmd_annotate,
    "retry": steer.cmd_annotate,
    "pause": steer.cmd_pause,
    "resume": steer.cmd_pause,
}
ON_A_DEPLOYMENT = ("history", "promote", "abort", "retry", "pause", "resume")


def check_usage(args: argparse.Namespace) -> None:
    """The command line's kinds, references and phases, before any connection (UsageError: exit 2)."""
    if args.command in ("get", "wait"):
        kind, _ = parse_ref(args.ref)
        if args.command == "wait":
            view.wait_target(kind, args.target)
    elif args.command in ON_A_DEPLOYMENT:
        kind, _ = parse_ref(args.ref, default=INFERENCE_DEPLOYMENT)
        if kind is not INFERENCE_DEPLOYMENT:
            raise UsageError(f"{args.command} applies to an InferenceDeployment (idep), not a {kind.kind}")
    elif args.command == "list":
        for word in args.kinds:
            resolve_kind(word)


def run(argv: Sequence[str], out: TextIO, err: TextIO, connect_: Callable[..., Session] = connect) -> int:
    """Parse, connect, run the command; every failure is one line on ``err`` and an exit code."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)

    def fail(message: str, code: int) -> int:
        err.write(f"error: {message}\n")
        return code

    def session() -> Session:
        return connect_(args.kubeconfig, args.context, args.namespace)

    try:
        check_usage(args)
        if args.command == "completion":
            out.write(completion.script(parser(), args.shell))
            return OK
        if args.command == "version":
            return overview.cmd_version(session, args, out)
        return COMMANDS[args.command](session(), args, out)
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
