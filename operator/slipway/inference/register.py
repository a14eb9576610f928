"""What an InferenceDeployment tells the frame: its row of the kinds table, its status and its pass,
the ModelArtifact it names, the model alias it follows (a move of it wakes it, marked to read the
alias again), and its lane rule. Its watch of serving pods is in ``inference.watches``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slipway import behaviour, kinds
from slipway.inference import watches  # noqa: F401 - registers its serving pods' index
from slipway.inference.handler import ACTIVE, PASS
from slipway.reconcile import RETRYING, Context

STATUS, STEP = PASS


def follows(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(model, alias) of ``spec.model`` when it names a registered model."""
    model = (body.get("spec") or {}).get("model") or {}
    name = model.get("name") if isinstance(model, Mapping) else None
    return (name, str(model.get("alias") or "")) if isinstance(name, str) and name else None


def critical(ctx: Context, was: bool) -> bool:
    """A canary's passes take the critical lane, and so does the retry of one (a rollback on record
    whose scale-down got a 409 or a 503); a first revision rolling out on the stable track has nothing
    to analyse or roll back: it waits its turn."""
    status = ctx.body.get("status") or {}
    canary = bool((status.get("canary") or {}).get("revision"))
    return (canary and status.get("phase") in ACTIVE) or (was and bool(ctx.memory.get(RETRYING)))


REGISTRATION = behaviour.register(
    behaviour.Registration(
        kinds.INFERENCE_DEPLOYMENT,
        STATUS,
        STEP,
        refers={kinds.MODEL_ARTIFACT.kind: behaviour.spec_path("model", "artifactRef", "name")},
        follows=follows,
        critical=critical,
    )
)
