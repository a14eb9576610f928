"""What ``kubectl slipway list`` prints (pure: no I/O): one line an object of the three kinds, with
its phase, its progress, the version it made or serves, and its age."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from slipway.cli.refs import (
    CANARY_PHASES,
    INFERENCE_DEPLOYMENT,
    KINDS,
    MODEL_ARTIFACT,
    TRAINING_RUN,
    Kind,
    Obj,
    lookup,
    name_of,
)
from slipway.cli.render import fmt, steps_of
from slipway.clock import parse_time


@dataclass(frozen=True)
class Line:
    namespace: str
    ref: str  # KIND/NAME, as `get` takes it: idep/digits
    phase: str
    progress: str
    version: str
    age: str


HEADER = Line("NAMESPACE", "NAME", "PHASE", "PROGRESS", "VERSION", "AGE")


def age(created: str | None, now: datetime) -> str:
    """How long ago, as kubectl's AGE column writes it: 45s, 5m30s, 95m, 7h10m, 30h, 3d4h, 12d, 2y30d."""
    when = parse_time(created)
    if when is None:
        return "<unknown>"
    seconds = int((now - when).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400

    def two(big: int, big_unit: str, small: int, small_unit: str) -> str:
        return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"

    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return two(minutes, "m", seconds % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return two(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return two(days, "d", hours % 24, "h")
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return two(days // 365, "y", days % 365, "d")
    return f"{days // 365}y"


def _model(track: Obj | None) -> str:
    return f"{lookup(track, 'modelName') or '?'} v{fmt(lookup(track, 'modelVersion'))}"


def progress(kind: Kind, obj: Obj) -> str:
    """A TrainingRun's step of N; an InferenceDeployment's canary: its step of N while in flight, its weight."""
    status = obj.get("status") or {}
    if kind is TRAINING_RUN and lookup(status, "progress", "step") is not None:
        return f"step {status['progress']['step']}/{fmt(lookup(status, 'progress', 'totalSteps'))}"
    if kind is not INFERENCE_DEPLOYMENT or not lookup(status, "canary", "revision"):
        return "-"
    parts = []
    if status.get("phase") in CANARY_PHASES and status.get("currentStep") is not None:
        parts.append(f"step {int(status['currentStep']) + 1}/{fmt(steps_of(obj.get('spec') or {}))}")
    parts.append(f"{fmt(lookup(status, 'canary', 'weight') or 0)}%")
    return " ".join(parts)


def version(kind: Kind, obj: Obj) -> str:
    """What a ModelArtifact registered; what an InferenceDeployment serves (stable, then -> canary)."""
    status = obj.get("status") or {}
    if kind is MODEL_ARTIFACT and status.get("modelVersion"):
        text = f"{lookup(obj, 'spec', 'model', 'name') or '?'} v{status['modelVersion']}"
        return text + (f" (quantized v{status['quantizedVersion']})" if status.get("quantizedVersion") else "")
    if kind is not INFERENCE_DEPLOYMENT:
        return "-"
    stable, canary = status.get("stable") or {}, status.get("canary") or {}
    text = _model(stable) if stable.get("modelVersion") else "-"
    if canary.get("revision") and canary.get("modelVersion"):
        same_model = canary.get("modelName") == stable.get("modelName") and stable.get("modelVersion")
        text += f" -> v{canary['modelVersion']}" if same_model else f" -> {_model(canary)}"
    return text


def line(kind: Kind, obj: Obj, now: datetime) -> Line:
    return Line(
        namespace=str(lookup(obj, "metadata", "namespace") or ""),
        ref=f"{kind.short}/{name_of(obj)}",
        phase=str(lookup(obj, "status", "phase") or "-"),
        progress=progress(kind, obj),
        version=version(kind, obj),
        age=age(lookup(obj, "metadata", "creationTimestamp"), now),
    )


def lines(objects: Iterable[tuple[Kind, Obj]], now: datetime) -> list[Line]:
    """One line an object, by namespace, then kind (runs, artifacts, deployments), then name."""
    order = {kind.kind: i for i, kind in enumerate(KINDS)}
    made = [(order[kind.kind], line(kind, obj, now)) for kind, obj in objects]
    return [found for _, found in sorted(made, key=lambda m: (m[1].namespace, m[0], m[1].ref))]


def table(rows: list[Line], all_namespaces: bool) -> str:
    """The lines in aligned columns under a header (NAMESPACE only with -A), as kubectl prints a list."""
    cells = [[r.namespace, r.ref, r.phase, r.progress, r.version, r.age] for r in [HEADER, *rows]]
    if not all_namespaces:
        cells = [row[1:] for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    text = ["   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(text) + "\n"
