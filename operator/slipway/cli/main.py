"""``kubectl slipway``: see a lifecycle as a tree, steer a rollout, wait for an object.

Installed with Slipway as the console script ``kubectl-slipway``: kubectl finds it on PATH, so
``kubectl slipway get idep/digits`` runs it. The text of every command is in :data:`EPILOG` and
each command's help.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

from slipway.cli import view
from slipway.cli.view import INFERENCE_DEPLOYMENT, KINDS, Kind, UsageError
from slipway.models.base import parse_duration

GROUP, VERSION = "slipway.dev", "v1alpha1"
REQUEST_TIMEOUT = 30.0  # seconds, for each API request

OK, ERROR, USAGE, REFUSED, STALLED, TIMED_OUT = 0, 1, 2, 3, 4, 5

EPILOG = """\
exit codes:
  0  done: shown, annotated, patched, or the wait's condition was reached
  1  the object was not found or deleted, the Slipway CRDs are not installed,
     the kubeconfig cannot be read, or the API server refused or did not answer
  2  usage: an unknown command, kind, phase or duration
  3  refused: promote, abort or retry cannot apply in the object's current phase
     (the message says why and what would)
  4  wait: the object is Stalled (Stalled=True at its current generation); the
     Stalled message is printed: a person must act
  5  wait: --timeout passed before the condition was reached

Kinds: trainingrun (tr), modelartifact (ma), inferencedeployment (idep), by
plural, singular or short name. Like kubectl: KUBECONFIG or --kubeconfig,
--context, -n/--namespace (default: the context's namespace).
"""


class Failure(Exception):
    """An error for the user (exit code ``code``): what failed, on which object, and what to do."""

    def __init__(self, message: str, code: int = ERROR) -> None:
        super().__init__(message)
        self.code = code


# -- arguments -------------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """kubectl's connection flags; accepted before and after the command."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--kubeconfig", default=default(None), help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", default=default(None), help="kubeconfig context (default: the current one)")
    parser.add_argument("-n", "--namespace", default=default(None), help="namespace (default: the context's)")


def duration(text: str) -> float:
    """``5m``, ``30s``, ``1h30m``, or plain seconds."""
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl slipway",
        description="See a Slipway lifecycle (TrainingRun -> ModelArtifact -> InferenceDeployment) as a tree, "
        "steer an InferenceDeployment's rollout, and wait for any of the three kinds.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(top, suppress=False)
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_, description=description, epilog=EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        _common(sub, suppress=True)
        return sub

    get = command(
        "get",
        "show the lifecycle tree an object belongs to",
        "The tree of one lifecycle: the TrainingRun, the ModelArtifact it made (status.artifactRef) with its "
        "versions and gates, and the InferenceDeployments that serve them (spec.model.artifactRef, or "
        "spec.model.name and alias serving one of its versions) with phase, Ready, the stable and canary "
        "tracks (model version, revision, ready/replicas, weight, requested weight, step of N), the last "
        "analysis and lastRollback. Starting from any of the three kinds shows the tree it belongs to.",
    )
    get.add_argument("ref", nargs="+", metavar="KIND/NAME", help="e.g. idep/digits, tr/digits, ma digits")
    get.add_argument("-w", "--watch", action="store_true", help="redraw on every change until interrupted")
    get.add_argument(
        "--timeout", type=duration, default=None, help="with --watch: stop after this long (e.g. 5m); exit 0"
    )

    for action, what in (
        ("promote", "skip the remaining canary steps and promote now (annotation slipway.dev/promote=true). "
                    "Applies while a canary is in flight: Progressing, Analyzing or Paused."),
        ("abort", "roll the canary back now, or revert a promotion or a bake in progress (annotation "
                  "slipway.dev/abort=true). Applies while a canary is in flight, Promoting or Baking."),
        ("retry", "roll out again the revision that was rolled back (annotation slipway.dev/retry=true). "
                  "Applies when the phase is RolledBack and that rollback was not retried yet."),
    ):  # fmt: skip
        description = (
            f"InferenceDeployment: {what} The operator removes the annotation once it has acted. "
            "Refused (exit 3) when it cannot apply in the current phase."
        )
        sub = command(action, what.split(" (")[0], description)
        sub.add_argument("ref", nargs="+", metavar="NAME", help="an InferenceDeployment: NAME or idep/NAME")

    gitops = (
        "This writes the spec: a GitOps tool (Argo CD, Flux) that owns the object will revert it on its next "
        "sync; set spec.rollout.paused in Git there instead."
    )
    for action, what in (
        ("pause", "hold the rollout at its current step: spec.rollout.paused=true (the phase becomes Paused; "
                  "a paused rollout never times out)."),
        ("resume", "continue a paused rollout: spec.rollout.paused=false."),
    ):  # fmt: skip
        sub = command(action, what.split(":")[0], f"InferenceDeployment: {what} {gitops}")
        sub.add_argument("ref", nargs="+", metavar="NAME", help="an InferenceDeployment: NAME or idep/NAME")

    wait = command(
        "wait",
        "wait until an object is Ready or in a phase",
        "Wait until the object is Ready (the Ready condition True at its current generation) or in the phase "
        "given. Prints a line each time the phase, Ready or the step changes. Exits 0 when reached; at once "
        "with 4 and the Stalled message when the object goes Stalled=True at its current generation (a "
        "rolled-back canary, an invalid spec, a permanent training failure, ...); 5 on timeout. A phase "
        "already reached counts: to wait for a rollout you started, wait once it is in flight.",
    )
    wait.add_argument("ref", nargs="+", metavar="KIND/NAME", help="e.g. idep/digits")
    wait.add_argument("--for", dest="target", default="Ready", metavar="Ready|PHASE",
                      help="Ready (default), or a phase of the kind, e.g. Promoted, Validated, Succeeded")  # fmt: skip
    wait.add_argument("--timeout", type=duration, default=300.0, help="give up after this long (default 5m)")
    return top


# -- the Kubernetes client -------------------------------------------------------------------------


@dataclass
class Session:
    api: Any  # kubernetes.client.ApiClient
    namespace: str

    @property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Session:
    """A client as kubectl would make it: --kubeconfig, else $KUBECONFIG (paths joined by ':'), else
    ~/.kube/config, else the pod's service account; the namespace from -n, else the context's."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    files = [p for p in path.split(os.pathsep) if p]
    if kubeconfig is None and not any(os.path.exists(p) for p in files) and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        sa_ns = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
        with open(sa_ns) as f:
            return Session(client.ApiClient(), namespace or f.read().strip())
    try:
        api = config.new_client_from_config(config_file=path, context=context)
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except (ConfigException, OSError) as exc:
        raise Failure(
            f"cannot load the kubeconfig {path}: {exc}; set KUBECONFIG or --kubeconfig (and --context)"
        ) from exc
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return Session(api, namespace or (chosen or {}).get("context", {}).get("namespace") or "default")


def api_failure(exc: Any, what: str, session: Session, kind: Kind | None = None) -> Failure:
    """An ApiException as a message naming the object and what to do."""
    status = getattr(exc, "status", None)
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") or getattr(exc, "reason", None) or str(exc)
    ns = session.namespace
    if status == 404 and kind is not None:
        if (body.get("details") or {}).get("name"):
            return Failure(f"{what}: {kind.kind} {ns}/{body['details']['name']} not found; check the name and "
                           f"-n/--namespace (kubectl get {kind.plural} -n {ns} lists them)")  # fmt: skip
        return Failure(f"{what}: the API server does not serve {kind.plural}.{GROUP}/{VERSION}: are the Slipway "
                       "CRDs installed (kubectl apply -k manifests/)?")  # fmt: skip
    if status in (401, 403):
        return Failure(f"{what}: the API server refused ({status}: {message}); your kubeconfig's user needs RBAC for "
                       f"{kind.plural if kind else 'Slipway objects'} in namespace {ns}")  # fmt: skip
    if status is None:
        return Failure(f"{what}: no answer from the API server ({exc}); check --kubeconfig and --context")
    return Failure(f"{what}: the API server answered {status}: {message}")


def read(session: Session, kind: Kind, name: str, what: str) -> dict[str, Any]:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        obj: dict[str, Any] = session.custom.get_namespaced_custom_object(
            GROUP, VERSION, session.namespace, kind.plural, name, _request_timeout=REQUEST_TIMEOUT
        )
    except (ApiException, HTTPError) as exc:
        raise api_failure(exc, what, session, kind) from exc
    return obj


def list_kind(session: Session, kind: Kind, what: str, **selectors: str) -> tuple[list[dict[str, Any]], str]:
    """The kind's objects in the namespace, and the list's resourceVersion (to watch from)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        answer = session.custom.list_namespaced_custom_object(
            GROUP, VERSION, session.namespace, kind.plural, _request_timeout=REQUEST_TIMEOUT, **selectors
        )
    except (ApiException, HTTPError) as exc:
        raise api_failure(exc, what, session, kind) from exc
    return list(answer.get("items") or []), str(answer["metadata"].get("resourceVersion") or "")


class Cache:
    """The objects of some kinds in the namespace, kept current by watches (one thread each); ``changed``
    gets the kind's name at every change, or the Failure a watch met."""

    def __init__(self, session: Session, kinds: Sequence[Kind], name: str | None = None) -> None:
        self.session, self.kinds, self.name = session, kinds, name
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.changed: queue.Queue[str | Failure] = queue.Queue()
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def selectors(self) -> dict[str, str]:
        return {"field_selector": f"metadata.name={self.name}"} if self.name else {}

    def relist(self, kind: Kind) -> str:
        items, version = list_kind(self.session, kind, f"listing {kind.plural}", **self.selectors())
        with self.lock:
            self.objects[kind.kind] = {o["metadata"]["name"]: o for o in items}
        return version

    def start(self) -> None:
        versions = {kind.kind: self.relist(kind) for kind in self.kinds}
        for kind in self.kinds:
            threading.Thread(target=self.watch, args=(kind, versions[kind.kind]), daemon=True).start()

    def items(self, kind: Kind) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.objects.get(kind.kind, {}).values())

    def get(self, kind: Kind, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.objects.get(kind.kind, {}).get(name)

    def watch(self, kind: Kind, version: str) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        failures = 0
        while not self.stop.is_set():
            try:
                stream = watch.Watch().stream(
                    self.session.custom.list_namespaced_custom_object, GROUP, VERSION, self.session.namespace,
                    kind.plural, resource_version=version, timeout_seconds=60, allow_watch_bookmarks=True,
                    _request_timeout=(REQUEST_TIMEOUT, 90), **self.selectors(),
                )  # fmt: skip
                for event in stream:
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue
                    with self.lock:
                        store = self.objects.setdefault(kind.kind, {})
                        if event["type"] == "DELETED":
                            store.pop(obj["metadata"]["name"], None)
                        else:
                            store[obj["metadata"]["name"]] = obj
                    self.changed.put(kind.kind)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a watch thread reports every failure, never raises
                if self.stop.is_set():
                    return
                failures += 1
                if failures > 5:
                    self.changed.put(api_failure(exc, f"watching {kind.plural}", self.session, kind))
                    return
                try:
                    if getattr(exc, "status", None) == 410 or failures > 1:  # expired: list again
                        version = self.relist(kind)
                        self.changed.put(kind.kind)
                except Failure:
                    pass
                self.stop.wait(min(2.0**failures, 10))

    def next_change(self, timeout: float | None) -> bool:
        """Block until something changed (True) or ``timeout`` passed (False); raise a watch's Failure."""
        try:
            item = self.changed.get(timeout=timeout)
        except queue.Empty:
            return False
        if isinstance(item, Failure):
            raise item
        while not self.changed.empty():  # one redraw for a burst of events
            more = self.changed.get_nowait()
            if isinstance(more, Failure):
                raise more
        return True


# -- commands --------------------------------------------------------------------------------------


def _ts() -> str:
    return time.strftime("%H:%M:%S")


def cmd_get(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = view.parse_ref(args.ref)
    where = f"{kind.kind} {session.namespace}/{name}"
    fix = f"check the name and -n/--namespace (kubectl get {kind.plural} -n {session.namespace} lists them)"

    def tree(objects: Callable[[Kind], list[dict[str, Any]]]) -> str:
        try:
            roots = view.lifecycle(kind, name, *(objects(k) for k in KINDS))
        except KeyError:
            raise Failure(f"{where} not found; {fix}") from None
        return view.render(roots)

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
    kind, name = view.parse_ref(args.ref)
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
                raise Failure(f"{where} not found; check the name and -n/--namespace "
                              f"(kubectl get {kind.plural} -n {session.namespace} lists them)")  # fmt: skip
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
                raise Failure(f"timed out after {args.timeout:g}s waiting for {where} to be {target}; "
                              f"it is {state.line}", TIMED_OUT)  # fmt: skip
            cache.next_change(remaining)
    finally:
        cache.stop.set()


def _patch(session: Session, name: str, body: dict[str, Any], what: str) -> None:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        session.custom.patch_namespaced_custom_object(
            GROUP, VERSION, session.namespace, INFERENCE_DEPLOYMENT.plural, name, body,
            _request_timeout=REQUEST_TIMEOUT,
        )  # fmt: skip
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
    kind, name = view.parse_ref(args.ref, default=INFERENCE_DEPLOYMENT)
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
        out.write(f"{where}: {args.command} requested ({annotation}=true); the operator removes the annotation once "
                  f"it has acted. Follow it: kubectl slipway get idep/{name} -w\n")  # fmt: skip
        return OK

    return _with_conflict_retry(attempt)


def cmd_pause(session: Session, args: argparse.Namespace, out: TextIO) -> int:
    kind, name = view.parse_ref(args.ref, default=INFERENCE_DEPLOYMENT)
    if kind is not INFERENCE_DEPLOYMENT:
        raise UsageError(f"{args.command} applies to an InferenceDeployment (idep), not a {kind.kind}")
    paused = args.command == "pause"
    where = f"InferenceDeployment {session.namespace}/{name}"

    def attempt() -> int:
        obj = read(session, kind, name, f"{args.command} {name}")
        if bool(((obj.get("spec") or {}).get("rollout") or {}).get("paused")) == paused:
            out.write(f"{where}: spec.rollout.paused is already {str(paused).lower()}\n")
            return OK
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "spec": {"rollout": {"paused": paused}}}  # fmt: skip
        _patch(session, name, body, f"{args.command} {name}")
        effect = "held at its current step" if paused else "resumed"
        out.write(f"{where}: spec.rollout.paused={str(paused).lower()} ({effect})\n")
        return OK

    return _with_conflict_retry(attempt)


COMMANDS = {"get": cmd_get, "wait": cmd_wait, "promote": cmd_annotate, "abort": cmd_annotate, "retry": cmd_annotate,
            "pause": cmd_pause, "resume": cmd_pause}  # fmt: skip


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
            kind, _ = view.parse_ref(args.ref)  # usage errors before any connection
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
