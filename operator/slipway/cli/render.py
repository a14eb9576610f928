"""The text ``kubectl slipway get`` prints (pure: no I/O): :func:`render` draws the lifecycle tree
(:func:`slipway.cli.tree.lifecycle`), one block an object: its kind, name and phase, then its
details: the Ready condition, a run's progress and cost, an artifact's versions and gates, a
deployment's tracks, weights, steps, analysis, rollback and registry updates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from slipway.cli.refs import CANARY_PHASES, INFERENCE_DEPLOYMENT, MODEL_ARTIFACT, TRAINING_RUN, Obj, lookup
from slipway.inference import registry
from slipway.status.conditions import get_condition

if TYPE_CHECKING:
    from slipway.cli.tree import Node


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def ready_line(obj: Obj) -> str:
    """``True Promoted: serving ...`` (and a note when Stalled, or when status is of an older generation)."""
    ready = get_condition(lookup(obj, "status", "conditions"), "Ready")
    if ready is None:
        return "Unknown (no status yet)"
    text = f"{ready.get('status')} {ready.get('reason')}"
    if ready.get("message"):
        text += f": {ready['message']}"
    stalled = get_condition(lookup(obj, "status", "conditions"), "Stalled")
    if stalled is not None and stalled.get("status") == "True":
        text += "  [Stalled: a person must act]"
    generation = lookup(obj, "metadata", "generation")
    observed = lookup(obj, "status", "observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        text += f"  [status of generation {observed}; the spec is at {generation}]"
    return text


def track_line(track: Mapping[str, Any] | None) -> str:
    if not track or not track.get("revision"):
        return "none"
    model = f"{track.get('modelName') or '?'} v{fmt(track.get('modelVersion'))}"
    return (
        f"{model}  revision {track.get('revision')}  "
        f"{fmt(track.get('readyReplicas') or 0)}/{fmt(track.get('replicas') or 0)} ready  "
        f"weight {fmt(track.get('weight') or 0)}%"
    )


# The canary's weights when spec.rollout lists no steps, as slipway.inference.model declares them
# (DEFAULT_STEP_WEIGHTS, DEFAULT_MAX_WEIGHT): written out so the plugin needs no pydantic; a unit
# test holds them equal.
DEFAULT_STEP_WEIGHTS = (20, 50)
DEFAULT_MAX_WEIGHT = 50


def step_weights(rollout: Mapping[str, Any]) -> list[int]:
    """The canary weights of spec.rollout's steps, read from the object's dict as the operator reads
    its model (slipway.inference.rollout.canary.step_weights; a unit test holds them equal)."""
    if rollout.get("steps"):
        return [int(step["weight"]) for step in rollout["steps"]]
    step_weight = rollout.get("stepWeight")
    if step_weight:
        top = int(rollout.get("maxWeight") or DEFAULT_MAX_WEIGHT)
        return list(range(int(step_weight), top + 1, int(step_weight))) or [top]
    return list(DEFAULT_STEP_WEIGHTS)


def steps_of(spec: Mapping[str, Any]) -> int | None:
    """How many canary steps the spec's rollout has (None if the spec cannot be read)."""
    try:
        return len(step_weights(spec.get("rollout") or {}))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _run_details(obj: Obj) -> list[tuple[str, str]]:
    status = obj.get("status") or {}
    lines = [("Ready", ready_line(obj))]
    progress = status.get("progress") or {}
    if progress.get("step") is not None:
        lines.append(("progress", f"step {progress['step']}/{fmt(progress.get('totalSteps'))}"))
    if status.get("restarts"):
        lines.append(("restarts", fmt(status["restarts"])))
    spent = status.get("cost") or {}
    if spent:
        lines.append(("cost", cost_line(spent)))
    run_id = lookup(status, "mlflow", "runId")
    if run_id:
        lines.append(("mlflow run", str(run_id)))
    return lines


def cost_line(spent: Mapping[str, Any]) -> str:
    """status.cost in one line: the total, GPU-hours, the wasted share and the attempts."""
    attempts = len(spent.get("attempts") or []) + int(lookup(spent, "folded", "count") or 0)
    gpu = f"{float(spent.get('gpuHours') or 0):.2f} GPU-hours over {attempts} attempt{'s' * (attempts != 1)}"
    if spent.get("total") is None:
        return f"{gpu}; {spent.get('message') or 'no price configured'}"
    wasted = f", {100 * float(spent.get('wastedShare') or 0):.0f}% on attempts that did not succeed"
    missing = f" ({spent['message']})" if spent.get("message") else ""
    return f"{spent.get('summary')}: {gpu}{wasted}{missing}"


def serving_cost_line(spent: Mapping[str, Any]) -> str:
    """status.<track>.cost in one line: per hour, per 1K requests, per 1M tokens, and what is missing."""
    currency = f" {spent['currency']}" if spent.get("currency") else ""
    parts = [
        f"{fmt(spent[key])}{currency} {label}"
        for key, label in (
            ("perHour", "per hour"),
            ("per1kRequests", "per 1K requests"),
            ("perMillionTokens", "per 1M tokens"),
        )
        if spent.get(key) is not None
    ]
    if spent.get("message"):
        parts.append(str(spent["message"]))
    return ", ".join(parts) + (f"  (at {spent['time']})" if spent.get("time") else "")


def _artifact_details(obj: Obj) -> list[tuple[str, str]]:
    status = obj.get("status") or {}
    model = lookup(obj, "spec", "model", "name") or "?"
    lines = [("Ready", ready_line(obj))]
    if status.get("modelVersion") or status.get("quantizedVersion"):
        versions = f"{model} v{fmt(status.get('modelVersion'))}"
        if status.get("quantizedVersion"):
            versions += f", quantized v{status['quantizedVersion']}"
        lines.append(("versions", versions))
    for i, gate in enumerate(status.get("gates") or []):
        mark = "passed" if gate.get("passed") else "FAILED"
        text = f"{gate.get('metric')} {fmt(gate.get('value'))} ({gate.get('threshold') or '-'}) {mark}"
        if not gate.get("passed") and gate.get("message"):
            text += f": {gate['message']}"
        lines.append(("gates" if i == 0 else "", text))
    return lines


def _deployment_details(obj: Obj) -> list[tuple[str, str]]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    model = spec.get("model") or {}
    source = (
        f"artifactRef {model['artifactRef'].get('name')}"
        if model.get("artifactRef")
        else f"{model.get('name')} alias {model.get('alias')}"
    )
    lines = [("Ready", ready_line(obj)), ("model", source), ("stable", track_line(status.get("stable")))]
    canary = status.get("canary") or {}
    canary_text = track_line(canary)
    if canary.get("revision"):
        if canary.get("requestedWeight") is not None:
            canary_text += f" (requested {canary['requestedWeight']}%)"
        if status.get("currentStep") is not None and status.get("phase") in CANARY_PHASES:
            canary_text += f"  step {int(status['currentStep']) + 1} of {fmt(steps_of(spec))}"
    lines.append(("canary", canary_text))
    for track in ("stable", "canary"):
        spent = (status.get(track) or {}).get("cost") or {}
        if spent:
            lines.append((f"{track} cost", serving_cost_line(spent)))
    if lookup(spec, "rollout", "paused"):
        lines.append(("paused", "spec.rollout.paused is true"))
    for i, result in enumerate(status.get("analysis") or []):
        value, threshold = fmt(result.get("value")), result.get("threshold") or "-"
        text = f"{result.get('metric')} {value} ({threshold}) {result.get('result')}"
        if result.get("result") != "Passed" and result.get("message"):
            text += f": {result['message']}"
        lines.append(("analysis" if i == 0 else "", text))
    rollback = status.get("lastRollback")
    if rollback:
        text = str(rollback.get("reason"))
        if rollback.get("metric"):
            text += f" {rollback['metric']}={fmt(rollback.get('value'))}"
        text += f"  {rollback.get('modelName') or '?'} v{fmt(rollback.get('modelVersion'))}"
        text += f"  revision {rollback.get('revision')}  at {rollback.get('time')}"
        if rollback.get("retried"):
            text += "  (retried)"
        lines.append(("lastRollback", text))
    pending = status.get("pendingRegistryUpdates") or []
    if pending:
        lines.append(("registry", f"{len(pending)} MLflow update(s) pending"))
    for entry in status.get("refusedRegistryUpdates") or []:
        lines.append(("refused", f"{registry.describe(entry)}: {entry.get('error')}"))
    return lines


DETAILS = {
    TRAINING_RUN.kind: _run_details,
    MODEL_ARTIFACT.kind: _artifact_details,
    INFERENCE_DEPLOYMENT.kind: _deployment_details,
}


def header(node: Node) -> str:
    if node.obj is None:
        return f"{node.kind.kind}/{node.name}  (not found)"
    return f"{node.kind.kind}/{node.name}  {lookup(node.obj, 'status', 'phase') or '-'}"


def render(roots: Iterable[Node]) -> str:
    """The trees as text, one object a block: its kind/name and phase, then its details."""
    lines: list[str] = []

    def draw(node: Node, lead: str, body: str) -> None:
        lines.append(lead + header(node))
        if node.obj is not None:
            details = DETAILS[node.kind.kind](node.obj)
            width = max(len(label) for label, _ in details)
            rail = "│ " if node.children else "  "
            lines.extend(f"{body}{rail}{label:<{width}}  {text}".rstrip() for label, text in details)
        for i, child in enumerate(node.children):
            last = i == len(node.children) - 1
            draw(child, body + ("└─ " if last else "├─ "), body + ("   " if last else "│  "))

    for root in roots:
        draw(root, "", "")
    return "\n".join(lines) + "\n"
