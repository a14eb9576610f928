"""What a rollout writes to MLflow and to status.lastRollback: the promote alias's moves, the rollback
record and its tag on the version, the serving cost tags of a promoted version; and which version
the promote alias names once a plan is carried out (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from slipway.clock import rfc3339
from slipway.inference.rollbacks import RollbackReason
from slipway.inference.rollout.base import Desired, Observed, Plan
from slipway.inference.rollout.rollbacktag import ROLLBACK_TAG, render
from slipway.mlflow.tags import COST_CURRENCY, COST_PER_1K_REQUESTS, COST_PER_MILLION_TOKENS, COST_SERVING_PER_HOUR

__all__ = ["ROLLBACK_TAG"]


def alias_target(obs: Observed, result: Plan) -> tuple[str, str] | None:
    """(model, version) the promote alias names once ``result`` is carried out: the promoted version
    while it bakes or serves; status.previousStable while a promotion is in flight or once one (or
    a bake) is reverted; else what the stable track serves. None: nothing known (no stable yet)."""
    previous = result.status.get("previousStable") or obs.status.get("previousStable") or {}
    if result.revert_stable or result.phase == "Promoting":
        model, version = previous.get("modelName"), previous.get("modelVersion")
    elif result.phase in ("Promoted", "Baking", "Failed") and result.stable is not None:
        model, version = result.stable.model, result.stable.version
    elif obs.stable is not None:
        model, version = obs.stable.model, obs.stable.version
    else:
        return None
    return (str(model), str(version)) if model and version else None


def new_rollback(before: Mapping[str, Any], result: Plan) -> dict[str, Any] | None:
    """The rollback ``result`` records, if it is a new one (not the stored record, nor its retry mark,
    nor one read back from a version's rollback tag: that rollback was counted when it happened)."""
    record = result.status.get("lastRollback")
    if not record or record.get("retried") or record.get("tag"):
        return None
    stored = before.get("lastRollback") or {}
    same = all(record.get(k) == stored.get(k) for k in ("revision", "reason", "time"))
    return None if same else dict(record)


def set_alias(desired: Desired, alias: str) -> dict[str, Any]:
    return {"action": "SetAlias", "model": desired.model, "version": desired.version, "alias": alias}


def rollback_record(
    desired: Desired, reason: RollbackReason, now: datetime, metric: str | None, value: float | None
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "reason": reason,
        "modelName": desired.model,
        "modelVersion": desired.version,
        "revision": desired.revision,
        "time": rfc3339(now),
    }
    if metric is not None:
        record["metric"] = metric
    if value is not None and math.isfinite(value):
        record["value"] = float(f"{value:.6g}")
    return record


def rollback_tag(desired: Desired, record: Mapping[str, Any], deployment: str) -> dict[str, Any]:
    """The version's rollback tag, naming ``deployment`` (namespace/name), the one whose restore honours
    it (slipway.inference.rollout.rollbacktag)."""
    return {
        "action": "SetTag",
        "model": desired.model,
        "version": desired.version,
        "key": ROLLBACK_TAG,
        "value": render(deployment, record),
    }


COST_TAGS = {
    "perHour": COST_SERVING_PER_HOUR.name,
    "per1kRequests": COST_PER_1K_REQUESTS.name,
    "perMillionTokens": COST_PER_MILLION_TOKENS.name,
    "currency": COST_CURRENCY.name,
}


def cost_tags(desired: Desired, spent: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The canary's serving cost (its last analysis) as tags on the promoted version: the registry
    shows what each production version cost to serve."""
    tag = {"action": "SetTag", "model": desired.model, "version": desired.version}
    return [
        {**tag, "key": key, "value": str(spent[name])} for name, key in COST_TAGS.items() if spent.get(name) is not None
    ]
