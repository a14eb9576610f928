"""The next status of an object, typed, as a merge patch and the Events of its transitions (pure).

Status goes through the kind's status model, so what is written is what the CRD describes.
Only what differs from the stored status is in the patch (a settled object's pass writes
nothing); fields that go away are sent as ``null``, nested ones too. Fields the models do not know
(a newer operator's, after a downgrade) are kept in every object the pass does not change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from slipway.models.base import StatusModel
from slipway.status.conditions import READY, STALLED, Cond, get_condition, set_conditions

WARNING_PHASES = {"Failed", "Rejected", "RolledBack"}
Event = tuple[str, str, str]  # (type, reason, message)


@dataclass
class StatusChange:
    """What a pass will write: a merge patch of ``status``, the status after it, and Events."""

    patch: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)


def next_status(
    model: type[StatusModel],
    stored: Mapping[str, Any],
    generation: int | None,
    conditions: Iterable[Cond],
    fields: Mapping[str, Any],
) -> tuple[dict[str, Any], StatusChange]:
    """(the status after the change, the change): ``fields`` by snake_case or camelCase name."""
    names = {f.alias or n: n for n, f in model.model_fields.items()}
    unknown = [k for k in fields if k not in names and k not in model.model_fields]
    if unknown:
        raise ValueError(f"{model.__name__} has no fields {unknown}")
    kept, repairs = repaired(model, stored)
    read = model.model_validate(kept)
    current = read.model_dump()
    merged = set_conditions(kept.get("conditions"), conditions, generation)
    current.update({names.get(k, k): v for k, v in fields.items()})
    current.update(conditions=merged, observed_generation=generation)
    seen = read.to_dict()  # the stored status as this operator's models read it
    new = {k: _keeping_unknown(kept.get(k), seen.get(k), v) for k, v in model.model_validate(current).to_dict().items()}
    known = set(names)
    change = StatusChange()
    change.patch = {k: _with_removals(stored.get(k), v) for k, v in new.items() if stored.get(k) != v}
    change.patch.update({k: None for k in stored if k in known and k not in new})
    if change.patch:
        change.events = repairs + transition_events(stored, new)
    after = {k: v for k, v in {**stored, **new}.items() if k in new or k not in known}
    return after, change


def repair(model: type[StatusModel], stored: Mapping[str, Any]) -> tuple[dict[str, Any], StatusChange]:
    """(the status a pass reads, the change that writes its repair): ``stored`` itself when it
    validates, else what of it does (see :func:`repaired`), the dropped fields sent as ``null``."""
    kept, events = repaired(model, stored)
    change = StatusChange(events=events)
    if events:
        change.patch = {k: v for k, v in kept.items() if stored.get(k) != v}
        change.patch.update({k: None for k in stored if k not in kept})
    return kept, change


REPAIRED = "StatusRepaired"  # the Event's reason: a status field that did not validate was dropped
_REPAIR_ROUNDS = 50


def repaired(model: type[StatusModel], stored: Mapping[str, Any]) -> tuple[dict[str, Any], list[Event]]:
    """(what of ``stored`` validates under ``model``, a Warning Event per field dropped). A status
    edited by hand, or written by an incompatible version, is repaired field by field: a top-level
    field that does not validate is dropped, and of a list (conditions, pendingRegistryUpdates,
    analysis ...) only the items that do not; everything else, durable decisions included
    (lastRollback, previousStable, pendingRegistryUpdates), is kept as it is stored."""
    kept = dict(stored) if isinstance(stored, Mapping) else {}
    events: list[Event] = []
    for _ in range(_REPAIR_ROUNDS):
        try:
            model.model_validate(kept)
            return kept, events
        except ValidationError as exc:
            errors = exc.errors()
        dropped: dict[str, set[int] | None] = {}
        for error in errors:
            loc = error.get("loc") or ()
            if not loc or not isinstance(loc[0], str) or loc[0] not in kept:
                return {}, [*events, ("Warning", REPAIRED, f"status was dropped: {error.get('msg')}")]
            items = kept[loc[0]]
            whole = not (isinstance(items, list) and len(loc) > 1 and isinstance(loc[1], int))
            if whole or dropped.get(loc[0], set()) is None:
                dropped[loc[0]] = None
            else:
                dropped.setdefault(loc[0], set()).add(int(loc[1]))  # type: ignore[union-attr]
            where = loc[0] if whole else f"{loc[0]}[{loc[1]}]"
            if any(f"status.{where} was dropped" in message for _, _, message in events):
                continue
            inner = ".".join(str(part) for part in loc[1 if whole else 2 :])
            events.append(
                (
                    "Warning",
                    REPAIRED,
                    f"status.{where} was dropped: it does not validate"
                    f"{f' at {inner}' if inner else ''} ({error.get('msg')}); the rest of the status is kept",
                )
            )
        for name, indices in dropped.items():
            if indices is None:
                kept.pop(name, None)
            else:
                kept[name] = [item for i, item in enumerate(kept[name]) if i not in indices]
    return {}, [*events, ("Warning", REPAIRED, "status was dropped: it could not be repaired")]


def transition_events(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    """One Event per transition: a new phase (with the Ready message as the why); within a phase,
    a newly Stalled object (a Warning) or a new Ready reason."""
    phase = new.get("phase")
    if phase is not None and old.get("phase") != phase:
        message = (get_condition(new.get("conditions"), READY) or {}).get("message", "")
        return [("Warning" if phase in WARNING_PHASES else "Normal", phase, message)]
    before, after = old.get("conditions"), new.get("conditions")
    stalled = _event_for(get_condition(before, STALLED), get_condition(after, STALLED))
    if stalled and stalled[0] == "Warning":
        return [stalled]
    ready = _event_for(get_condition(before, READY), get_condition(after, READY))
    return [ready] if ready else []


def _event_for(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> Event | None:
    if new is None or (old is not None and old.get("status") == new["status"] and old.get("reason") == new["reason"]):
        return None
    warning = new["type"] == STALLED and new["status"] == "True"
    return ("Warning" if warning else "Normal", new["reason"], new["message"] or f"{new['type']}={new['status']}")


def _keeping_unknown(stored: Any, seen: Any, new: Any) -> Any:
    """``new``; but where it equals ``seen`` (what this operator's models read of ``stored``), ``stored``
    itself, with the fields the models do not know (a newer operator's, after a downgrade): a record
    this operator leaves as it is, is never rewritten without them. An object that changed is written
    as the models describe it (a record replaced by another does not carry the old one's fields);
    the objects in it that did not change keep theirs."""
    if stored is not None and seen == new:
        return stored
    if isinstance(stored, Mapping) and isinstance(seen, Mapping) and isinstance(new, Mapping):
        return {key: _keeping_unknown(stored.get(key), seen.get(key), value) for key, value in new.items()}
    return new


def _with_removals(old: Any, new: Any) -> Any:
    """``new``, plus ``None`` for every key of ``old`` (recursively) that ``new`` no longer has."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    merged = {key: _with_removals(old.get(key), value) for key, value in new.items()}
    merged.update({key: None for key in old if key not in new})
    return merged
