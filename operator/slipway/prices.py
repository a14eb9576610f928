"""The price file: the cluster's price table, parsed (pure; reading and re-reading the file is
:func:`slipway.cost.prices_of`).

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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slipway import labelmatchers

DEFAULT_PRODUCT = "default"


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
        return cls(
            currency=currency,
            gpu_hour=prices,
            source=source,
            cpu_hour=_optional_price(doc.get("cpuHour"), f"{source}: cpuHour"),
            memory_gib_hour=_optional_price(doc.get("memoryGiBHour"), f"{source}: memoryGiBHour"),
            open_cost=_flag(doc.get("openCost"), f"{source}: openCost"),
            open_cost_selector=_selector(doc.get("openCostSelector", OPENCOST_SELECTOR), source),
        )

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
