"""What ``kubectl slipway history`` prints (pure: no I/O): an InferenceDeployment's past, oldest
first, from its Events (one a phase it went through, with the Ready message of then) and from what
its status keeps (the last rollback, when the canary in flight started, when the bake began), then
what it serves now.

The operator's messages name a version as ``<model> version <v> (revision <r>)``; the first one in
an Event's message is the version that Event is about (an alias moved in MLflow: ``alias <a> of
<model> now points at version <v>``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from slipway.cli.refs import Obj, lookup, name_of
from slipway.cli.render import fmt, track_line
from slipway.clock import parse_time, rfc3339

VERSION_IN_MESSAGE = re.compile(r"(\S+) version (\S+) \(revision [^)\s]+\)|of (\S+) now points at version (\S+)")
SAME_MOMENT_SECONDS = 120  # a status record and an Event of the same change are this close at most


@dataclass(frozen=True)
class Entry:
    time: str  # RFC 3339, to the second
    event: str  # the Event's reason (a phase, or a Ready reason), or what status records
    version: str  # "digits v4", or "-"
    detail: str


def _second(value: Any) -> str:
    """An API time to the second (Events carry microseconds in eventTime)."""
    when = parse_time(value)
    return rfc3339(when) if when is not None else "-"


def _version_of(message: str) -> str:
    found = VERSION_IN_MESSAGE.search(message)
    if not found:
        return "-"
    model, version = (found.group(1), found.group(2)) if found.group(1) else (found.group(3), found.group(4))
    return f"{model} v{version}"


def _model(record: Mapping[str, Any]) -> str:
    return f"{record.get('modelName') or '?'} v{fmt(record.get('modelVersion'))}"


def from_events(events: Iterable[Obj]) -> list[Entry]:
    """An Entry per Event: its time, reason, the version its message names, and the message."""
    entries = []
    for event in events:
        when = event.get("eventTime") or event.get("lastTimestamp") or event.get("firstTimestamp")
        message = str(event.get("message") or "")
        detail = ("Warning: " if event.get("type") == "Warning" else "") + message
        if int(event.get("count") or 1) > 1:
            detail += f" (x{event['count']})"
        time = _second(when or lookup(event, "metadata", "creationTimestamp"))
        entries.append(Entry(time, str(event.get("reason") or "-"), _version_of(message), detail))
    return entries


def rollback_detail(rollback: Mapping[str, Any]) -> str:
    """The last rollback's reason, metric and value, revision, and whether it was retried."""
    text = str(rollback.get("reason") or "?")
    if rollback.get("metric"):
        text += f" {rollback['metric']}={fmt(rollback.get('value'))}"
    text += f"; revision {rollback.get('revision') or '?'}"
    if rollback.get("tag"):
        text += "; read back from the version's MLflow tag (the object was re-created)"
    if rollback.get("retried"):
        text += "; retried since"
    return text


def from_status(status: Mapping[str, Any]) -> list[Entry]:
    """What status keeps of the past: the last rollback, the start of the canary in flight and of the bake."""
    entries = []
    rollback = status.get("lastRollback")
    if rollback:
        entries.append(Entry(_second(rollback.get("time")), "RolledBack", _model(rollback), rollback_detail(rollback)))
    canary = status.get("canary") or {}
    if canary.get("revision") and status.get("canaryStartTime"):
        entries.append(
            Entry(_second(status["canaryStartTime"]), "Progressing", _model(canary), "canary started (status)")
        )
    if status.get("bakeStartTime") and status.get("phase") == "Baking":
        stable = status.get("stable") or {}
        entries.append(Entry(_second(status["bakeStartTime"]), "Baking", _model(stable), "bake started (status)"))
    return entries


def _close(a: str, b: str) -> bool:
    first, second = parse_time(a), parse_time(b)
    return first is not None and second is not None and abs((first - second).total_seconds()) <= SAME_MOMENT_SECONDS


def entries(obj: Obj, events: Iterable[Obj]) -> list[Entry]:
    """The object's history, oldest first. A status record stands for the Events of the same change
    (same reason and version, at most two minutes apart): their words are kept, the first with the
    record's reason and metric for a rollback."""
    kept = sorted(from_events(events), key=lambda e: e.time)
    for record in from_status(obj.get("status") or {}):
        same = [
            e for e in kept if e.event == record.event and e.version == record.version and _close(e.time, record.time)
        ]
        if not same:
            kept.append(record)
        elif record.event == "RolledBack":
            kept[kept.index(same[0])] = replace(same[0], detail=f"{record.detail}: {same[0].detail}")
    return sorted(kept, key=lambda e: e.time)


def render(obj: Obj, rows: list[Entry], events: int) -> str:
    """The header (kind/name and phase, then the tracks now), then the rows in columns; ``events``:
    how many Events were found."""
    status = obj.get("status") or {}
    lines = [f"InferenceDeployment/{name_of(obj)}  {status.get('phase') or '-'}"]
    lines.append(f"  stable  {track_line(status.get('stable'))}")
    lines.append(f"  canary  {track_line(status.get('canary'))}")
    previous = status.get("previousStable")
    if previous and previous.get("modelVersion"):
        lines.append(f"  before  {_model(previous)} (restored if the promotion in flight fails)")
    lines.append("")
    if not rows:
        lines.append("No Events (they last an hour by default) and nothing in status about the past.")
        return "\n".join(lines) + "\n"
    cells = [("TIME", "EVENT", "VERSION", "DETAIL")] + [(e.time, e.event, e.version, e.detail) for e in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(3)]
    lines += ["   ".join([*(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)), row[3]]) for row in cells]
    if not events:
        lines += ["", "No Events (they last an hour by default): the rows above are what status keeps."]
    return "\n".join(lines) + "\n"
