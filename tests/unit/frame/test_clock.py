"""One RFC 3339 formatter (slipway.clock.rfc3339): what it writes, that parse_time reads it back, and
that no other module of the operator formats a time itself."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from slipway.clock import parse_time, rfc3339
from slipway.status import conditions

PACKAGE = Path(__file__).resolve().parents[3] / "operator" / "slipway"


def test_utc_to_the_second_with_z():
    assert rfc3339(datetime(2026, 12, 1, 10, 0, 5, 987654, tzinfo=UTC)) == "2026-12-01T10:00:05Z"
    assert rfc3339(datetime(2026, 12, 1, 12, 0, 5, tzinfo=timezone(timedelta(hours=2)))) == "2026-12-01T10:00:05Z"
    assert rfc3339(datetime(2026, 12, 1, 10, 0, 5)) == "2026-12-01T10:00:05Z"  # naive: UTC
    assert rfc3339("2026-12-01T10:00:05Z") == "2026-12-01T10:00:05Z"  # a recorded time stays as it was


def test_now_and_the_round_trip():
    before = datetime.now(UTC).replace(microsecond=0)
    written = rfc3339()
    parsed = parse_time(written)
    assert parsed is not None and before <= parsed <= datetime.now(UTC)
    assert rfc3339(parsed) == written and conditions.parse_time is parse_time
    assert parse_time("2026-12-01T10:00:05.5Z") == datetime(2026, 12, 1, 10, 0, 5, 500000, tzinfo=UTC)
    assert parse_time("") is None and parse_time("yesterday") is None


def test_no_other_module_formats_a_time():
    """isoformat() and strftime() stay in slipway.clock (the workloads, pods of their own, aside)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "clock.py" or path.relative_to(PACKAGE).parts[0] == "workloads":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("isoformat", "strftime"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == [f for f in found if f.startswith("cli/main.py")]  # time.strftime: the clock a watch prints
