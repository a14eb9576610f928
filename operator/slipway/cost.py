"""What things cost: the price file read, and a TrainingRun's cost from its pods (pure).

The price table is :mod:`slipway.prices` (the file's format, parsed); :func:`prices_of` reads it.

Costs are reservation-based: a pod costs what it asks for (GPUs from its limits or requests, CPU
and memory from its requests) for as long as it holds it, from its start (``status.startTime``)
to the end of its last container, whether it did useful work or not. Shared GPUs are not split.

A TrainingRun's attempts are recorded in ``status.cost.attempts`` as its pods are seen, so that a
pod deleted (preempted, garbage-collected) still counts: a pod that vanished without a recorded
end ends when it was found gone. The wasted share is the cost of attempts that did not succeed
(failed, preempted, deleted) over the total.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils.quantity import parse_quantity

from slipway.clock import rfc3339
from slipway.prices import DEFAULT_PRODUCT, PriceError, Prices, Reserved
from slipway.status.conditions import parse_time

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 64  # recorded in status; older finished ones are folded into status.cost.folded
GIB = Decimal(2**30)


_LOADED: dict[str, tuple[float, Prices]] = {}  # path -> (mtime, prices) last read well


def load(path: str | Path | None) -> Prices:
    """The price table in ``path`` (YAML or JSON); no path: no prices."""
    if not path:
        return Prices()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PriceError(f"price file {path}: {exc.strerror or exc}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PriceError(f"price file {path}: not YAML or JSON ({exc})") from exc
    return Prices.parse(doc, f"price file {path}")


def prices_of(path: str | None) -> Prices:
    """The price table in ``path``, read again when the file changes (a ConfigMap edit). A file that
    turns bad after a good read keeps the last good table (logged once); a bad first read raises
    PriceError."""
    if not path:
        return Prices()
    try:
        mtime = Path(path).stat().st_mtime
    except OSError as exc:
        if path in _LOADED:
            return _LOADED[path][1]
        raise PriceError(f"price file {path}: {exc.strerror or exc}") from exc
    known = _LOADED.get(path)
    if known is not None and known[0] == mtime:
        return known[1]
    try:
        prices = load(path)
    except PriceError as exc:
        if known is None:
            raise
        log.warning("%s; keeping the prices read before", exc)
        _LOADED[path] = (mtime, known[1])
        return known[1]
    _LOADED[path] = (mtime, prices)
    return prices


def _quantity(value: Any) -> Decimal:
    try:
        return Decimal(parse_quantity(value)) if value is not None else Decimal(0)
    except (ValueError, TypeError):
        return Decimal(0)


def is_accelerator(resource: str) -> bool:
    """An extended resource (``vendor/name``: nvidia.com/gpu, amd.com/gpu, nvidia.com/mig-1g.10gb,
    habana.ai/gaudi...) counts as a GPU: priced per GPU-hour."""
    return "/" in resource and not resource.startswith(("hugepages-", "kubernetes.io/"))


def reserved_by(pod: Mapping[str, Any], gpu_product: str | None = None, node: str | None = None) -> Reserved:
    """What a pod reserves: the sum over its containers (GPUs, any extended resource, from limits,
    else requests; CPU and memory from requests, else limits, as the scheduler counts them), on ``node``."""
    gpus, cpus, memory = Decimal(0), Decimal(0), Decimal(0)
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for resource in {*limits, *requests}:
            if is_accelerator(resource):  # spec.resources.gpuResourceName: nvidia.com/gpu, amd.com/gpu, ...
                gpus += _quantity(limits.get(resource, requests.get(resource)))
        cpus += _quantity(requests.get("cpu", limits.get("cpu")))
        memory += _quantity(requests.get("memory", limits.get("memory")))
    return Reserved(int(gpus), float(cpus), float(memory / GIB), gpu_product, node)


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


WASTED = ("Failed", "Preempted", "Deleted")


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


def pod_per_hour(
    prices: Prices, pods: Iterable[Mapping[str, Any]], products: Mapping[str, str] | None = None
) -> tuple[float | None, int, str]:
    """What one of ``pods`` (those not finished) costs per hour on average, how many there are, and
    what is missing from the price table ("" when nothing): None when no price is configured, the
    pods hold something unpriced, or there is no pod to price. Each pod is priced for its node
    (``spec.nodeName``)."""
    if not prices.configured:
        return None, 0, prices.unconfigured()
    running = [p for p in pods if ((p.get("status") or {}).get("phase")) not in ("Succeeded", "Failed")]
    total, missing, short = 0.0, [], []
    for pod in running:
        node = (pod.get("spec") or {}).get("nodeName") or None
        reserved = reserved_by(pod, (products or {}).get(node or ""), node)
        lacking = prices.missing(reserved)
        missing += [m for m in lacking if m not in missing]
        short += [node] if lacking else []
        total += prices.hourly(reserved)
    if missing:
        return None, len(running), f"missing from {prices.missing_from(short)}: {', '.join(missing)}"
    if not running:
        return None, 0, "no pod of the track to price"
    return total / len(running), len(running), ""


def needs_products(prices: Prices) -> bool:
    """True when a GPU's price depends on its product (the node label), so the nodes must be read."""
    return any(product != DEFAULT_PRODUCT for product in prices.gpu_hour)


def job_cost(job: Mapping[str, Any], prices: Prices, now: datetime) -> float | None:
    """What a finished Job cost: its pods' requests (its template, times its parallelism) from its
    start to its completion (or its failure); None while it runs or when a price it needs is missing."""
    status = job.get("status") or {}
    start = parse_time(status.get("startTime"))
    end = parse_time(status.get("completionTime")) or next(
        (
            parse_time(c.get("lastTransitionTime"))
            for c in status.get("conditions") or []
            if c.get("type") == "Failed" and c.get("status") == "True"
        ),
        None,
    )
    spec = job.get("spec") or {}
    reserved = reserved_by(spec.get("template") or {})
    if start is None or end is None or prices.missing(reserved):
        return None
    pods = int(spec.get("parallelism") or 1)
    return max(0.0, (end - start).total_seconds()) / 3600 * prices.hourly(reserved) * pods
