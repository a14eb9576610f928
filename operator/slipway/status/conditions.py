"""Kubernetes-style conditions with kstatus semantics.

``Ready`` is the summary a user waits on (``kubectl wait --for=condition=Ready``);
``Reconciling`` and ``Stalled`` are abnormal-true: present and True only while
work is in flight or stuck, so Argo CD, Flux and kstatus read health without
custom code. Functions here are pure and return new lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from slipway.clock import (
    parse_time,  # noqa: F401 - re-exported: status code reads times from here too
    rfc3339,
)

Status = Literal["True", "False", "Unknown"]

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"


@dataclass(frozen=True)
class Cond:
    """A desired condition, before timestamps."""

    type: str
    status: Status
    reason: str
    message: str = ""


def set_conditions(
    current: Iterable[Mapping[str, Any]] | None,
    desired: Iterable[Cond],
    generation: int | None,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """Merge desired conditions into the current list.

    ``lastTransitionTime`` moves only when a condition's status changes, so a
    status that is already right produces an identical list (no write churn).
    Conditions not mentioned in ``desired`` are kept as they are.
    """
    now = now or rfc3339()
    result = [dict(c) for c in (current or [])]
    by_type = {c["type"]: c for c in result}
    for want in desired:
        old = by_type.get(want.type)
        new = {
            "type": want.type,
            "status": want.status,
            "reason": want.reason,
            "message": want.message,
            "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == want.status else now,
            "observedGeneration": generation,
        }
        if old is None:
            result.append(new)
            by_type[want.type] = new
        else:
            old.clear()
            old.update(new)
    return result


def get_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> bool:
    c = get_condition(conditions, type_)
    return bool(c and c.get("status") == "True")


def ready(reason: str, message: str = "") -> list[Cond]:
    """All done and healthy."""
    return [
        Cond(READY, "True", reason, message),
        Cond(RECONCILING, "False", reason, ""),
        Cond(STALLED, "False", reason, ""),
    ]


def reconciling(reason: str, message: str) -> list[Cond]:
    """Work in flight: not ready yet, not stuck."""
    return [
        Cond(READY, "False", reason, message),
        Cond(RECONCILING, "True", reason, message),
        Cond(STALLED, "False", reason, ""),
    ]


def held(reason: str, message: str) -> list[Cond]:
    """Held on purpose by a person (suspended, paused): not ready, and neither work in flight nor
    stuck (Argo CD's health check reads it as Suspended)."""
    return [
        Cond(READY, "False", reason, message),
        Cond(RECONCILING, "False", reason, ""),
        Cond(STALLED, "False", reason, ""),
    ]


def stalled(reason: str, message: str) -> list[Cond]:
    """Stuck until a person changes something: the message says what."""
    return [
        Cond(READY, "False", reason, message),
        Cond(RECONCILING, "False", reason, ""),
        Cond(STALLED, "True", reason, message),
    ]


def new_generation(body: Mapping[str, Any]) -> bool:
    """The spec changed (or the object is new) since status was last computed."""
    return (body.get("status") or {}).get("observedGeneration") != body["metadata"].get("generation")


def settled(body: Mapping[str, Any], phases: Iterable[str]) -> bool:
    """In one of the final ``phases`` for the current generation, with no pass half done (a pass
    that announced a new generation as Reconciling and then crashed has not settled it)."""
    status = body.get("status") or {}
    in_flight = (get_condition(status.get("conditions"), RECONCILING) or {}).get("status") == "True"
    return status.get("phase") in set(phases) and not new_generation(body) and not in_flight


def bounds_text(minimum: float | None, maximum: float | None, fmt: Callable[[float], str]) -> list[str]:
    """Absolute bounds as people read them: ``>= 0.9``, ``<= 0.5``."""
    return [f"{op} {fmt(v)}" for op, v in ((">=", minimum), ("<=", maximum)) if v is not None]
