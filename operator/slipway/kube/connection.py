"""The connection to the API server and the error vocabulary every call goes through.

Every call has a timeout. API errors become kopf's error vocabulary: what a retry can fix is a
TemporaryError with a delay (:class:`Conflict`, :class:`Unavailable`, :class:`Forbidden`), what
it cannot is a PermanentError; a 404 is left to the caller.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")

RETRYABLE_STATUSES = {409, 429, 500, 502, 503, 504}
# (connect, read) seconds: a half-open connection must not hold a pass for ever.
REQUEST_TIMEOUT = (5.0, 30.0)


@dataclass
class Kube:
    """API clients of the groups the operator uses, sharing one connection pool."""

    api: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
    batch: client.BatchV1Api
    autoscaling: client.AutoscalingV2Api
    custom: client.CustomObjectsApi

    @classmethod
    def connect(cls, kubeconfig: str | None = None, connections: int | None = None) -> Kube:
        """In-cluster config inside a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config).
        ``connections``: connections kept open to the API server, one per pass that may call it at
        once (the client's default is 5 per core: passes beyond it would each open a new TLS
        connection and drop it)."""
        settings = client.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=settings)
        else:
            # KUBECONFIG read now: the client's own default is fixed when it is first imported.
            config.load_kube_config(
                config_file=kubeconfig or os.environ.get("KUBECONFIG"), client_configuration=settings
            )
        if connections:
            settings.connection_pool_maxsize = max(settings.connection_pool_maxsize, connections)
        # The client's connection pool sets TCP keep-alive itself: a peer that vanished is noticed.
        return cls.from_api_client(client.ApiClient(settings))

    @classmethod
    def from_api_client(cls, api: client.ApiClient) -> Kube:
        return cls(
            api=api,
            core=client.CoreV1Api(api),
            apps=client.AppsV1Api(api),
            batch=client.BatchV1Api(api),
            autoscaling=client.AutoscalingV2Api(api),
            custom=client.CustomObjectsApi(api),
        )

    def close(self) -> None:
        self.api.close()


class Conflict(kopf.TemporaryError):
    """409: the object changed since it was read (a stale cache, another writer). Routine: the pass
    runs again at once with what the cluster now holds, and no condition or Event says so."""


class Unavailable(kopf.TemporaryError):
    """5xx, 429, a timeout or no connection: retried with backoff (``retry_after``: the seconds the
    API server asked for in a ``Retry-After`` header, if it did)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message, delay=retry_after or 1)
        self.retry_after = retry_after


class Forbidden(kopf.TemporaryError):
    """403: RBAC, a ResourceQuota or an admission policy or webhook refused the call. No retry soon
    changes that, a person does: the object is Stalled with the API server's words, and the call
    is tried again every ``FORBIDDEN_RETRY_SECONDS`` (a policy can be fixed without a restart)."""


FORBIDDEN_RETRY_SECONDS = 60.0


def retry_after(exc: ApiException) -> float | None:
    """The ``Retry-After`` of an answer, in seconds (an HTTP date is not one the API server sends)."""
    value = (exc.headers or {}).get("Retry-After") if exc.headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the API with a timeout; translate failures into kopf errors that name ``what`` was attempted.

    404 is left to the caller (absent is often fine)."""
    try:
        return fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            raise
        if exc.status == 409:
            raise Conflict(f"{what}: API server answered 409 {exc.reason}", delay=0) from exc
        if exc.status in RETRYABLE_STATUSES:
            raise Unavailable(f"{what}: API server answered {exc.status} {exc.reason}", retry_after(exc)) from exc
        if exc.status == 403:
            raise Forbidden(
                f"{what}: forbidden: {status_message(exc)} (RBAC: the operator's ClusterRole in manifests/; "
                "or a ResourceQuota or admission policy of the namespace)",
                delay=FORBIDDEN_RETRY_SECONDS,
            ) from exc
        raise kopf.PermanentError(
            f"{what}: API server answered {exc.status} {exc.reason}: {status_message(exc)}"
        ) from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        raise Unavailable(f"{what}: cannot reach the API server: {exc}") from exc


def status_message(exc: ApiException) -> str:
    """The API server's own words from a Status body, else the HTTP reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)
