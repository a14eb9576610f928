"""A queued run's place in its Kueue LocalQueue, from Kueue's visibility API.

Kueue keeps pending positions out of its objects (writing them would rewrite every queued
Workload whenever the queue moves); it answers them on demand instead, through an aggregated API:
``GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<q>/pendingworkloads``
lists the LocalQueue's pending Workloads with their positions in it and in its ClusterQueue.

A sweep of 1,000 queued runs would make that list quadratic if each pass read it. It is read once
per LocalQueue per :data:`TTL_SECONDS` (a monotonic clock), whichever pass asks first; passes that
ask while it is read wait for that answer (within the operator's HTTP timeout), never send it twice.
A cluster whose Kueue serves no visibility API (an older Kueue, the API not registered, RBAC) costs
one request per LocalQueue per TTL and shows no position; a pass never fails on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

log = logging.getLogger(__name__)

TTL_SECONDS = 10.0
GROUP_VERSION = "visibility.kueue.x-k8s.io/v1beta2"
PAGE = 1000  # Kueue's own default and largest useful page: a run further back reads as "over 1000"


@dataclass(frozen=True)
class Position:
    """Kueue's positions, counted from 1 here (Kueue counts from 0): 1 is admitted next."""

    in_local_queue: int
    in_cluster_queue: int


Positions = dict[str, Position]  # Workload name -> its position


@dataclass
class _Read:
    started: float
    answer: Future[Positions | None] = field(default_factory=Future)  # None: no visibility API


_READS: dict[tuple[str, str], _Read] = {}
_LOCK = threading.Lock()


def position_of(
    api: Any, namespace: str, queue: str, workload: str, timeout: float, clock: Callable[[], float] = time.monotonic
) -> Position | None:
    """``workload``'s position in LocalQueue ``namespace/queue``; None when it is not pending there
    (admitted, not yet seen by Kueue, further back than :data:`PAGE`) or Kueue could not say."""
    key = (namespace, queue)
    with _LOCK:
        read = _READS.get(key)
        now = clock()
        mine = read is None or (read.answer.done() and now - read.started >= TTL_SECONDS)
        if mine:
            read = _READS[key] = _Read(now)
    assert read is not None
    if mine:
        _ask(api, namespace, queue, timeout, read)
    try:
        positions = read.answer.result(timeout=timeout)
    except FutureTimeout:
        return None
    return None if positions is None else positions.get(workload)


def _ask(api: Any, namespace: str, queue: str, timeout: float, read: _Read) -> None:
    path = (f"/apis/{GROUP_VERSION}/namespaces/{quote(namespace, safe='')}/localqueues/"
            f"{quote(queue, safe='')}/pendingworkloads")  # fmt: skip
    try:
        accept = {"Accept": "application/json"}
        request = api.param_serialize("GET", path, query_params=[("limit", PAGE)], header_params=accept,
                                      auth_settings=["BearerToken"])  # fmt: skip
        response = api.call_api(*request, _request_timeout=timeout)
        response.read()
        if response.status != 200:
            raise LookupError(f"HTTP {response.status}")
        read.answer.set_result(parse(json.loads(response.data)))
    except Exception as exc:  # noqa: BLE001 - no position is shown; the pass goes on
        if not _warned_before(namespace, queue):
            log.info("no queue positions for LocalQueue %s/%s from Kueue's visibility API (%s): status shows "
                     "none; asked again every %gs", namespace, queue, exc, TTL_SECONDS)  # fmt: skip
        read.answer.set_result(None)


_WARNED: set[tuple[str, str]] = set()


def _warned_before(namespace: str, queue: str) -> bool:
    with _LOCK:
        seen = (namespace, queue) in _WARNED
        _WARNED.add((namespace, queue))
        return seen


def parse(answer: Any) -> Positions:
    """The positions in a PendingWorkloadsSummary (anything else: none)."""
    items = answer.get("items") if isinstance(answer, dict) else None
    positions: Positions = {}
    for item in items if isinstance(items, list) else []:
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
        _WARNED.clear()
