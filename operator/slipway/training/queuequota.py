"""The most a Kueue ClusterQueue can ever admit of one resource for one Workload, and whether a
TrainingRun asks for more (it would wait in its queue for ever: it is Stalled instead).

A Workload's pods get a resource from one flavor of the ClusterQueue's resource group that covers
it. From flavor ``f`` the ClusterQueue can hold its ``nominalQuota``, plus, in a cohort, what it may
borrow: what the cohort's other ClusterQueues lend of ``f`` (each its ``lendingLimit``, else its
whole nominal quota), at most its own ``borrowingLimit``. The most is the best flavor's. A cohort
that is also a Cohort object (hierarchical cohorts: a parent, quota of its own) is not judged, nor
is anything Kueue's API does not answer plainly: a run is only called inadmissible on numbers read.

The LocalQueue, its ClusterQueue and the cohort's ClusterQueues are read once per LocalQueue per
:data:`TTL_SECONDS` (a monotonic clock; one read at a time, which passes asking meanwhile wait for:
slipway.singleflight); a stalled run looks again every
:data:`RECHECK_SECONDS`, so it is Queued again once an admin raises the quota.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.quantity import parse_quantity

from slipway import kinds
from slipway.singleflight import SingleFlight

log = logging.getLogger(__name__)

GROUP, VERSION = kinds.CLUSTER_QUEUE.group, kinds.CLUSTER_QUEUE.version
TTL_SECONDS = 10.0
RECHECK_SECONDS = 30.0
TIMEOUT_SECONDS = 3.0
Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Quota:
    """What ClusterQueue ``cluster_queue`` can hold of ``resource`` for one Workload."""

    cluster_queue: str
    resource: str
    most: Decimal
    flavor: str  # the flavor that gives the most
    nominal: Decimal
    borrowable: Decimal  # from the cohort, within the borrowingLimit
    cohort: str | None

    def refusal(self, asked: Decimal, field: str) -> str | None:
        """Why ``asked`` can never be admitted, numbers included; None if it can."""
        if asked <= self.most:
            return None
        where = f"ClusterQueue {self.cluster_queue}, flavor {self.flavor}: nominal quota {_n(self.nominal)}"
        if self.cohort:
            where += f" plus {_n(self.borrowable)} it may borrow in cohort {self.cohort}"
        return (
            f"{field} asks for {_n(asked)} {self.resource} in all, more than Kueue can ever admit ({where}, "
            f"{_n(self.most)} at most); ask for {_n(self.most)} or fewer, or a cluster admin raises the quota "
            "(the run is Queued again once it fits)"
        )


def _n(number: Decimal) -> str:
    return f"{number.normalize():f}"


def _quantity(value: Any) -> Decimal | None:
    try:
        return Decimal(parse_quantity(value)) if value is not None else None
    except (ValueError, TypeError, ArithmeticError):
        return None


def _cohort_of(queue: Obj) -> str | None:
    spec = queue.get("spec") or {}
    return spec.get("cohortName") or spec.get("cohort") or None


def _limits(queue: Obj, resource: str) -> dict[str, dict[str, Any]]:
    """flavor -> that flavor's entry for ``resource`` (nominalQuota, borrowingLimit, lendingLimit)."""
    found: dict[str, dict[str, Any]] = {}
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        if resource not in (group.get("coveredResources") or []):
            continue
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                if entry.get("name") == resource:
                    found[str(flavor.get("name"))] = entry
    return found


def quota(queue: Obj, cohort_queues: Iterable[Obj], resource: str) -> Quota | None:
    """The most ``queue`` can hold of ``resource`` for one Workload (pure); None when it cannot be
    told (a quantity that does not parse). ``cohort_queues``: every ClusterQueue of its cohort."""
    name, cohort = str(queue["metadata"]["name"]), _cohort_of(queue)
    others = [q for q in cohort_queues if q["metadata"]["name"] != name and _cohort_of(q) == cohort] if cohort else []
    best: Quota | None = None
    for flavor, entry in _limits(queue, resource).items():
        nominal, limit = _quantity(entry.get("nominalQuota", 0)), _quantity(entry.get("borrowingLimit"))
        if nominal is None or (entry.get("borrowingLimit") is not None and limit is None):
            return None
        lent = Decimal(0)
        for other in others:
            theirs = _limits(other, resource).get(flavor) or {}
            lends = _quantity(theirs.get("lendingLimit", theirs.get("nominalQuota", 0)))
            if lends is None:
                return None
            lent += min(lends, _quantity(theirs.get("nominalQuota", 0)) or Decimal(0))
        borrowable = lent if limit is None else min(lent, limit)
        candidate = Quota(name, resource, nominal + borrowable, flavor, nominal, borrowable, cohort)
        if best is None or candidate.most > best.most:
            best = candidate
    return best or Quota(name, resource, Decimal(0), "(none covers it)", Decimal(0), Decimal(0), cohort)


# -- reading Kueue's objects -----------------------------------------------------------------------

# LocalQueue -> (its ClusterQueue, its cohort's): one read at a time, kept TTL_SECONDS, unknown too.
_READS: SingleFlight[tuple[str, str], tuple[Obj, list[Obj]]] = SingleFlight(TTL_SECONDS, TTL_SECONDS)


def quota_of(
    api: client.ApiClient, namespace: str, local_queue: str, resource: str, clock: Callable[[], float] = time.monotonic
) -> Quota | None:
    """What LocalQueue ``namespace/local_queue``'s ClusterQueue can hold of ``resource`` for one
    Workload, from Kueue's objects read at most :data:`TTL_SECONDS` ago; None when not known."""
    try:  # a pass that asks while another reads waits for its (up to three) requests
        read = _READS.get(
            (namespace, local_queue), lambda: _read(api, namespace, local_queue), 4 * TIMEOUT_SECONDS, clock
        )
    except FutureTimeout:
        return None
    return None if read is None else quota(read[0], read[1], resource)


def _read(api: client.ApiClient, namespace: str, local_queue: str) -> tuple[Obj, list[Obj]] | None:
    """(the ClusterQueue, its cohort's ClusterQueues) or None (not answered, or a hierarchical cohort)."""
    custom: Any = client.CustomObjectsApi(api)
    timeout = TIMEOUT_SECONDS
    try:
        queue = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "localqueues", local_queue, _request_timeout=timeout
        )
        name = (queue.get("spec") or {}).get("clusterQueue")
        if not name:
            return None
        cluster_queue: Obj = custom.get_cluster_custom_object(
            GROUP, VERSION, "clusterqueues", name, _request_timeout=timeout
        )
        cohort = _cohort_of(cluster_queue)
        if cohort is None:
            return cluster_queue, []
        if _is_cohort_object(custom, cohort):
            return None
        queues = custom.list_cluster_custom_object(GROUP, VERSION, "clusterqueues", _request_timeout=timeout)["items"]
        return cluster_queue, [q for q in queues if _cohort_of(q) == cohort]
    except Exception as exc:  # noqa: BLE001 - not judged: the run stays Queued, as Kueue says
        log.debug("quota of LocalQueue %s/%s not read: %s", namespace, local_queue, exc)
        return None


def _is_cohort_object(custom: Any, cohort: str) -> bool:
    """Whether a Cohort object of that name exists (then its parent or own quota may add to what
    the ClusterQueues lend); only a 404 says no."""
    try:
        custom.get_cluster_custom_object(GROUP, VERSION, "cohorts", cohort, _request_timeout=TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def forget() -> None:
    """Drop every read (tests)."""
    _READS.clear()
