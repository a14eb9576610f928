"""What things cost: the cluster's price table, and a TrainingRun's cost from its pods (pure).

Prices come from one file (``--prices-file``, ``SLIPWAY_PRICES_FILE``; the Helm chart mounts it
from a ConfigMap), YAML or JSON::

    currency: USD
    gpuHour: {default: 2.50, NVIDIA-A100-SXM4-80GB: 3.40}   # by the node label nvidia.com/gpu.product
    cpuHour: 0.04
    memoryGiBHour: 0.005
    openCost: true   # optional: OpenCost's per-node prices, where it has them (slipway.opencost)
    openCostSelector: 'job="opencost",namespace="",pod=""'   # optional: OpenCost's own scrape target

With ``openCost: true`` a pod on a node for which OpenCost exports prices (read from the operator's
Prometheus by :mod:`slipway.opencost` into :attr:`Prices.nodes`) is priced by them, resource by
resource; the table prices the rest. The currency is the table's.

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
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils.quantity import parse_quantity

from slipway import labelmatchers
from slipway.clock import rfc3339
from slipway.status.conditions import parse_time

log = logging.getLogger(__name__)

DEFAULT_PRODUCT = "default"
MAX_ATTEMPTS = 64  # recorded in status; older finished ones are folded into status.cost.folded
GIB = Decimal(2**30)


class PriceError(ValueError):
    """The price file cannot be used; the message names the file and the field."""


FIELDS = "currency, gpuHour, cpuHour, memoryGiBHour, openCost, openCostSelector"
# Where OpenCost's price series are read from: the series of its own scrape target (the job of
# OpenCost's documented scrape config), never one that pod discovery labels with a namespace or pod,
# where any serving pod could export node_gpu_hourly_cost.
OPENCOST_SELECTOR = 'job="opencost",namespace="",pod=""'
NO_PRICE = "no price configured: set the operator's price file (--prices-file, Helm value prices)"


@dataclass(frozen=True)
class NodePrices:
    """One node's per-hour prices from OpenCost (None: it exports no such series for the node)."""

    gpu_hour: float | None = None  # per GPU
    cpu_hour: float | None = None  # per vCPU
    memory_gib_hour: float | None = None  # per GiB


@dataclass(frozen=True)
class Prices:
    """Per-hour prices of what pods reserve; a price not given is None (its cost unknown). With
    ``open_cost``, ``nodes`` holds OpenCost's per-node prices, which win over the table's for a
    pod on that node; ``open_cost_note`` says why OpenCost could not be read, if it could not."""

    currency: str = ""
    gpu_hour: Mapping[str, float] = field(default_factory=dict)  # GPU product -> price; "default" for others
    cpu_hour: float | None = None
    memory_gib_hour: float | None = None
    source: str = ""  # where they were read from, for messages
    open_cost: bool = False  # the price file's openCost: read OpenCost's per-node prices
    nodes: Mapping[str, NodePrices] = field(default_factory=dict)  # node name -> OpenCost's prices
    open_cost_note: str = ""  # why OpenCost's prices are not in ``nodes`` (unreachable, no Prometheus)
    open_cost_selector: str = OPENCOST_SELECTOR  # label matchers of OpenCost's series (labelmatchers.check)

    @classmethod
    def parse(cls, doc: Any, source: str = "prices") -> Prices:
        if doc is None:
            return cls(source=source)
        if not isinstance(doc, Mapping):
            raise PriceError(f"{source}: expected a mapping with {FIELDS}")
        unknown = sorted(set(doc) - set(FIELDS.split(", ")))
        if unknown:
            raise PriceError(f"{source}: unknown field(s) {', '.join(unknown)}; expected {FIELDS}")
        gpu = doc.get("gpuHour")
        if isinstance(gpu, (int, float, str)) and not isinstance(gpu, bool):
            gpu = {DEFAULT_PRODUCT: gpu}
        if gpu is not None and not isinstance(gpu, Mapping):
            raise PriceError(f"{source}: gpuHour must be a price or a mapping of GPU product to price")
        prices = {str(k): _price(v, f"{source}: gpuHour.{k}") for k, v in (gpu or {}).items()}
        currency = doc.get("currency") or ""
        if not isinstance(currency, str):
            raise PriceError(f"{source}: currency must be a string such as USD")
        return cls(currency=currency, gpu_hour=prices, source=source,
                   cpu_hour=_optional_price(doc.get("cpuHour"), f"{source}: cpuHour"),
                   memory_gib_hour=_optional_price(doc.get("memoryGiBHour"), f"{source}: memoryGiBHour"),
                   open_cost=_flag(doc.get("openCost"), f"{source}: openCost"),
                   open_cost_selector=_selector(doc.get("openCostSelector", OPENCOST_SELECTOR), source))  # fmt: skip

    @classmethod
    def load(cls, path: str | Path | None) -> Prices:
        """The price table in ``path`` (YAML or JSON); no path: no prices."""
        if not path:
            return cls()
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise PriceError(f"price file {path}: {exc.strerror or exc}") from exc
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PriceError(f"price file {path}: not YAML or JSON ({exc})") from exc
        return cls.parse(doc, f"price file {path}")

    @property
    def configured(self) -> bool:
        """A price is known: in the table, or OpenCost's for some node."""
        return bool(self.gpu_hour) or self.cpu_hour is not None or self.memory_gib_hour is not None or bool(self.nodes)

    def unconfigured(self, purpose: str = "") -> str:
        """What a cost says when nothing is :attr:`configured` (``purpose``: " to see ...")."""
        if not self.open_cost:
            return f"{NO_PRICE}{purpose}"
        why = self.open_cost_note or "OpenCost has no node prices in Prometheus (node_cpu_hourly_cost...)"
        return f"{NO_PRICE}{purpose}; openCost is on, but {why}"

    def gpu_price(self, product: str | None) -> float | None:
        if product and product in self.gpu_hour:
            return self.gpu_hour[product]
        return self.gpu_hour.get(DEFAULT_PRODUCT)

    def rates(self, reserved: Reserved) -> tuple[float | None, float | None, float | None]:
        """(per GPU, per CPU, per GiB) hourly for ``reserved``: OpenCost's for its node where it
        has that price, else the table's."""
        node = self.nodes.get(reserved.node) if reserved.node else None
        gpu, cpu, memory = self.gpu_price(reserved.gpu_product), self.cpu_hour, self.memory_gib_hour
        if node is None:
            return gpu, cpu, memory
        return _over(node.gpu_hour, gpu), _over(node.cpu_hour, cpu), _over(node.memory_gib_hour, memory)

    def from_open_cost(self, reserved: Reserved) -> bool:
        """Whether OpenCost prices ``reserved``'s node."""
        return bool(reserved.node) and reserved.node in self.nodes

    def missing(self, reserved: Reserved) -> list[str]:
        """The prices ``reserved`` needs that are not configured, named as in the price file."""
        gpu, cpu, memory = self.rates(reserved)
        missing = []
        if reserved.gpus and gpu is None:
            product = reserved.gpu_product or "an unlabelled node"
            missing.append(f"gpuHour.{DEFAULT_PRODUCT} (or gpuHour.{product})")
        if reserved.cpus and cpu is None:
            missing.append("cpuHour")
        if reserved.memory_gib and memory is None:
            missing.append("memoryGiBHour")
        return missing

    def missing_from(self, nodes: Iterable[str | None] = ()) -> str:
        """Where a missing price was looked for, for messages: the table, and with openCost, OpenCost
        for ``nodes`` (those of the pods it was missing for)."""
        where = self.source or "the price table"
        if not self.open_cost:
            return where
        if self.open_cost_note:
            return f"{where} ({self.open_cost_note})"
        named = sorted({n for n in nodes if n})
        return f"{where} (and OpenCost has no prices for node {', '.join(named) or '(none recorded)'})"

    def hourly(self, reserved: Reserved) -> float:
        """What ``reserved`` costs per hour (a missing price counts as 0: see :meth:`missing`)."""
        gpu, cpu, memory = self.rates(reserved)
        return reserved.gpus * (gpu or 0.0) + reserved.cpus * (cpu or 0.0) + reserved.memory_gib * (memory or 0.0)


def _over(open_cost: float | None, table: float | None) -> float | None:
    """OpenCost's price where it has one; a 0 (what OpenCost exports for GPUs it cannot price) only
    where the table has none."""
    if open_cost is None or (open_cost == 0 and table is not None):
        return table
    return open_cost


_LOADED: dict[str, tuple[float, Prices]] = {}  # path -> (mtime, prices) last read well


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
        prices = Prices.load(path)
    except PriceError as exc:
        if known is None:
            raise
        log.warning("%s; keeping the prices read before", exc)
        _LOADED[path] = (mtime, known[1])
        return known[1]
    _LOADED[path] = (mtime, prices)
    return prices


def _selector(value: Any, source: str) -> str:
    if not isinstance(value, str):
        raise PriceError(f'{source}: openCostSelector must be a string of label matchers such as job="opencost"')
    try:
        return labelmatchers.check(value, f"{source}: openCostSelector")
    except ValueError as exc:
        raise PriceError(str(exc)) from None


def _price(value: Any, where: str) -> float:
    """A price: a number, or a string of one (helm --set writes "2.5" as a string), 0 or more."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number < 0:
        raise PriceError(f"{where}: {value!r} is not a price (a number, 0 or more)")
    return number


def _optional_price(value: Any, where: str) -> float | None:
    return None if value is None else _price(value, where)


def _flag(value: Any, where: str) -> bool:
    """A yes/no field: absent is false; true or false (or the string of one, as helm --set-string writes)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise PriceError(f"{where} must be true or false, not {value!r}")


@dataclass(frozen=True)
class Reserved:
    """What one pod holds while it runs, and where (its node: OpenCost prices per node)."""

    gpus: int = 0
    cpus: float = 0.0
    memory_gib: float = 0.0
    gpu_product: str | None = None
    node: str | None = None


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
    disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                    for c in status.get("conditions") or [])  # fmt: skip
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
        attempt.update(node=node, gpus=reserved.gpus, cpu=round(reserved.cpus, 3),
                       memoryGiB=round(reserved.memory_gib, 3), startTime=start, outcome=_outcome(pod))  # fmt: skip
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
    return Reserved(int(attempt.get("gpus") or 0), float(attempt.get("cpu") or 0),
                    float(attempt.get("memoryGiB") or 0), attempt.get("gpuProduct"), attempt.get("node"))  # fmt: skip


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
    result.update(currency=prices.currency or None, total=round(total, 6),
                  wastedShare=round(wasted / total, 4) if total > 0 else 0.0,
                  summary=f"{total:.2f} {prices.currency}".strip())  # fmt: skip
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
        (parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or []
         if c.get("type") == "Failed" and c.get("status") == "True"), None)  # fmt: skip
    spec = job.get("spec") or {}
    reserved = reserved_by(spec.get("template") or {})
    if start is None or end is None or prices.missing(reserved):
        return None
    pods = int(spec.get("parallelism") or 1)
    return max(0.0, (end - start).total_seconds()) / 3600 * prices.hourly(reserved) * pods
