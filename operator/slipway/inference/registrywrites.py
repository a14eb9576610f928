"""The MLflow registry updates a pass carries out (alias moves, version tags): the stored ones
status still wants, then the pass's own decisions, written once they are on record. What MLflow
cannot take now stays pending; what it refuses is parked with its answer (``slipway.inference.registry``
decides, pure; this module asks MLflow and tells the object's Events)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from slipway import metrics
from slipway.inference import registry
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.base import Observed, Plan
from slipway.inference.rollout.records import alias_target
from slipway.mlflow import MlflowClient
from slipway.reconcile import Context

Updates = list[dict[str, Any]]


def to_write(
    ctx: Context, spec: InferenceDeploymentSpec, observed: Observed, decision: Plan
) -> tuple[Updates, Updates]:
    """(the MLflow updates to write, in order, refused ones still parked): stored ones (pending,
    and parked ones due again) that status still wants, then this pass's decisions. An alias move
    a newer decision replaces, or that no longer names what status holds for the alias, is dropped
    (a move refused once never lands after the decisions that followed it)."""
    generation = ctx.body["metadata"].get("generation")
    parked, retried = registry.due_again(ctx.status, generation, datetime.now(UTC))
    stored = list(ctx.status.get("pendingRegistryUpdates") or []) + retried
    target = alias_target(observed, decision)
    stored, parked, dropped = registry.sift(stored, parked, decision.registry, spec.rollout.promote_alias, target)
    for update in dropped:
        ctx.event(
            "Normal",
            "RegistryUpdateDropped",
            f"{registry.describe(update)} is no longer written: "
            "a newer decision replaced it or status no longer holds it",
        )
    return stored + [u for u in decision.registry if u not in stored], parked


def carry_out(ctx: Context, client: MlflowClient, pending: Updates, parked: Updates) -> tuple[Updates, Updates]:
    """MLflow alias moves and tags, once they are on record: (still pending, refused). What MLflow
    cannot take now stays pending and is retried; what it refuses (4xx) is parked with its answer
    and a Warning, and never blocks what comes after it."""
    done, pending, refused = client.apply_updates(pending) if pending else ([], [], [])
    for update in done:
        if update["action"] == "SetAlias":
            ctx.event(
                "Normal",
                "AliasMoved",
                f"MLflow alias {update['alias']} of {update['model']} now points at version {update['version']}",
            )
            metrics.count(metrics.PROMOTIONS, ctx.namespace, ctx.name)
    generation = ctx.body["metadata"].get("generation")
    for update, answer in refused:
        entry = registry.refused(update, answer, generation, datetime.now(UTC))
        retry = f"retried when the spec changes or in {registry.RETRY_REFUSED_SECONDS / 60:g} min"
        ctx.event("Warning", registry.REFUSED, f"{registry.describe(entry)}: {entry['error']}; {retry}")
        parked = registry.park(parked, entry)
    return pending, parked
