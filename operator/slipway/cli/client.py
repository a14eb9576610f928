"""``kubectl slipway``'s access to the API server, through kubectl itself: the connection flags
passed on, reads, lists and patches of the three kinds and of Events and Deployments, and errors
said as what to do.

Every request is a ``kubectl`` command (found on PATH) with the user's --kubeconfig and --context:
whatever authenticates kubectl (client certificates, tokens, exec and OIDC plugins, the pod's
service account) authenticates the plugin, and the plugin needs no Kubernetes client library.
Reads are ``kubectl get --raw`` of the API path, so they need no discovery."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from slipway.cli.args import ERROR
from slipway.cli.refs import Kind

REQUEST_TIMEOUT = 30.0  # seconds, for each API request
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# kubectl prints an API error as "Error from server (Reason): message": the reason's HTTP status.
STATUS_OF_REASON = {
    "BadRequest": 400,
    "Unauthorized": 401,
    "Forbidden": 403,
    "NotFound": 404,
    "MethodNotAllowed": 405,
    "Conflict": 409,
    "AlreadyExists": 409,
    "Gone": 410,
    "Expired": 410,
    "Invalid": 422,
    "TooManyRequests": 429,
    "InternalError": 500,
    "ServiceUnavailable": 503,
    "Timeout": 504,
    "ServerTimeout": 504,
}


class Failure(Exception):
    """An error for the user (exit code ``code``): what failed, on which object, and what to do."""

    def __init__(self, message: str, code: int = ERROR) -> None:
        super().__init__(message)
        self.code = code


class ApiError(Exception):
    """A request kubectl could not carry out: the API server's status (None: no answer) and message."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def api_error(stderr: str) -> ApiError:
    """What kubectl's error output says: ``Error from server (NotFound): ...`` is a 404; an error
    without a server's answer (refused, timed out, a bad certificate) has no status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("Error from server", "error:"))] or lines
    text = errors[0] if errors else "kubectl failed and printed nothing"
    found = re.match(r"Error from server \((\w+)\): (.*)", text)
    if found:
        return ApiError(STATUS_OF_REASON.get(found.group(1)), found.group(2))
    if "(Unauthorized)" in text:
        return ApiError(401, text.removeprefix("error: "))
    return ApiError(None, text.removeprefix("error: "))


@dataclass(frozen=True)
class Kubectl:
    """kubectl with the user's connection flags."""

    command: tuple[str, ...]  # the binary, --kubeconfig and --context

    def run(self, *args: str, timeout: float = REQUEST_TIMEOUT) -> str:
        """kubectl's output; an ApiError when it fails."""
        try:
            done = subprocess.run(
                [*self.command, f"--request-timeout={int(timeout)}s", *args],
                capture_output=True,
                text=True,
                timeout=timeout + 10,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise ApiError(None, f"kubectl did not answer within {timeout + 10:g}s") from exc
        if done.returncode != 0:
            raise api_error(done.stderr)
        return done.stdout

    def get(self, path: str) -> dict[str, Any]:
        """GET an API path (``/apis/...``): the answer's JSON."""
        answer: dict[str, Any] = json.loads(self.run("get", "--raw", path))
        return answer

    def stream(self, path: str) -> subprocess.Popen[bytes]:
        """GET an API path whose answer streams (a watch), with no request timeout."""
        return subprocess.Popen(
            [*self.command, "--request-timeout=0", "get", "--raw", path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )


@dataclass
class Session:
    kubectl: Kubectl
    namespace: str


def _kubeconfig_files(kubeconfig: str | None) -> tuple[str, list[str]]:
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    return path, [p for p in path.split(os.pathsep) if p]


def connect(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    which: Callable[[str], str | None] = shutil.which,
) -> Session:
    """kubectl as the user runs it: --kubeconfig, else $KUBECONFIG (paths joined by ':'), else
    ~/.kube/config, else the pod's service account; the namespace from -n, else the context's."""
    binary = which("kubectl")
    if binary is None:
        raise Failure(
            "kubectl is not on PATH: kubectl slipway makes its API requests through kubectl; install it "
            "(https://kubernetes.io/docs/tasks/tools/) or add its directory to PATH"
        )
    flags = [binary]
    flags += ["--kubeconfig", kubeconfig] if kubeconfig else []
    flags += ["--context", context] if context else []
    kubectl = Kubectl(tuple(flags))
    path, files = _kubeconfig_files(kubeconfig)
    if not any(os.path.exists(p) for p in files):
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):  # in a pod: its service account
            if namespace:
                return Session(kubectl, namespace)
            with open(SERVICE_ACCOUNT_NAMESPACE) as f:
                return Session(kubectl, f.read().strip())
        raise Failure(f"no kubeconfig at {path}: set KUBECONFIG or --kubeconfig (and --context)")
    try:
        own = kubectl.run("config", "view", "--minify", "-o", "jsonpath={.contexts[0].context.namespace}")
    except ApiError as exc:
        raise Failure(
            f"cannot use the kubeconfig {path}: {exc.message}; set KUBECONFIG or --kubeconfig (and --context)"
        ) from exc
    return Session(kubectl, namespace or own.strip() or "default")


def api_failure(exc: ApiError, what: str, session: Session, kind: Kind | None = None) -> Failure:
    """An ApiError as a message naming the object and what to do."""
    ns = session.namespace
    if exc.status == 404 and kind is not None:
        named = re.search(r'"([^"]+)" not found', exc.message)
        if named:
            return Failure(
                f"{what}: {kind.kind} {ns}/{named.group(1)} not found; check the name and "
                f"-n/--namespace (kubectl get {kind.plural} -n {ns} lists them)"
            )
        return Failure(
            f"{what}: the API server does not serve {kind.plural}.{kind.api_version}: are the Slipway "
            "CRDs installed (kubectl apply -k manifests/)?"
        )
    if exc.status in (401, 403):
        return Failure(
            f"{what}: the API server refused ({exc.status}: {exc.message}); your kubeconfig's user needs RBAC "
            f"for {kind.plural if kind else 'Slipway objects'} in namespace {ns}"
        )
    if exc.status is None:
        return Failure(f"{what}: no answer from the API server ({exc.message}); check --kubeconfig and --context")
    return Failure(f"{what}: the API server answered {exc.status}: {exc.message}")


def collection_path(api_version: str, plural: str, namespace: str | None, **query: str) -> str:
    """The API path of a collection, in a namespace or (None) in all, with its query."""
    root = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    where = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    params = urlencode({k: v for k, v in query.items() if v})
    return f"{root}{where}/{plural}" + (f"?{params}" if params else "")


def read(session: Session, kind: Kind, name: str, what: str) -> dict[str, Any]:
    path = collection_path(kind.api_version, kind.plural, session.namespace) + f"/{quote(name, safe='')}"
    try:
        return session.kubectl.get(path)
    except ApiError as exc:
        raise api_failure(exc, what, session, kind) from exc


def list_kind(
    session: Session, kind: Kind, what: str, all_namespaces: bool = False, field_selector: str = ""
) -> tuple[list[dict[str, Any]], str]:
    """The kind's objects in the namespace (or in all), and the list's resourceVersion (to watch from).
    Each carries its apiVersion and kind."""
    namespace = None if all_namespaces else session.namespace
    path = collection_path(kind.api_version, kind.plural, namespace, fieldSelector=field_selector)
    try:
        answer = session.kubectl.get(path)
    except ApiError as exc:
        raise api_failure(exc, what, session, kind) from exc
    items = [{"apiVersion": kind.api_version, "kind": kind.kind, **item} for item in answer.get("items") or []]
    return items, str((answer.get("metadata") or {}).get("resourceVersion") or "")


def patch(session: Session, kind: Kind, name: str, body: Mapping[str, Any], what: str) -> None:
    """A merge patch of the object; a conflict (the resourceVersion in ``body`` is stale) is raised as
    the ApiError 409, for the caller to decide again."""
    try:
        session.kubectl.run(
            "patch",
            f"{kind.plural}.{kind.api_version.split('/')[0]}",
            name,
            "-n",
            session.namespace,
            "--type=merge",
            "-p",
            json.dumps(body),
        )
    except ApiError as exc:
        if exc.status == 409:
            raise
        raise api_failure(exc, what, session, kind) from exc


def events_of(session: Session, kind: Kind, name: str, what: str) -> list[dict[str, Any]]:
    """The Events of the object ``kind/name`` in the namespace (as ``kubectl describe`` shows them)."""
    selector = f"involvedObject.kind={kind.kind},involvedObject.name={name}"
    try:
        answer = session.kubectl.get(collection_path("v1", "events", session.namespace, fieldSelector=selector))
    except ApiError as exc:
        raise api_failure(exc, what, session) from exc
    return list(answer.get("items") or [])


def list_anywhere(
    session: Session, api_version: str, plural: str, namespaces: Sequence[str], label_selector: str
) -> tuple[list[dict[str, Any]], str | None]:
    """Objects of a kind by label, and where they were listed: in every namespace (None) if the user
    may list there, else in the first of ``namespaces`` they may. Raises the ApiError of the last
    refusal, or of a server that did not answer."""
    last: ApiError | None = None
    for namespace in (None, *namespaces):
        try:
            answer = session.kubectl.get(collection_path(api_version, plural, namespace, labelSelector=label_selector))
        except ApiError as exc:
            if exc.status not in (401, 403):
                raise
            last = exc
            continue
        return list(answer.get("items") or []), namespace
    assert last is not None
    raise last
