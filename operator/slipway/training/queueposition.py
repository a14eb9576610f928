"""A queued run's place in its Kueue LocalQueue, from Kueue's visibility API.

Kueue keeps pending positions out of its objects (writing them would rewrite every queued
Workload whenever the queue moves); it answers them on demand instead, through an aggregated API:
``GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<q>/pendingworkloads``
lists the LocalQueue's pending Workloads with their positions in it and in its ClusterQueue.

A sweep of 1,000 queued runs would make that list quadratic if each pass read it. It is read once
per LocalQueue per :data:`TTL_SECONDS` after the last answer (a monotonic clock), whichever pass
asks first; passes that ask while it is read wait for that answer (at most :data:`TIMEOUT_SECONDS`),
never send it twice. A cluster whose Kueue serves no visibility API (an older Kueue, the API not
registered or not answering, RBAC) costs one request per LocalQueue per :data:`FAILED_TTL_SECONDS`
and shows no position; a pass never fails on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from slipway.singleflight import SingleFlight

log = logging.getLogger(__name__)

TTL_SECONDS = 10.0  # an answer is used this long after it came
FAILED_TTL_SECONDS = 60.0  # a failed read (no visibility API, an outage) is not tried again sooner
TIMEOUT_SECONDS = 3.0  # the read, and a pass's wait for it: a position is worth no more
GROUP_VERSION = "visibility.kueue.x-k8s.io/v1beta2"
PAGE = 1000  # Kueue's own default and largest useful page: a run further back reads as "over 1000"


@dataclass(frozen=True)
class Position:
    """Kueue's positions, counted from 1 here (Kueue counts from 0): 1 is admitted next."""

    in_local_queue: int
    in_cluster_queue: int


Positions = dict[str, Position]  # Workload name -> its position


@dataclass(frozen=True)
class Place:
    """What the visibility API says of one Workload: ``served`` whether it answered for its
    LocalQueue; ``position`` None when the Workload is not pending there (admitted, not seen by
    Kueue yet, further back than :data:`PAGE`)."""

    served: bool
    position: Position | None = None


_FAILING: set[tuple[str, str]] = set()  # LocalQueues whose last read failed (logged once per outage)
_LOCK = threading.Lock()
_READS: SingleFlight[tuple[str, str], Positions] = SingleFlight(
    TTL_SECONDS, FAILED_TTL_SECONDS, on_drop=_FAILING.discard
)  # LocalQueue -> its positions


def place_of(api: Any, namespace: str, queue: str, workload: str, clock: Callable[[], float] = time.monotonic) -> Place:
    """``workload``'s place in LocalQueue ``namespace/queue``, from an answer at most
    :data:`TTL_SECONDS` old; a pass waits at most :data:`TIMEOUT_SECONDS` for it."""
    try:
        positions = _READS.get((namespace, queue), lambda: _ask(api, namespace, queue), TIMEOUT_SECONDS, clock)
    except FutureTimeout:
        return Place(served=False)
    return Place(served=False) if positions is None else Place(served=True, position=positions.get(workload))


def _ask(api: Any, namespace: str, queue: str) -> Positions | None:
    """The LocalQueue's positions from the visibility API, or None (logged once per outage)."""
    path = (
        f"/apis/{GROUP_VERSION}/namespaces/{quote(namespace, safe='')}/localqueues/"
        f"{quote(queue, safe='')}/pendingworkloads"
    )
    key = (namespace, queue)
    positions: Positions | None = None
    try:
        accept = {"Accept": "application/json"}
        request = api.param_serialize(
            "GET", path, query_params=[("limit", PAGE)], header_params=accept, auth_settings=["BearerToken"]
        )
        response = api.call_api(*request, _request_timeout=TIMEOUT_SECONDS)
        response.read()
        if response.status != 200:
            raise LookupError(f"HTTP {response.status}")
        answer = json.loads(response.data)
        if not isinstance(answer, dict) or not isinstance(answer.get("items", []), list):
            raise LookupError("not a PendingWorkloadsSummary")
        positions = parse(answer)
    except Exception as exc:  # noqa: BLE001 - no position is shown; the pass goes on
        with _LOCK:
            new = key not in _FAILING
            _FAILING.add(key)
        if new:
            log.info(
                "no queue positions for LocalQueue %s/%s from Kueue's visibility API (%s): status shows "
                "none; asked again every %gs",
                namespace,
                queue,
                exc,
                FAILED_TTL_SECONDS,
            )
    else:
        with _LOCK:
            _FAILING.discard(key)
    return positions


def parse(answer: Any) -> Positions:
    """The positions in a PendingWorkloadsSummary (checked by the caller to be one)."""
    positions: Positions = {}
    for item in answer.get("items", []):
        try:
            name = str(item["metadata"]["name"])
            positions[name] = Position(int(item["positionInLocalQueue"]) + 1, int(item["positionInClusterQueue"]) + 1)
        except (KeyError, TypeError, ValueError):
            continue
    return positions


def forget() -> None:
    """Drop every read (tests)."""
    with _LOCK:
        _READS.clear()
        _FAILING.clear()
