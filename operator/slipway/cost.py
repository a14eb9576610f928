"""What things cost: the price file, read from disk (:func:`load`, and :func:`prices_of`, which
reads it again when it changes), and what pods and Jobs reserve and cost under a price table
(:func:`reserved_by`, :func:`pod_per_hour`, :func:`job_cost`: pure).

The price table is :mod:`slipway.prices` (the file's format, parsed).

Costs are reservation-based: a pod costs what it asks for (GPUs from its limits or requests, CPU
and memory from its requests) for as long as it holds it, from its start (``status.startTime``)
to the end of its last container, whether it did useful work or not. Shared GPUs are not split.
A TrainingRun's attempts, priced this way, are its own ledger (``slipway.training.attempts``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils.quantity import parse_quantity

from slipway.prices import DEFAULT_PRODUCT, PriceError, Prices, Reserved
from slipway.status.conditions import parse_time

log = logging.getLogger(__name__)

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
