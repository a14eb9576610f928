"""MLflow registry updates an InferenceDeployment decided (alias moves, version tags) and their fate:
pending while MLflow cannot answer (retried every few seconds), refused when MLflow answers no
(4xx: a reserved alias, a deleted version, a permission MLflow's auth denies). A refused update is
parked in ``status.refusedRegistryUpdates`` with MLflow's answer, and the condition RegistrySynced
names it; it is tried again when the spec changes (a new generation) or after
``RETRY_REFUSED_SECONDS``. Nothing here blocks a rollout. An alias move is written only while it is
the latest decision for its alias and what status still holds for it: a newer decision for the same
alias drops the older ones, pending or parked, and a stored move is checked again before each try
(:func:`sift`). Pure functions over status dicts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from slipway.clock import rfc3339
from slipway.status.conditions import Cond, parse_time

CONDITION = "RegistrySynced"
REFUSED = "RegistryUpdateRefused"
RETRY_REFUSED_SECONDS = 600.0
MAX_REFUSED = 20  # the newest kept: status stays small whatever MLflow answers
MAX_ERROR = 1000  # characters of MLflow's answer kept
REFUSAL_FIELDS = ("error", "refusedTime", "refusedGeneration")


def update_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The update itself, without what its refusal added."""
    return {k: v for k, v in entry.items() if k not in REFUSAL_FIELDS}


def due_again(
    status: Mapping[str, Any], generation: int | None, now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(refused updates still parked, updates to try again): a new generation since the refusal, or
    ``RETRY_REFUSED_SECONDS`` passed."""
    parked, retried = [], []
    for entry in status.get("refusedRegistryUpdates") or []:
        when = parse_time(entry.get("refusedTime"))
        stale = when is None or (now - when).total_seconds() >= RETRY_REFUSED_SECONDS
        if stale or entry.get("refusedGeneration") != generation:
            retried.append(update_of(entry))
        else:
            parked.append(dict(entry))
    return parked, retried


def superseded(entry: Mapping[str, Any], decided: list[dict[str, Any]]) -> bool:
    """An alias move that a newer decision (in ``decided``) for the same alias of the same model replaces."""
    newer = {(u.get("model"), u.get("alias")) for u in decided if u.get("action") == "SetAlias"}
    return entry.get("action") == "SetAlias" and (entry.get("model"), entry.get("alias")) in newer


def wanted(entry: Mapping[str, Any], alias: str, target: tuple[str, str] | None) -> bool:
    """A stored update status still wants written: any tag; an alias move only of spec.rollout.promoteAlias
    to the (model, version) status holds for it now (``target``; None: not known, kept)."""
    if entry.get("action") != "SetAlias":
        return True
    if entry.get("alias") != alias:
        return False
    return target is None or (str(entry.get("model")), str(entry.get("version"))) == target


def sift(
    stored: list[dict[str, Any]],
    parked: list[dict[str, Any]],
    decided: list[dict[str, Any]],
    alias: str,
    target: tuple[str, str] | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(stored updates still to write, parked ones still kept, the dropped ones): an alias move leaves
    when this pass decides a newer one for its alias, or when status no longer wants it, so that a
    move refused or delayed once never lands after the decisions that followed it."""
    kept: list[dict[str, Any]] = []
    still_parked: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for entries, into in ((stored, kept), (parked, still_parked)):
        for entry in entries:
            gone = superseded(entry, decided) or not wanted(entry, alias, target)
            (dropped if gone else into).append(entry)
    return kept, still_parked, dropped


def refused(update: Mapping[str, Any], answer: str, generation: int | None, now: datetime) -> dict[str, Any]:
    """The status entry of an update MLflow refused."""
    error = answer if len(answer) <= MAX_ERROR else answer[: MAX_ERROR - 1] + "…"
    return {**update_of(update), "error": error, "refusedTime": rfc3339(now), "refusedGeneration": generation}


def park(parked: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``parked`` with ``entry`` (replacing an earlier refusal of the same update), the newest kept."""
    same = update_of(entry)
    kept = [p for p in parked if update_of(p) != same]
    return [*kept, entry][-MAX_REFUSED:]


def describe(update: Mapping[str, Any]) -> str:
    """``alias production of digits -> version 3``, ``tag slipway.dev/rolled-back=... on digits version 3``."""
    where = f"{update.get('model')} version {update.get('version')}"
    if update.get("action") == "SetAlias":
        return f"alias {update.get('alias')} of {update.get('model')} -> version {update.get('version')}"
    return f"tag {update.get('key')}={update.get('value')} on {where}"


def condition(pending: list[dict[str, Any]], parked: list[dict[str, Any]]) -> Cond:
    """RegistrySynced: True when MLflow has every update decided; else why not."""
    if parked:
        first = parked[0]
        more = f" (and {len(parked) - 1} more)" if len(parked) > 1 else ""
        return Cond(
            CONDITION,
            "False",
            REFUSED,
            f"MLflow refused {describe(first)}{more}: {first.get('error')}; see status.refusedRegistryUpdates. "
            "Slipway tries again when the spec changes or every 10 minutes; the rollout goes on",
        )
    if pending:
        waiting = f"{len(pending)} MLflow update(s) waiting for MLflow to answer (status.pendingRegistryUpdates)"
        return Cond(CONDITION, "False", "Pending", waiting)
    return Cond(CONDITION, "True", "Synced", "MLflow has every alias move and tag Slipway decided")


def next_retry(parked: list[dict[str, Any]], now: datetime) -> float:
    """Seconds until the first parked update is due again."""
    waits = []
    for entry in parked:
        when = parse_time(entry.get("refusedTime"))
        waits.append(0.0 if when is None else RETRY_REFUSED_SECONDS - (now - when).total_seconds())
    return max(1.0, min(waits))
