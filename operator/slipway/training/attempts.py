"""A TrainingRun's attempt ledger, ``status.cost`` (pure).

A TrainingRun's attempts are recorded in ``status.cost.attempts`` as its pods are seen, so that a
pod deleted (preempted, garbage-collected) still counts: a pod that vanished without a recorded
end ends when it was found gone. Each attempt costs what its pod reserved
(:func:`slipway.cost.reserved_by`) for as long as it held it, priced for its node. The wasted
share is the cost of attempts that did not succeed (failed, preempted, deleted) over the total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from slipway.clock import rfc3339
from slipway.cost import reserved_by
from slipway.prices import Prices, Reserved
from slipway.status.conditions import parse_time

MAX_ATTEMPTS = 64  # recorded in status; older finished ones are folded into status.cost.folded
WASTED = ("Failed", "Preempted", "Deleted")


def _ended(pod: Mapping[str, Any]) -> str | None:
    """When the pod's last container ended, if every one has."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ends = [((s.get("state") or {}).get("terminated") or {}).get("finishedAt") for s in statuses]
    if not statuses or not all(ends):
        return None
    return max(str(e) for e in ends)


def _outcome(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    disrupted = any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    if disrupted and phase != "Succeeded":
        return "Preempted"
    return str(phase)


def record_attempts(
    recorded: Sequence[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    now: datetime,
    products: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The run's attempts: those ``recorded`` (status.cost.attempts), brought up to date from the
    pods seen now; a recorded attempt whose pod is gone and has no end ends ``now``, as
    ``Deleted`` (or ``Preempted`` when it was last seen being preempted). ``products``: node name ->
    GPU product (the node label, "" for none), for attempts whose product is not yet recorded."""
    by_name = {str(a.get("pod")): dict(a) for a in recorded}
    seen: set[str] = set()
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = str(meta.get("name"))
        start = status.get("startTime")
        if not start:
            continue  # never started: holds nothing yet
        seen.add(name)
        node = (pod.get("spec") or {}).get("nodeName")
        attempt = by_name.get(name) or {"pod": name}
        product = attempt.get("gpuProduct")
        if product is None and (node or "") in (products or {}):
            product = (products or {})[node or ""]  # "" when the node has no label: looked up once
        reserved = reserved_by(pod, product or None)
        attempt.update(
            node=node,
            gpus=reserved.gpus,
            cpu=round(reserved.cpus, 3),
            memoryGiB=round(reserved.memory_gib, 3),
            startTime=start,
            outcome=_outcome(pod),
        )
        if product is not None:
            attempt["gpuProduct"] = product
        end = _ended(pod)
        if end is None and meta.get("deletionTimestamp") and attempt["outcome"] not in ("Succeeded", "Failed"):
            attempt["outcome"] = "Preempted" if attempt["outcome"] == "Preempted" else "Deleted"
        if end is not None:
            attempt["endTime"] = end
        by_name[name] = attempt
    for name, attempt in by_name.items():
        if name not in seen and not attempt.get("endTime"):
            attempt["endTime"] = rfc3339(now)
            if attempt.get("outcome") not in ("Succeeded", "Failed", "Preempted"):
                attempt["outcome"] = "Deleted"
    return sorted(by_name.values(), key=lambda a: (str(a.get("startTime")), str(a.get("pod"))))


def hours(attempt: Mapping[str, Any], now: datetime) -> float:
    start = parse_time(attempt.get("startTime"))
    end = parse_time(attempt.get("endTime")) or now
    return 0.0 if start is None else max(0.0, (end - start).total_seconds()) / 3600


def _reserved(attempt: Mapping[str, Any]) -> Reserved:
    return Reserved(
        int(attempt.get("gpus") or 0),
        float(attempt.get("cpu") or 0),
        float(attempt.get("memoryGiB") or 0),
        attempt.get("gpuProduct"),
        attempt.get("node"),
    )


def training_cost(
    attempts: Sequence[Mapping[str, Any]],
    prices: Prices,
    now: datetime,
    folded: Mapping[str, Any] | None = None,
    present: Iterable[str] = (),
) -> dict[str, Any]:
    """status.cost of a TrainingRun: total, GPU-hours and wasted share over every attempt (and the
    ``folded`` totals of older ones), each attempt's cost, and what is missing from the price table.
    ``present``: the pods that exist now (see :func:`fold`). Each attempt is priced for its node."""
    folded = folded or {}
    total, gpu_hours, wasted = (float(folded.get(k) or 0) for k in ("total", "gpuHours", "wasted"))
    missing: list[str] = []
    short: list[str | None] = []  # the nodes of attempts with a price missing
    priced = []
    frozen_any = False
    for attempt in attempts:
        reserved, spent = _reserved(attempt), hours(attempt, now)
        frozen = attempt.get("perHour") if attempt.get("endTime") else None
        out = {**attempt}
        if frozen is not None:  # ended, priced by OpenCost: what it cost then, whatever OpenCost says now
            hourly, frozen_any = float(frozen), True
        else:
            lacking = prices.missing(reserved)
            missing += [m for m in lacking if m not in missing]
            short += [reserved.node] if lacking else []
            hourly = prices.hourly(reserved)
            if attempt.get("endTime") and not lacking and prices.from_open_cost(reserved):
                hourly = out["perHour"] = round(hourly, 6)
        cost = spent * hourly
        total += cost
        gpu_hours += spent * reserved.gpus
        if attempt.get("outcome") in WASTED:
            wasted += cost
        priced.append({**out, "cost": round(cost, 6)})
    kept, folded_now, unlisted = fold(priced, folded, now, set(present))
    result: dict[str, Any] = {"gpuHours": round(gpu_hours, 6), "attempts": kept, "folded": folded_now}
    if unlisted:
        result["unlisted"] = unlisted
    if not prices.configured and not frozen_any:
        result["message"] = prices.unconfigured(" to see what runs cost")
        return result
    result.update(
        currency=prices.currency or None,
        total=round(total, 6),
        wastedShare=round(wasted / total, 4) if total > 0 else 0.0,
        summary=f"{total:.2f} {prices.currency}".strip(),
    )
    if missing:
        result["message"] = f"missing from {prices.missing_from(short)}: {', '.join(missing)} (counted as 0)"
    return result


def fold(
    attempts: list[dict[str, Any]], folded: Mapping[str, Any], now: datetime, present: set[str]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, int]:
    """At most MAX_ATTEMPTS attempts stay listed, so that status stays small whatever the run does:
    the oldest attempts whose pods are gone (never seen again, so never counted twice) are folded
    into totals (count, total, gpuHours, wasted). Pods that still exist need no record (each pass
    counts them from the pods): beyond the limit the newest are listed and the others only counted
    (the third value). Returns (listed, folded, unlisted)."""
    out = dict(folded) if folded else {}
    gone = [a for a in attempts if a.get("pod") not in present]
    listed = list(attempts)
    for oldest in gone:  # oldest first: attempts are sorted by start
        if len(listed) <= MAX_ATTEMPTS:
            break
        listed = [a for a in listed if a is not oldest]
        out["count"] = int(out.get("count") or 0) + 1
        out["total"] = round(float(out.get("total") or 0) + float(oldest.get("cost") or 0), 6)
        gpu_hours = float(oldest.get("gpus") or 0) * hours(oldest, now)
        out["gpuHours"] = round(float(out.get("gpuHours") or 0) + gpu_hours, 6)
        if oldest.get("outcome") in WASTED:
            out["wasted"] = round(float(out.get("wasted") or 0) + float(oldest.get("cost") or 0), 6)
    unlisted = max(0, len(listed) - MAX_ATTEMPTS)
    return listed[unlisted:], out or None, unlisted
