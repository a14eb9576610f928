"""The Kubernetes API, through the official (blocking) client.

Reconciliation passes run in worker threads, so these calls never block the event loop. Callers
use this package's names (``kube.get``, ``kube.Conflict`` ...); it is made of:

- :mod:`.connection` — the clients sharing one connection pool, the timeout of every call and
  the error vocabulary: what a retry can fix is a ``kopf.TemporaryError`` with a delay, what it
  cannot is a ``kopf.PermanentError``;
- :mod:`.objects` — reading and writing objects by kind (get, create, replace, merge patch,
  status patch, delete) as plain dicts (camelCase keys), and owner references;
- :mod:`.cluster` — the cluster beside the objects: Events posted and read, the nodes' GPU
  products, whether an API is served.
"""

from __future__ import annotations

from slipway.kube.cluster import (
    COMPONENT,
    GPU_PRODUCT_LABEL,
    creation_failure,
    gpu_products,
    pods_of_job,
    post_event,
    serves,
)
from slipway.kube.connection import (
    FORBIDDEN_RETRY_SECONDS,
    REQUEST_TIMEOUT,
    Conflict,
    Forbidden,
    Kube,
    Unavailable,
    call,
    retry_after,
    status_message,
)
from slipway.kube.objects import (
    FIELD_MANAGER,
    MERGE_PATCH,
    AlreadyExists,
    Custom,
    controller_uid,
    create,
    custom_kinds,
    delete,
    get,
    list_nodes,
    owner_reference,
    patch,
    patch_status,
    replace,
    typed_kinds,
)

__all__ = [
    "COMPONENT",
    "FIELD_MANAGER",
    "FORBIDDEN_RETRY_SECONDS",
    "GPU_PRODUCT_LABEL",
    "MERGE_PATCH",
    "REQUEST_TIMEOUT",
    "AlreadyExists",
    "Conflict",
    "Custom",
    "Forbidden",
    "Kube",
    "Unavailable",
    "call",
    "controller_uid",
    "create",
    "creation_failure",
    "pods_of_job",
    "custom_kinds",
    "delete",
    "get",
    "gpu_products",
    "list_nodes",
    "owner_reference",
    "patch",
    "patch_status",
    "post_event",
    "replace",
    "retry_after",
    "serves",
    "status_message",
    "typed_kinds",
]
