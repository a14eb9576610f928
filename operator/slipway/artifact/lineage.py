"""A ModelArtifact's lineage cost (pure): what its version cost to make, for status.cost and for
tags on the version (``slipway.dev/cost-*``), from the prices and what the pass read of its TrainingRun
and its step Jobs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slipway import cost
from slipway.artifact.model import ModelArtifactSpec
from slipway.artifact.observed import QUANTIZE, VALIDATE, CostSeen
from slipway.mlflow.tags import COST_CURRENCY, COST_LINEAGE, COST_QUANTIZATION, COST_TRAINING, COST_VALIDATION

# status.cost's figures -> the version's tags that record them
COST_TAGS = {
    "training": COST_TRAINING,
    "quantization": COST_QUANTIZATION,
    "validation": COST_VALIDATION,
    "total": COST_LINEAGE,
}


def lineage_cost(
    spec: ModelArtifactSpec, status: Mapping[str, Any], seen: CostSeen, version_tags: Mapping[str, str]
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(status.cost, the tags to write on the version): its TrainingRun (every attempt), its quantize
    and validate Jobs (a Job gone, deleted or past its TTL: what status recorded), in the prices'
    currency; tags MLflow already holds with these values are not written again. (None, {}) without
    a price table."""
    prices = seen.prices
    if not prices.configured:
        return None, {}
    parts: dict[str, float | None] = {}
    if spec.source.training_run_ref is not None:
        run = seen.training_run or {}
        parts["training"] = ((run.get("status") or {}).get("cost") or {}).get("total")
    recorded = status.get("cost") or {}
    for step, field in ((QUANTIZE, "quantization"), (VALIDATE, "validation")):
        job = seen.jobs.get(step)
        if job is not None:
            parts[field] = cost.job_cost(job, prices, seen.now)
        elif recorded.get(field) is not None:
            parts[field] = float(recorded[field])  # its Job is gone (deleted, TTL): what was recorded
    known = {k: round(v, 6) for k, v in parts.items() if v is not None}
    out: dict[str, Any] = {"currency": prices.currency or None, **known, "total": round(sum(known.values()), 6)}
    if len(known) < len(parts):
        out["message"] = f"not counted (no price or not finished): {', '.join(sorted(set(parts) - set(known)))}"
    tags = {COST_TAGS[k].name: str(v) for k, v in out.items() if k in (*parts, "total") and v is not None}
    if prices.currency:
        tags[COST_CURRENCY.name] = prices.currency
    return out, {key: value for key, value in tags.items() if version_tags.get(key) != value}
