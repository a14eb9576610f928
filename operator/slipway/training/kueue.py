"""What Kueue says of a TrainingRun's Job, in the run's words (pure).

Kueue makes one Workload per queued Job (owned by it) and writes its verdicts there: quota
reserved or not and why (``QuotaReserved``), ``Admitted``, ``Evicted`` (with the reason:
``Preempted`` by a higher-priority workload, ``PodsReadyTimeout``, a stopped queue ...) and, in
``status.schedulingStats.evictions``, how often each happened. The Job itself only shows
``suspend`` flipping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slipway.training.build import QUEUE_LABEL as QUEUE_LABEL  # the builder sets it; read here

Obj = Mapping[str, Any]
# What status and Events quote of a Workload's words: anyone who may write Workloads in the
# namespace writes them, and a condition message may be 32 KiB.
MAX_QUOTE = 500


def _quote(text: Any) -> str:
    said = str(text or "")
    return said if len(said) <= MAX_QUOTE else said[: MAX_QUOTE - 1] + "…"


@dataclass(frozen=True)
class QueueView:
    """A Workload as the TrainingRun's status needs it."""

    workload: str
    cluster_queue: str | None
    admitted: bool
    admitted_at: str | None
    reserved: bool  # quota reserved (QuotaReserved), admission checks may still be pending
    waiting: str | None  # why no quota is reserved (QuotaReserved=False), in Kueue's words
    evicted: tuple[str, str] | None  # (reason, message) while evicted and not admitted again
    evictions: int
    # Its place among the pending Workloads (Kueue's visibility API, 1 = admitted next), if known.
    position: int | None = None
    position_in_cluster_queue: int | None = None
    # Why its ClusterQueue can never admit it (queuequota.Quota.refusal), numbers included.
    exceeds: str | None = None


def _condition(workload: Obj, kind: str) -> Obj | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def _true(cond: Obj | None) -> bool:
    return cond is not None and cond.get("status") == "True"


def view(workload: Obj) -> QueueView:
    status = workload.get("status") or {}
    admitted = _condition(workload, "Admitted")
    reserved = _condition(workload, "QuotaReserved")
    evicted = _condition(workload, "Evicted")
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    return QueueView(
        workload=_quote(workload["metadata"]["name"]),
        cluster_queue=_quote((status.get("admission") or {}).get("clusterQueue")) or None,
        admitted=_true(admitted),
        admitted_at=admitted.get("lastTransitionTime") if _true(admitted) and admitted else None,
        reserved=_true(reserved),
        waiting=_quote(reserved.get("message") or reserved.get("reason")) if reserved and not _true(reserved) else None,
        evicted=(_quote(evicted.get("reason") or "Evicted"), _quote(evicted.get("message")))
        if _true(evicted) and not _true(admitted) and evicted
        else None,
        evictions=sum(int(e.get("count") or 0) for e in stats),
    )


def workload_of(job: Obj | None, workloads: Sequence[Obj]) -> QueueView | None:
    """The view of the Workload Kueue made for ``job`` (its controller ownerReference), if any."""
    if job is None:
        return None
    uid = job["metadata"].get("uid")
    for workload in workloads:
        for ref in workload["metadata"].get("ownerReferences") or []:
            if ref.get("uid") == uid and ref.get("controller"):
                return view(workload)
    return None


def queued(queue_name: str, seen: QueueView | None) -> tuple[str, str]:
    """(reason, message) of a Job that Kueue holds suspended."""
    if seen is None:
        return "Queued", (
            f"waiting for Kueue to admit the Job (LocalQueue {queue_name}); Kueue has not made a "
            "Workload for it yet (if this lasts, check that Kueue runs and manages batch/job)"
        )
    if seen.evicted is not None:
        reason, said = seen.evicted
        why = "PreemptedByKueue" if reason == "Preempted" else "EvictedByKueue"
        return why, (
            f"Kueue evicted the run ({reason}: {said}); Workload {seen.workload} waits in LocalQueue "
            f"{queue_name} and the run resumes from its checkpoint when admitted again (evictions do "
            "not count against spec.failurePolicy.maxRestarts)"
        )
    detail = (
        f": {seen.waiting}" if seen.waiting else ": quota reserved, admission checks pending" if seen.reserved else ""
    )
    where = f"LocalQueue {queue_name}" + (f", position {seen.position}" if seen.position else "")
    return "Queued", f"waiting for Kueue to admit Workload {seen.workload} ({where}){detail}"


def admitted(seen: QueueView) -> tuple[str, str]:
    """(reason, message) of an admitted Job whose pods have not started yet."""
    where = f" in ClusterQueue {seen.cluster_queue}" if seen.cluster_queue else ""
    return "Admitted", f"Kueue admitted Workload {seen.workload}{where}; waiting for the training pods to start"


def queue_status(queue_name: str, seen: QueueView | None) -> dict[str, Any]:
    """status.queue."""
    out: dict[str, Any] = {"localQueue": queue_name}
    if seen is not None:
        out["workload"] = seen.workload
        out["admitted"] = seen.admitted
        if seen.cluster_queue:
            out["clusterQueue"] = seen.cluster_queue
        if seen.admitted_at:
            out["admittedAt"] = seen.admitted_at
        if seen.evictions:
            out["evictions"] = seen.evictions
        if seen.position and not seen.admitted:
            out["position"] = seen.position
            out["positionInClusterQueue"] = seen.position_in_cluster_queue
    return out
