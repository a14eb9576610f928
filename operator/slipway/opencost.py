"""OpenCost's per-node prices (price file ``openCost: true``), read from the operator's Prometheus.

OpenCost exports, per node (label ``node``, the Kubernetes node name), what the node's resources
cost an hour: ``node_gpu_hourly_cost`` (per GPU), ``node_cpu_hourly_cost`` (per vCPU) and
``node_ram_hourly_cost`` (per GiB). One query reads all three, at most once a minute per
Prometheus (:data:`TTL_SECONDS` after its last answer, a monotonic clock: slipway.singleflight,
reading in a thread of its own); the passes in between use that answer. A
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
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

from slipway.prices import OPENCOST_SELECTOR, NodePrices, Prices
from slipway.prometheus import PrometheusError, Sample
from slipway.singleflight import SingleFlight

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


Key = tuple[str, str]  # (Prometheus URL, selector)
_FAILING: set[Key] = set()  # a failure was logged, and no answer came since
_LAST_GOOD: dict[Key, dict[str, NodePrices]] = {}  # the node prices last answered
_LOCK = threading.Lock()
# Each Prometheus's last query, in a thread of its own: a pass waits for it at most its timeout.
_READS: SingleFlight[Key, dict[str, NodePrices]] = SingleFlight(
    TTL_SECONDS, TTL_SECONDS, on_drop=_FAILING.discard, read_in_thread=True
)


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
    try:
        nodes = _READS.get(key, lambda: _ask(client, key), timeout, clock)
    except FutureTimeout:
        problem = f"{_where(client)} did not answer within {timeout:g}s"
    except PrometheusError as exc:
        problem = str(exc)
    else:
        assert nodes is not None  # a read answers node prices or raises
        return nodes, None
    kept = _LAST_GOOD.get(key)
    _warn_once(key, problem, kept is not None)
    return (kept, None) if kept is not None else ({}, problem)


def _ask(client: Querier, key: Key) -> dict[str, NodePrices]:
    """The query (in the cache's thread, so that a pass waits for it only as long as it wants)."""
    try:
        nodes = parse(client.query(query(key[1])))
    except PrometheusError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever breaks, the table prices: a pass never fails on it
        raise PrometheusError(f"{_where(client)}: {type(exc).__name__} reading OpenCost") from None
    with _LOCK:
        recovered = key in _FAILING
        _FAILING.discard(key)
        _LAST_GOOD[key] = nodes
    if recovered:
        log.info("OpenCost's node prices read again from %s (%d nodes)", _where(client), len(nodes))
    return nodes


def _warn_once(key: Key, problem: str, kept: bool) -> None:
    with _LOCK:
        if key in _FAILING:
            return
        _FAILING.add(key)
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
    _READS.clear()
    with _LOCK:
        _FAILING.clear()
        _LAST_GOOD.clear()
