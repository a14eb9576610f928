"""What ``kubectl slipway`` decides from the objects' dicts (pure: no I/O):

- :func:`wait_target` and :func:`wait_state`: what a ``wait`` waits for, whether it is done, or
  the object is Stalled at its generation;
- :func:`action_refusal`: why ``promote``, ``abort`` or ``retry`` cannot apply in the current phase.

The kinds and references are :mod:`slipway.cli.refs`, the text :mod:`slipway.cli.render`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slipway.cli.refs import CANARY_PHASES, Kind, Obj, UsageError, lookup, name_of
from slipway.cli.render import fmt, ready_line
from slipway.status.conditions import get_condition

# -- wait ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitState:
    done: bool
    stalled: str | None  # the Stalled condition's reason and message, when it holds at this generation
    progress: tuple[Any, ...]  # what a progress line reports; a new line when it changes
    line: str


def _at_generation(obj: Obj, cond: Mapping[str, Any] | None) -> bool:
    generation = lookup(obj, "metadata", "generation")
    observed = (cond or {}).get("observedGeneration", lookup(obj, "status", "observedGeneration"))
    return generation is None or observed == generation


def wait_state(obj: Obj, target: str) -> WaitState:
    """``target`` is ``Ready`` (the Ready condition True at the object's generation) or a phase
    (status.phase, with status.observedGeneration at the generation)."""
    status = obj.get("status") or {}
    conditions = status.get("conditions")
    ready = get_condition(conditions, "Ready")
    if target == "Ready":
        done = ready is not None and ready.get("status") == "True" and _at_generation(obj, ready)
    else:
        done = status.get("phase") == target and _at_generation(obj, None)
    stalled_cond = get_condition(conditions, "Stalled")
    stalled = None
    if stalled_cond is not None and stalled_cond.get("status") == "True" and _at_generation(obj, stalled_cond):
        stalled = f"{stalled_cond.get('reason')}: {stalled_cond.get('message')}"
    phase = status.get("phase") or "-"
    progress = (phase, (ready or {}).get("status"), (ready or {}).get("reason"), status.get("currentStep"))
    line = f"{phase}; Ready {ready_line(obj)}"
    return WaitState(done, stalled, progress, line)


def wait_target(kind: Kind, text: str) -> str:
    """``Ready``, ``condition=Ready`` (as kubectl wait writes it), or one of the kind's phases."""
    word = text.removeprefix("condition=")
    if word.lower() == "ready":
        return "Ready"
    for phase in kind.phases:
        if phase.lower() == word.lower():
            return phase
    raise UsageError(f"--for={text}: a {kind.kind} waits for Ready or a phase: {', '.join(kind.phases)}")


# -- manual control -----------------------------------------------------------------------------------

# The annotations the operator reads (slipway.inference.rollout.base): written out so the plugin
# needs no pydantic; a unit test holds them equal.
ACTIONS = {"promote": "slipway.dev/promote", "abort": "slipway.dev/abort", "retry": "slipway.dev/retry"}


def action_refusal(action: str, obj: Obj) -> str | None:
    """Why ``promote``, ``abort`` or ``retry`` means nothing in the object's current phase (None: it applies).

    As the operator reads the annotations (slipway.inference.rollout): promote skips the remaining steps of
    a canary in flight; abort rolls a canary back, or reverts a promotion or a bake; retry re-rolls the
    revision that was rolled back, while the spec still asks for it."""
    status = obj.get("status") or {}
    phase = status.get("phase")
    where = f"InferenceDeployment {lookup(obj, 'metadata', 'namespace')}/{name_of(obj)}"
    canary = status.get("canary") or {}
    in_flight = phase in CANARY_PHASES and bool(canary.get("revision"))
    rollback = status.get("lastRollback") or {}
    stable = status.get("stable") or {}
    serving = f"serving {stable.get('modelName') or '?'} v{fmt(stable.get('modelVersion'))}"
    rolled = f"{rollback.get('modelName') or '?'} v{fmt(rollback.get('modelVersion'))}"
    if action == "retry":
        if not rollback:
            return f"{where}: nothing was rolled back, so there is nothing to retry (it is {phase or 'new'})"
        if rollback.get("retried"):
            return f"{where}: the rollback of {rolled} was already retried; publish a new version or change the spec"
        if phase != "RolledBack":
            return (
                f"{where} is {phase}: its last rollback ({rolled}) is not what the spec asks for now, "
                "so there is nothing to retry"
            )
        return None
    if action == "abort" and phase in ("Promoting", "Baking"):
        return None
    if in_flight:
        return None
    if phase == "Promoting":
        return f"{where} is already Promoting {canary.get('modelName') or '?'} v{fmt(canary.get('modelVersion'))}"
    if phase == "RolledBack":
        return (
            f"{where} has no canary to {action}: {rolled} was rolled back ({rollback.get('reason')}); "
            f"`kubectl slipway retry {name_of(obj)}` rolls it out again"
        )
    if phase == "Promoted":
        return (
            f"{where} has no canary to {action}: it is Promoted, {serving}; a rollout starts when a new "
            "version is published or the spec changes"
        )
    return f"{where} has no canary in flight to {action} (phase {phase or 'not set yet'})"
