"""The Kubernetes API, through the official (blocking) client.

Handlers are sync, so kopf runs them in its thread pool and these calls never
block the event loop. API errors become kopf's error vocabulary: what a retry
can fix is a TemporaryError with a delay, what it cannot is a PermanentError.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")

RETRYABLE_STATUSES = {409, 429, 500, 502, 503, 504}


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
    def connect(cls, kubeconfig: str | None = None) -> Kube:
        """In-cluster config inside a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            api = client.ApiClient()
        else:
            api = config.new_client_from_config(config_file=kubeconfig)
        return cls.from_api_client(api)

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


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the API; translate failures into kopf errors that name ``what`` was attempted."""
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        if exc.status == 404:
            raise
        if exc.status in RETRYABLE_STATUSES:
            raise kopf.TemporaryError(f"{what}: API server answered {exc.status} {exc.reason}", delay=5) from exc
        if exc.status == 403:
            # RBAC can be fixed without restarting the operator: keep retrying, slowly.
            raise kopf.TemporaryError(
                f"{what}: forbidden ({exc.reason}); the operator's ClusterRole in manifests/ must allow it",
                delay=60,
            ) from exc
        raise kopf.PermanentError(f"{what}: API server answered {exc.status} {exc.reason}: {exc.body}") from exc
    except OSError as exc:
        raise kopf.TemporaryError(f"{what}: cannot reach the API server: {exc}", delay=5) from exc
