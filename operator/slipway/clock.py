"""Times as Kubernetes writes them (RFC 3339, UTC): the one formatter of the operator, and its reader.
Imports nothing of Slipway, so that any layer may use it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def rfc3339(when: datetime | str | None = None) -> str:
    """A time as status, records and Events write it: RFC 3339 in UTC to the second
    (``2026-12-01T10:00:00Z``); now if None, a naive time read as UTC, a string kept as it is."""
    if isinstance(when, str):
        return when
    when = datetime.now(UTC) if when is None else when
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return when.replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time as the API server writes it (``2026-12-01T10:00:00Z``, fractions allowed);
    None when empty or unreadable, so a hand-edited status never breaks a pass."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
