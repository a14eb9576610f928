"""A small dict-in, dict-out layer over the official ``kubernetes`` client.

The node agent and the provisioner handle pods, volumes and claims as plain
JSON dicts (what the API server sends): :class:`Kube` does requests and watches
through the client's ``ApiClient`` (its TLS, auth and connection pool) without
the generated models.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

JSON = dict[str, Any]


def condition(obj: JSON | None, type_: str) -> JSON:
    """A copy of the condition of type ``type_`` in ``obj``'s status.conditions, or ``{}`` (no such
    condition, no status, or no object)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def component_kubeconfig(directory: Path, apiserver_url: str, ca: Any, name: str, user: str) -> Path:
    """A client certificate for ``user`` issued by the cluster's ``ca`` (a ``pki.CertificateAuthority``)
    and the kubeconfig ``<directory>/kubeconfigs/<name>.kubeconfig`` that presents it: how each
    component of the local cluster (a gateway, KEDA, Kueue) reaches the API server as itself."""
    pair = ca.issue(name, user)
    path = directory / "kubeconfigs" / f"{name}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_kubeconfig(path, apiserver_url, ca.pair.cert, pair.cert, pair.key, user=name)
    return path


def write_kubeconfig(
    path: Path, server: str, ca: Path, cert: Path, key: Path, user: str = "admin", cluster: str = "localkube"
) -> None:
    """Write a kubeconfig with one cluster, one client-certificate user and a current context."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)


def api_client(kubeconfig: Path, pool_size: int = 16) -> client.ApiClient:
    """An ``ApiClient`` configured from ``kubeconfig`` (``pool_size`` connections for threads)."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg, persist_config=False)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


class Kube:
    """JSON requests and watches against the API server of a kubeconfig."""

    def __init__(self, kubeconfig: Path, timeout: float = 30) -> None:
        self.api = api_client(kubeconfig, pool_size=32)
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> JSON:
        """Send one request; return the decoded JSON body or raise ``ApiException``."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        self.api.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        resp = self.api.rest_client.request(
            method, url, headers=headers, body=body, _request_timeout=timeout or self.timeout
        )
        data = resp.read() if hasattr(resp, "read") else resp.data
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=resp.reason, body=data.decode(errors="replace"))
        return json.loads(data) if data else {}

    def get(self, path: str, **query: Any) -> JSON:
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> JSON | None:
        try:
            return self.get(path)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def ensure(self, path: str, body: JSON) -> JSON:
        """Create ``body`` under the collection ``path`` unless it exists already."""
        try:
            return self.create(path, body)
        except ApiException as e:
            if e.status != 409:
                raise
            return self.get(f"{path}/{body['metadata']['name']}")

    def patch(self, path: str, body: JSON, kind: str = "strategic") -> JSON:
        content_type = {
            "strategic": "application/strategic-merge-patch+json",
            "merge": "application/merge-patch+json",
        }[kind]
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: JSON | None = None) -> JSON | None:
        try:
            return self.request("DELETE", path, body)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def watch(
        self,
        path: str,
        on_list: Callable[[list[JSON]], None],
        on_event: Callable[[str, JSON], None],
        stopped: Callable[[], bool],
        **query: Any,
    ) -> None:
        """List ``path`` then watch it until ``stopped()``; relist after errors or 410 Gone.

        ``on_list`` gets every item of each (re)list, ``on_event`` each later
        event as ``(type, object)`` (ADDED, MODIFIED, DELETED).
        """
        while not stopped():
            try:
                listing = self.get(path, **query)
                on_list(listing.get("items", []))
                rv = listing["metadata"]["resourceVersion"]
                while not stopped():
                    rv = self._watch_once(path, rv, on_event, stopped, query)
            except _Gone:
                log.info("watch %s: resource version too old, relisting", path)
            except Exception as e:  # the API server may restart or be slow: keep watching
                if stopped():
                    return
                log.warning("watch %s failed (%s); relisting in 1s", path, e)
                time.sleep(1)  # back-off before relisting after a failure

    def _watch_once(
        self,
        path: str,
        rv: str,
        on_event: Callable[[str, JSON], None],
        stopped: Callable[[], bool],
        query: dict[str, Any],
    ) -> str:
        params = dict(query, watch="true", resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds=60)
        url = self.api.configuration.host + path + "?" + urlencode(params)
        headers = {"Accept": "application/json"}
        self.api.update_params_for_auth(headers, [], ["BearerToken"], path, "GET", None)
        resp = self.api.rest_client.request("GET", url, headers=headers, _request_timeout=(10, 90))
        raw = resp.response if hasattr(resp, "response") else resp
        try:
            if resp.status != 200:
                raise ApiException(status=resp.status, reason=resp.reason, body=raw.read().decode(errors="replace"))
            buf = b""
            for chunk in raw.stream(4096, decode_content=False):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise _Gone()
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    rv = obj["metadata"]["resourceVersion"]
                    if kind != "BOOKMARK":
                        on_event(kind, obj)
                    if stopped():
                        return rv
        finally:
            raw.release_conn()
        return rv


class _Gone(Exception):
    """The watch's resource version is too old (HTTP 410)."""
