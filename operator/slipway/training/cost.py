"""A TrainingRun's cost: status.cost from the pods seen and the prices (the price file, OpenCost's
with openCost), as its attempt ledger counts it (slipway.training.attempts), and a finished run's
cost logged on its MLflow run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from slipway import cost, kube, opencost
from slipway.mlflow import MlflowClient
from slipway.mlflow.tags import COST_CURRENCY
from slipway.reconcile import Context
from slipway.status.conditions import parse_time
from slipway.training import attempts as ledger
from slipway.training.mlflowrun import RunSeen


def status_cost(ctx: Context, pods: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """status.cost: the attempts recorded so far brought up to date from the pods seen now, priced
    (slipway.training.attempts), each for its node (OpenCost's prices with openCost,
    slipway.opencost). The price file is read (slipway.cost.prices_of), and the nodes only when a
    GPU's price depends on its product, once per pod."""
    recorded = ctx.status.get("cost") or {}
    attempts = recorded.get("attempts") or []
    prices = opencost.with_node_prices(
        cost.prices_of(ctx.config.prices_file), ctx.prometheus, ctx.config.http_timeout_seconds
    )
    products: dict[str, str] = {}
    if prices.configured and cost.needs_products(prices):
        known = {a.get("pod") for a in attempts if a.get("gpuProduct") is not None}
        unknown = [
            p
            for p in pods
            if p["metadata"]["name"] not in known and (p.get("spec") or {}).get("nodeName") and cost.reserved_by(p).gpus
        ]
        if unknown:
            products = kube.gpu_products(ctx.kube)
            products.update({p["spec"]["nodeName"]: "" for p in unknown if p["spec"]["nodeName"] not in products})
    attempts = ledger.record_attempts(attempts, pods, now, products)
    present = [p["metadata"]["name"] for p in pods]
    return ledger.training_cost(attempts, prices, now, recorded.get("folded"), present)


COST_METRICS = {
    "slipway.cost.total": "total",
    "slipway.cost.gpuHours": "gpuHours",
    "slipway.cost.wastedShare": "wastedShare",
}


def log_cost(client: MlflowClient, run: RunSeen, spent: dict[str, Any], completion: str | None) -> None:
    """A finished run's cost on its MLflow run, as metrics (and the currency as a tag), once: at
    the completion time as timestamp, so a pass that runs again logs the same sample (MLflow keeps
    one per key, step, timestamp and value) and one whose values MLflow already has logs nothing."""
    values = {key: float(spent[field]) for key, field in COST_METRICS.items() if spent.get(field) is not None}
    logged = {k: m.value for k, m in run.metrics.items() if k in COST_METRICS}
    if not values or all(logged.get(k) == v for k, v in values.items()):
        return
    when = parse_time(completion) or datetime.now(UTC)
    stamp = int(when.timestamp() * 1000)
    tags = {COST_CURRENCY.name: spent["currency"]} if spent.get("currency") else None
    client.log_batch(run.run_id, metrics=[(k, v, 0, stamp) for k, v in values.items()], tags=tags)
