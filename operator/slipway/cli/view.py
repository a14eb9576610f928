"""What ``kubectl slipway`` shows and decides, from the objects' dicts (pure: no I/O).

- :func:`resolve_kind` and :func:`parse_ref`: ``idep/digits``, ``inferencedeployment digits``, ...
- :func:`slipway.cli.tree.lifecycle` and :func:`render`: the tree one object belongs to: a TrainingRun, the
  ModelArtifact it made (``status.artifactRef``), its versions and gates, and the
  InferenceDeployments that serve them, with their tracks, weights, steps, analysis and rollback.
- :func:`wait_state`: whether a ``wait`` is done, or the object is Stalled at its generation.
- :func:`action_refusal`: why ``promote``, ``abort`` or ``retry`` cannot apply in the current phase.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from slipway import kinds
from slipway.artifact.model import ArtifactPhase
from slipway.inference import registry
from slipway.inference.model import DeploymentPhase, Rollout
from slipway.inference.rollout.base import ABORT_ANNOTATION, PROMOTE_ANNOTATION, RETRY_ANNOTATION
from slipway.inference.rollout.canary import step_weights
from slipway.status.conditions import get_condition
from slipway.training.model import TrainingPhase

if TYPE_CHECKING:
    from slipway.cli.tree import Node

Obj = Mapping[str, Any]


class UsageError(ValueError):
    """A command line that names no known kind, or no object: exit code 2."""


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    short: str
    phases: tuple[str, ...]

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.singular, self.plural, self.short)


def _kind(kind: kinds.Kind, phases: tuple[str, ...]) -> Kind:
    return Kind(kind.kind, kind.plural, kind.short, phases)


TRAINING_RUN = _kind(kinds.TRAINING_RUN, get_args(TrainingPhase))
MODEL_ARTIFACT = _kind(kinds.MODEL_ARTIFACT, get_args(ArtifactPhase))
INFERENCE_DEPLOYMENT = _kind(kinds.INFERENCE_DEPLOYMENT, get_args(DeploymentPhase))
KINDS = (TRAINING_RUN, MODEL_ARTIFACT, INFERENCE_DEPLOYMENT)
KIND_NAMES = ", ".join(f"{k.singular} ({k.short})" for k in KINDS)

ACTIONS = {"promote": PROMOTE_ANNOTATION, "abort": ABORT_ANNOTATION, "retry": RETRY_ANNOTATION}
CANARY_PHASES = ("Progressing", "Analyzing", "Paused")  # a canary may be in flight


def resolve_kind(text: str) -> Kind:
    """A kind by its plural, singular or short name, optionally with the group (``idep.slipway.dev``)."""
    word = text.lower().removesuffix(".slipway.dev")
    for kind in KINDS:
        if word in kind.names:
            return kind
    raise UsageError(f"unknown kind {text!r}: use one of {KIND_NAMES}")


def parse_ref(words: list[str], default: Kind | None = None) -> tuple[Kind, str]:
    """``KIND/NAME``, ``KIND NAME``, or (with a default kind) ``NAME``."""
    if len(words) == 1 and "/" in words[0]:
        kind_text, _, name = words[0].partition("/")
        if not name or "/" in name:
            raise UsageError(f"{words[0]!r}: write KIND/NAME, e.g. idep/digits")
        return resolve_kind(kind_text), name
    if len(words) == 2 and "/" not in words[0] + words[1]:
        return resolve_kind(words[0]), words[1]
    if len(words) == 1 and default is not None:
        return default, words[0]
    expected = "NAME or idep/NAME" if default is not None else "KIND/NAME or KIND NAME (e.g. idep/digits)"
    raise UsageError(f"expected {expected}, got {' '.join(words) or 'nothing'}")


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _get(obj: Obj | None, *path: str) -> Any:
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


# -- rendering ---------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def ready_line(obj: Obj) -> str:
    """``True Promoted: serving ...`` (and a note when Stalled, or when status is of an older generation)."""
    ready = get_condition(_get(obj, "status", "conditions"), "Ready")
    if ready is None:
        return "Unknown (no status yet)"
    text = f"{ready.get('status')} {ready.get('reason')}"
    if ready.get("message"):
        text += f": {ready['message']}"
    stalled = get_condition(_get(obj, "status", "conditions"), "Stalled")
    if stalled is not None and stalled.get("status") == "True":
        text += "  [Stalled: a person must act]"
    generation = _get(obj, "metadata", "generation")
    observed = _get(obj, "status", "observedGeneration")
    if generation is not None and observed is not None and observed != generation:
        text += f"  [status of generation {observed}; the spec is at {generation}]"
    return text


def _track(track: Mapping[str, Any] | None) -> str:
    if not track or not track.get("revision"):
        return "none"
    model = f"{track.get('modelName') or '?'} v{_fmt(track.get('modelVersion'))}"
    return (
        f"{model}  revision {track.get('revision')}  "
        f"{_fmt(track.get('readyReplicas') or 0)}/{_fmt(track.get('replicas') or 0)} ready  "
        f"weight {_fmt(track.get('weight') or 0)}%"
    )


def steps_of(spec: Mapping[str, Any]) -> int | None:
    """How many canary steps the spec's rollout has (None if the spec cannot be read)."""
    try:
        return len(step_weights(Rollout.model_validate(spec.get("rollout") or {})))
    except ValueError:
        return None


def _run_details(obj: Obj) -> list[tuple[str, str]]:
    status = obj.get("status") or {}
    lines = [("Ready", ready_line(obj))]
    progress = status.get("progress") or {}
    if progress.get("step") is not None:
        lines.append(("progress", f"step {progress['step']}/{_fmt(progress.get('totalSteps'))}"))
    if status.get("restarts"):
        lines.append(("restarts", _fmt(status["restarts"])))
    spent = status.get("cost") or {}
    if spent:
        lines.append(("cost", cost_line(spent)))
    run_id = _get(status, "mlflow", "runId")
    if run_id:
        lines.append(("mlflow run", str(run_id)))
    return lines


def cost_line(spent: Mapping[str, Any]) -> str:
    """status.cost in one line: the total, GPU-hours, the wasted share and the attempts."""
    attempts = len(spent.get("attempts") or []) + int(_get(spent, "folded", "count") or 0)
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
        f"{_fmt(spent[key])}{currency} {label}"
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
    model = _get(obj, "spec", "model", "name") or "?"
    lines = [("Ready", ready_line(obj))]
    if status.get("modelVersion") or status.get("quantizedVersion"):
        versions = f"{model} v{_fmt(status.get('modelVersion'))}"
        if status.get("quantizedVersion"):
            versions += f", quantized v{status['quantizedVersion']}"
        lines.append(("versions", versions))
    for i, gate in enumerate(status.get("gates") or []):
        mark = "passed" if gate.get("passed") else "FAILED"
        text = f"{gate.get('metric')} {_fmt(gate.get('value'))} ({gate.get('threshold') or '-'}) {mark}"
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
    lines = [("Ready", ready_line(obj)), ("model", source), ("stable", _track(status.get("stable")))]
    canary = status.get("canary") or {}
    canary_text = _track(canary)
    if canary.get("revision"):
        if canary.get("requestedWeight") is not None:
            canary_text += f" (requested {canary['requestedWeight']}%)"
        if status.get("currentStep") is not None and status.get("phase") in CANARY_PHASES:
            canary_text += f"  step {int(status['currentStep']) + 1} of {_fmt(steps_of(spec))}"
    lines.append(("canary", canary_text))
    for track in ("stable", "canary"):
        spent = (status.get(track) or {}).get("cost") or {}
        if spent:
            lines.append((f"{track} cost", serving_cost_line(spent)))
    if _get(spec, "rollout", "paused"):
        lines.append(("paused", "spec.rollout.paused is true"))
    for i, result in enumerate(status.get("analysis") or []):
        value, threshold = _fmt(result.get("value")), result.get("threshold") or "-"
        text = f"{result.get('metric')} {value} ({threshold}) {result.get('result')}"
        if result.get("result") != "Passed" and result.get("message"):
            text += f": {result['message']}"
        lines.append(("analysis" if i == 0 else "", text))
    rollback = status.get("lastRollback")
    if rollback:
        text = str(rollback.get("reason"))
        if rollback.get("metric"):
            text += f" {rollback['metric']}={_fmt(rollback.get('value'))}"
        text += f"  {rollback.get('modelName') or '?'} v{_fmt(rollback.get('modelVersion'))}"
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
    return f"{node.kind.kind}/{node.name}  {_get(node.obj, 'status', 'phase') or '-'}"


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


# -- wait ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitState:
    done: bool
    stalled: str | None  # the Stalled condition's reason and message, when it holds at this generation
    progress: tuple[Any, ...]  # what a progress line reports; a new line when it changes
    line: str


def _at_generation(obj: Obj, cond: Mapping[str, Any] | None) -> bool:
    generation = _get(obj, "metadata", "generation")
    observed = (cond or {}).get("observedGeneration", _get(obj, "status", "observedGeneration"))
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


def action_refusal(action: str, obj: Obj) -> str | None:
    """Why ``promote``, ``abort`` or ``retry`` means nothing in the object's current phase (None: it applies).

    As the operator reads the annotations (slipway.inference.rollout): promote skips the remaining steps of
    a canary in flight; abort rolls a canary back, or reverts a promotion or a bake; retry re-rolls the
    revision that was rolled back, while the spec still asks for it."""
    status = obj.get("status") or {}
    phase = status.get("phase")
    where = f"InferenceDeployment {_get(obj, 'metadata', 'namespace')}/{_name(obj)}"
    canary = status.get("canary") or {}
    in_flight = phase in CANARY_PHASES and bool(canary.get("revision"))
    rollback = status.get("lastRollback") or {}
    stable = status.get("stable") or {}
    serving = f"serving {stable.get('modelName') or '?'} v{_fmt(stable.get('modelVersion'))}"
    rolled = f"{rollback.get('modelName') or '?'} v{_fmt(rollback.get('modelVersion'))}"
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
        return f"{where} is already Promoting {canary.get('modelName') or '?'} v{_fmt(canary.get('modelVersion'))}"
    if phase == "RolledBack":
        return (
            f"{where} has no canary to {action}: {rolled} was rolled back ({rollback.get('reason')}); "
            f"`kubectl slipway retry {_name(obj)}` rolls it out again"
        )
    if phase == "Promoted":
        return (
            f"{where} has no canary to {action}: it is Promoted, {serving}; a rollout starts when a new "
            "version is published or the spec changes"
        )
    return f"{where} has no canary in flight to {action} (phase {phase or 'not set yet'})"
