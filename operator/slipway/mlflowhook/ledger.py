"""The delivery ids believed, kept where a new leader finds them: the annotation
``slipway.dev/mlflow-webhook-deliveries`` of the Lease ``slipway-mlflow-webhook`` in the operator's
namespace (beside the leader's Lease ``slipway-operator``; the same RBAC, one more name).

An id is added by a compare-and-swap: the write carries the resourceVersion read, so of two
replicas that record at once (a leader that has not yet noticed it lost the Lease, and the new
one) the API server lets one win; the other reads again and finds the id if it was the same. A
delivery is answered only after its id is written, so a captured delivery replayed to any replica
later, or to this one after a restart, is refused as replayed. Ids older than twice the timestamp
window are dropped on each write (a replay of one is refused as stale anyway, on any clock within
the window of this one's). One request per believed delivery (two for a new leader's first: it
reads first); nothing at rest.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from slipway.lease import LABELS
from slipway.mlflowhook.verify import TOLERANCE, Refused

log = logging.getLogger("slipway.mlflowhook")

LEDGER_NAME = "slipway-mlflow-webhook"
ANNOTATION = "slipway.dev/mlflow-webhook-deliveries"
MAX_IDS = 2000  # ids within the window (~50 bytes each: 100 kB, under the 256 kB of annotations)
ATTEMPTS = 4  # conflicts in a row before a delivery is answered 503 (MLflow retries it)


class LeaseLedger:
    """Records delivery ids in a Lease (blocking: the webhook's own thread calls it)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str = LEDGER_NAME,
        *,
        keep: float = 2 * TOLERANCE,
        max_ids: int = MAX_IDS,
        timeout: float = 5.0,
    ) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace, self.name = namespace, name
        self.keep, self.max_ids, self.timeout = keep, max_ids, timeout
        self.mine: Any = None  # the Lease as last read or written here (its resourceVersion)
        self._error: str | None = None

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def record(self, delivery: str, stamp: int, now: float) -> None:
        """Add ``delivery``; raises :class:`Refused`: 409 replayed (recorded already), 429 busy (``max_ids``
        within the window), 503 unrecorded (the API server did not take the write: MLflow retries)."""
        for attempt in range(ATTEMPTS):
            lease = None
            try:
                lease = self.mine if self.mine is not None and attempt == 0 else self._read()
                seen = {d: at for d, at in ids(lease).items() if at >= now - self.keep}
                self.mine = lease  # the freshest seen: the next write starts from it
                if delivery in seen:
                    raise Refused(409, "replayed")
                if len(seen) >= self.max_ids:
                    raise Refused(429, "busy")
                self.mine = self._write(lease, {**seen, delivery: stamp})
                self._error = None
                return
            except Refused:
                raise
            except ApiException as exc:
                if exc.status == 404 and lease is None:
                    self._failed("404 (does the namespace exist? --leader-election-namespace)")
                if exc.status not in (404, 409):  # 409: written meanwhile; 404: deleted meanwhile. Read again.
                    self._failed(f"the API server answered {exc.status} {exc.reason}")
                self.mine = None
            except Exception as exc:  # noqa: BLE001 - a connection error, a timeout: MLflow retries
                self._failed(f"{type(exc).__name__}: {exc}")
        raise Refused(503, "unrecorded")

    def _read(self) -> Any:
        try:
            return self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _write(self, lease: Any, seen: dict[str, int]) -> Any:
        text = json.dumps(seen, separators=(",", ":"), sort_keys=True)
        if lease is None:
            meta = client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, labels=LABELS, annotations={ANNOTATION: text}
            )
            body = client.V1Lease(metadata=meta, spec=client.V1LeaseSpec())
            return self.coordination.create_namespaced_lease(self.namespace, body, _request_timeout=self.timeout)
        lease.metadata.annotations = {**(lease.metadata.annotations or {}), ANNOTATION: text}
        return self.coordination.replace_namespaced_lease(
            self.name, self.namespace, lease, _request_timeout=self.timeout
        )

    def _failed(self, why: str) -> None:
        if why != self._error:  # once per distinct error, not every delivery
            log.warning(
                "MLflow webhook: cannot record delivery ids in %s: %s; deliveries are answered 503 "
                "(MLflow retries them) until it can; alias lookups go on",
                self.where,
                why,
            )
        self._error = why
        raise Refused(503, "unrecorded")


def ids(lease: Any) -> dict[str, int]:
    """The ids a Lease records (none if it does not exist; entries that are not ``id: seconds`` are skipped)."""
    annotations = (lease.metadata.annotations or {}) if lease is not None else {}
    try:
        found = json.loads(annotations.get(ANNOTATION) or "{}")
    except ValueError:
        log.warning("MLflow webhook: the annotation %s of %s is not JSON; starting it again", ANNOTATION, LEDGER_NAME)
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(d): int(at) for d, at in found.items() if isinstance(at, int) and not isinstance(at, bool)}
