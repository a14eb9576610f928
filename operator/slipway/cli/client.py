"""``kubectl slipway``'s access to the API server: the kubeconfig, reads and lists of the three
kinds, errors said as what to do, and a watched cache of one lifecycle."""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slipway.cli.args import ERROR
from slipway.cli.refs import Kind

GROUP, VERSION = "slipway.dev", "v1alpha1"
REQUEST_TIMEOUT = 30.0  # seconds, for each API request


class Failure(Exception):
    """An error for the user (exit code ``code``): what failed, on which object, and what to do."""

    def __init__(self, message: str, code: int = ERROR) -> None:
        super().__init__(message)
        self.code = code


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
            return Failure(
                f"{what}: {kind.kind} {ns}/{body['details']['name']} not found; check the name and "
                f"-n/--namespace (kubectl get {kind.plural} -n {ns} lists them)"
            )
        return Failure(
            f"{what}: the API server does not serve {kind.plural}.{GROUP}/{VERSION}: are the Slipway "
            "CRDs installed (kubectl apply -k manifests/)?"
        )
    if status in (401, 403):
        return Failure(
            f"{what}: the API server refused ({status}: {message}); your kubeconfig's user needs RBAC for "
            f"{kind.plural if kind else 'Slipway objects'} in namespace {ns}"
        )
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
                    self.session.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.session.namespace,
                    kind.plural,
                    resource_version=version,
                    timeout_seconds=60,
                    allow_watch_bookmarks=True,
                    _request_timeout=(REQUEST_TIMEOUT, 90),
                    **self.selectors(),
                )
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
