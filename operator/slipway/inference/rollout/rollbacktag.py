"""The ``slipway.dev/rollback`` tag on a model version: written by the InferenceDeployment that rolled
the version back, naming it, and honoured only by that deployment (pure).

It is written as ``deployment=<namespace>/<name>, reason=…, revision=…, time=…, metric=…, value=…``
(the deployment first). It is read with a whitelist, each field bounded; anything else is dropped, a
field that breaks its bound is dropped whole (never cut), and the first occurrence of a field wins:

- ``deployment``: a Kubernetes namespace and name (a DNS label, a DNS subdomain);
- ``reason``: one of the rollback reasons (slipway.reasons, marked ``rollback``);
- ``revision``: letters, digits, ``.``, ``_``, ``-``, at most 64;
- ``time``: an RFC 3339 time, at most 40 characters, kept as status writes times;
- ``metric``: letters, digits, ``_``, ``.``, ``:``, ``/``, ``-``, at most 63 (an analysis metric's name);
- ``value``: a finite number written in at most 32 characters.

What is read back is rendered again from these fields (:meth:`RollbackTag.text`), so that status,
conditions, Events and metric labels only ever carry bounded text, however long the tag is.

A tag that names another deployment, or none (written by a release before the tag named one, or by
hand), is not honoured: a version one deployment rolled back is not refused by another (another
namespace, staging and production), and a tag with no name could have come from any of them. The
deployment that rolled a version back keeps refusing it from ``status.lastRollback``; only a copy of
it re-created without its status, reading an unnamed tag, canaries the version again (analysed as
any canary is) instead of refusing it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slipway.clock import parse_time, rfc3339
from slipway.mlflow.tags import ROLLBACK
from slipway.reasons import ROLLBACK_REASONS

ROLLBACK_TAG = ROLLBACK.name
FIELDS = ("deployment", "reason", "revision", "time", "metric", "value")

_DEPLOYMENT = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_REVISION = re.compile(r"[A-Za-z0-9._-]{1,64}")
_METRIC = re.compile(r"[A-Za-z0-9_.:/-]{1,63}")
MAX_TIME = 40
MAX_VALUE = 32
# The longest text() can render: every field at its bound, with its name and separators.
MAX_TEXT = sum(len(f) + 3 for f in FIELDS) + 63 + 1 + 253 + 32 + 64 + MAX_TIME + 63 + MAX_VALUE


@dataclass(frozen=True)
class RollbackTag:
    """The fields of a rollback tag that passed the whitelist (None: absent or refused)."""

    deployment: str | None = None
    reason: str | None = None
    revision: str | None = None
    time: str | None = None
    metric: str | None = None
    value: float | None = None

    def text(self) -> str:
        """The fields as the operator writes them (bounded by MAX_TEXT)."""
        fields: list[tuple[str, Any]] = [(name, getattr(self, name)) for name in FIELDS]
        return ", ".join(f"{name}={value}" for name, value in fields if value is not None)


def owner(namespace: str, name: str) -> str:
    """How a tag names the deployment that wrote it."""
    return f"{namespace}/{name}"


def render(deployment: str, record: Mapping[str, Any]) -> str:
    """The tag's value for a rollback ``record`` (status.lastRollback's) of ``deployment``."""
    fields = {"deployment": deployment, **{k: record.get(k) for k in FIELDS[1:]}}
    return ", ".join(f"{k}={v}" for k, v in fields.items() if v is not None)


def parse_tag(value: str) -> RollbackTag:
    """The whitelisted, bounded fields of a tag (see the module's docstring); never raises."""
    raw: dict[str, str] = {}
    for part in value.split(","):
        key, sep, text = part.partition("=")
        key = key.strip()
        if sep and key in FIELDS and key not in raw:
            raw[key] = text.strip()
    return RollbackTag(
        deployment=_matching(_DEPLOYMENT, raw.get("deployment")),
        reason=raw["reason"] if raw.get("reason") in ROLLBACK_REASONS else None,
        revision=_matching(_REVISION, raw.get("revision")),
        time=_time(raw.get("time")),
        metric=_matching(_METRIC, raw.get("metric")),
        value=_number(raw.get("value")),
    )


def owned_tag(value: str | None, deployment: str) -> RollbackTag | None:
    """The tag's fields if it names ``deployment`` (namespace/name); None: no tag, or one that names
    another deployment or none, which this deployment does not honour."""
    if not value or not deployment:
        return None
    tag = parse_tag(value)
    return tag if tag.deployment == deployment else None


def clipped(value: Any, limit: int = MAX_TEXT) -> str:
    """``value`` as text of at most ``limit`` characters (``…`` marks a cut): for records an earlier
    release read back from a tag whole, that status may still hold."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _matching(pattern: re.Pattern[str], text: str | None) -> str | None:
    return text if text is not None and pattern.fullmatch(text) else None


def _time(text: str | None) -> str | None:
    if not text or len(text) > MAX_TIME:
        return None
    try:
        parsed = parse_time(text)
        return rfc3339(parsed) if parsed is not None else None
    except (OverflowError, ValueError):  # a time at the calendar's ends, out of range in UTC
        return None


def _number(text: str | None) -> float | None:
    if not text or len(text) > MAX_VALUE:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
