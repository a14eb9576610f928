"""OpenCost's per-node prices (price file ``openCost: true``), read from the operator's Prometheus.

OpenCost exports, per node (label ``node``, the Kubernetes node name), what the node's resources
cost an hour: ``node_gpu_hourly_cost`` (per GPU), ``node_cpu_hourly_cost`` (per vCPU) and
``node_ram_hourly_cost`` (per GiB). One query reads all three, at most once a minute per
Prometheus (:data:`TTL_SECONDS`, a monotonic clock); the passes in between use that answer. A
Prometheus that fails or does not answer within the operator's HTTP timeout is logged once (until
it answers again) and the node prices last read from it are kept (the table alone when it never
answered): a run's cost is not repriced by an outage. A pass never fails and never waits longer than
the timeout for OpenCost.

Only the series of OpenCost's own scrape target count: the price file's ``openCostSelector``
(default :data:`slipway.prices.OPENCOST_SELECTOR`, ``job="opencost"`` without the ``namespace`` and
``pod`` labels pod discovery gives) is in the query. A pod that exports ``node_gpu_hourly_cost``
itself is scraped under another job (its own ``job`` label is renamed ``exported_job`` unless the
scrape honours labels) and carries its namespace and pod: it prices nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Protocol

from slipway.prices import OPENCOST_SELECTOR, NodePrices, Prices
from slipway.prometheus import PrometheusError, Sample

log = logging.getLogger(__name__)

TTL_SECONDS = 60.0
SERIES = {
    "node_gpu_hourly_cost": "gpu_hour",
    "node_cpu_hourly_cost": "cpu_hour",
    "node_ram_hourly_cost": "memory_gib_hour",
}


def query(selector: str = OPENCOST_SELECTOR) -> str:
    """One query for the three series of OpenCost's scrape target (``selector``, checked label
    matchers); a node may be exported by several OpenCost instances: the dearest."""
    return f'max by (__name__, node) ({{__name__=~"{"|".join(SERIES)}",{selector}}})'


QUERY = query()


class Querier(Protocol):
    """What is asked of Prometheus (:class:`slipway.prometheus.PrometheusClient`)."""

    base_url: str

    def query(self, promql: str) -> list[Sample]: ...


@dataclass
class _Read:
    """The last query of one Prometheus: when it was sent, and its answer once it came."""

    started: float
    answer: Future[dict[str, NodePrices]] = field(default_factory=Future)
    failing: bool = False  # a failure was logged, and no answer came since
    overdue: bool = False  # a pass gave up waiting for it: the others do not wait again


_READS: dict[tuple[str, str], _Read] = {}  # (Prometheus URL, selector) -> its last read
_LAST_GOOD: dict[tuple[str, str], dict[str, NodePrices]] = {}  # (URL, selector) -> the node prices last answered
_LOCK = threading.Lock()


def with_node_prices(
    table: Prices, client: Querier | None, timeout: float, clock: Callable[[], float] = time.monotonic
) -> Prices:
    """``table`` with OpenCost's per-node prices when its price file says ``openCost: true``; the
    table alone (its ``open_cost_note`` saying why) when OpenCost could not be read."""
    if not table.open_cost:
        return table
    if client is None:
        return dataclasses.replace(table, open_cost_note="OpenCost not read: the operator has no --prometheus-url")
    nodes, problem = node_prices(client, timeout, clock, table.open_cost_selector)
    if problem is not None:
        return dataclasses.replace(table, open_cost_note=f"OpenCost not read: {problem}")
    return dataclasses.replace(table, nodes=nodes)


def node_prices(
    client: Querier, timeout: float, clock: Callable[[], float] = time.monotonic, selector: str = OPENCOST_SELECTOR
) -> tuple[Mapping[str, NodePrices], str | None]:
    """(node -> OpenCost's prices, None), or ({}, why) when Prometheus failed or did not answer
    within ``timeout`` seconds. Asks at most once per :data:`TTL_SECONDS` per Prometheus; a query
    still running is waited for (within ``timeout``; not again once a pass gave up on it), never
    sent twice."""
    key = (client.base_url, selector)
    with _LOCK:
        read = _READS.get(key)
        now = clock()
        if read is None or (read.answer.done() and now - read.started >= TTL_SECONDS):
            read = _READS[key] = _Read(now, failing=read is not None and read.failing)
            threading.Thread(target=_ask, args=(client, read, selector), name="opencost", daemon=True).start()
    try:
        return read.answer.result(timeout=0 if read.overdue else timeout), None
    except FutureTimeout:
        read.overdue = True
        problem = f"{_where(client)} did not answer within {timeout:g}s"
    except PrometheusError as exc:
        problem = str(exc)
    kept = _LAST_GOOD.get(key)
    _warn_once(read, problem, kept is not None)
    return (kept, None) if kept is not None else ({}, problem)


def _ask(client: Querier, read: _Read, selector: str) -> None:
    """The query, in a thread of its own (so that a pass waits for it only as long as it wants)."""
    try:
        nodes = parse(client.query(query(selector)))
    except PrometheusError as exc:
        read.answer.set_exception(exc)
    except Exception as exc:  # noqa: BLE001 - whatever breaks, the table prices: a pass never fails on it
        read.answer.set_exception(PrometheusError(f"{_where(client)}: {type(exc).__name__} reading OpenCost"))
    else:
        with _LOCK:
            recovered, read.failing = read.failing, False
            _LAST_GOOD[(client.base_url, selector)] = nodes
        if recovered:
            log.info("OpenCost's node prices read again from %s (%d nodes)", _where(client), len(nodes))
        read.answer.set_result(nodes)


def _warn_once(read: _Read, problem: str, kept: bool) -> None:
    with _LOCK:
        if read.failing:
            return
        read.failing = True
    using = "the node prices last read from it" if kept else "the price table alone"
    log.warning(
        "OpenCost's node prices (price file openCost: true) not read: %s; using %s until it answers "
        "(asked again every %gs)",
        problem,
        using,
        TTL_SECONDS,
    )


def _where(client: Querier) -> str:
    return f"Prometheus at {getattr(client, 'shown_url', None) or client.base_url}"


def parse(samples: list[Sample]) -> dict[str, NodePrices]:
    """node -> its prices, from the samples of :data:`QUERY` (a negative or infinite price is ignored)."""
    prices: dict[str, dict[str, float]] = {}
    for sample in samples:
        node, name = sample.labels.get("node"), SERIES.get(sample.labels.get("__name__", ""))
        if node and name and math.isfinite(sample.value) and sample.value >= 0:
            prices.setdefault(node, {})[name] = sample.value
    return {node: NodePrices(**fields) for node, fields in prices.items()}


def forget() -> None:
    """Drop every cached read (tests)."""
    with _LOCK:
        _READS.clear()
        _LAST_GOOD.clear()
