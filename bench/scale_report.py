"""Scenario B at scale (issue #54): per N and system, the controller's RSS once settled and its growth
per object, CPU and API requests at rest, start-up over the N objects and a spec change carried to
its child, each with the ratio Slipway / Argo Rollouts; and a straight line per system through the
RSS measured, projected to 10,000 objects where 10,000 was not measured.

Reads scenario B's raw file (``at-rest.json``: the rows :mod:`bench.reaction` adds). Standard library
only, unit-tested like :mod:`bench.report`.
"""

from __future__ import annotations

from typing import Any

from bench.report import MIB, NAMES, SYSTEMS, at_rest_rows, fmt, fmt_ratio, mib, notes, ratio, table

TARGET = 10_000


def fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares ``(intercept, slope)`` of ``y = a + b x``; None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def scale_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The at-rest rows that measured something, with the RSS per object since the previous N of the
    same system (the growth), or, for the smallest N, over the whole N."""
    rows = [r for r in at_rest_rows(data) if "error" not in r and r.get("rss_bytes_max")]
    previous: dict[str, dict[str, Any]] = {}
    for r in rows:
        before = previous.get(r["system"])
        if before is None:
            r["rss_per_object"] = r["rss_bytes_max"] / r["n"]
        else:
            r["rss_per_object"] = (r["rss_bytes_max"] - before["rss_bytes_max"]) / (r["n"] - before["n"])
        previous[r["system"]] = r
        r["per_10_minutes"] = 600 / (r.get("seconds") or data.get("window_seconds") or 600)
    return rows


def _value(row: dict[str, Any] | None, key: str) -> float | None:
    if row is None:
        return None
    if key == "startup_writes":
        return (row.get("startup") or {}).get("writes")
    if key in ("restart_peak", "restart_last"):  # runs before the RSS timeline: the RSS once every object passed
        start = row.get("startup") or {}
        return start.get("rss_bytes_peak" if key == "restart_peak" else "rss_bytes_last") or row.get(
            "rss_bytes_after_startup"
        )
    if key in ("startup", "p50", "p99"):
        part = row.get("startup" if key == "startup" else "spec_changes") or {}
        return part.get("seconds" if key == "startup" else f"{key}_seconds")
    if key in ("cpu", "requests"):
        raw = row.get("cpu_seconds" if key == "cpu" else "requests")
        return None if raw is None else raw * row["per_10_minutes"]
    return row.get(key)


COLUMNS = (
    ("RSS settled", "rss_bytes_max", mib),
    ("RSS per object", "rss_per_object", lambda v: "—" if v is None else f"{v / 1024:,.1f} KiB"),
    ("CPU s /10 min at rest", "cpu", lambda v: fmt(v, 1)),
    ("API requests /10 min at rest", "requests", lambda v: fmt(v, 0)),
    ("writes at rest", "writes", lambda v: fmt(v, 0)),
    ("start-up", "startup", lambda v: fmt(v, 1, " s")),
    ("writes at start-up", "startup_writes", lambda v: fmt(v, 0)),
    ("RSS peak after a restart", "restart_peak", mib),
    ("RSS 90 s after a restart", "restart_last", mib),
    ("spec → child p50", "p50", lambda v: fmt(v, 2, " s")),
    ("spec → child p99", "p99", lambda v: fmt(v, 2, " s")),
)


def render_at_scale(data: dict[str, Any] | None) -> str:
    rows = scale_rows(data or {})
    if not rows:
        return "Not run.\n"
    body = []
    for n in sorted({r["n"] for r in rows}):
        at = {s: next((r for r in rows if r["n"] == n and r["system"] == s), None) for s in SYSTEMS}
        for system in SYSTEMS:
            if at[system] is not None:
                body.append([NAMES[system], f"{n:,}", *(show(_value(at[system], key)) for _, key, show in COLUMNS)])
        if all(at.values()):
            ratios = (fmt_ratio(ratio(_value(at["slipway"], k), _value(at["argo"], k))) for _, k, _ in COLUMNS)
            body.append(["ratio Slipway/Argo", f"{n:,}", *ratios])
    header = ["system", "N", *(label for label, _, _ in COLUMNS)]
    window = data.get("window_seconds") if data else None
    head = (f"N settled InferenceDeployments (Slipway) or Rollouts (Argo), one replica each on kwok nodes, each "
            f"controller alone. RSS: the maximum over the window at rest ({fmt(window, 0)} s, scaled to 10 minutes "
            "for CPU and requests); RSS per object: its growth since the previous N (the smallest N: RSS / N); "
            "start-up: process start to every object's first pass, and the RSS once it is done; spec → child: a "
            "change to one object until its child has it (50 changes, the other N−1 settled).\n\n")  # fmt: skip
    return head + table(header, body) + "\n\n" + projection(rows) + "\n" + goals_at_scale(rows) + notes(data or {})


def projection(rows: list[dict[str, Any]]) -> str:
    lines = []
    for system in SYSTEMS:
        points = [(float(r["n"]), float(r["rss_bytes_max"])) for r in rows if r["system"] == system]
        line = fit(points)
        if line is None:
            continue
        a, b = line
        sizes = ", ".join(f"{int(n):,}" for n, _ in points)
        projected = "" if any(n == TARGET for n, _ in points) else f"; at {TARGET:,}: {(a + b * TARGET) / MIB:,.0f} MiB"
        lines.append(f"- {NAMES[system]}: RSS ≈ {a / MIB:,.0f} MiB + {b / 1024:,.1f} KiB × N (N = {sizes}){projected}")
    return ("\n".join(lines) + "\n") if lines else ""


def goals_at_scale(rows: list[dict[str, Any]]) -> str:
    """Issue #54's goals, each at every N measured for both systems (10,000 says so when not measured)."""
    out = []
    both = sorted({r["n"] for r in rows if r["system"] == "slipway"} & {r["n"] for r in rows if r["system"] == "argo"})
    at = {(r["system"], r["n"]): r for r in rows}
    kib = "{:,.1f} KiB".format
    for n in both:
        s, a = at[("slipway", n)], at[("argo", n)]
        mine, theirs = s["rss_per_object"], a["rss_per_object"]
        out.append(
            [f"RSS per object ≤ Argo's (N = {n:,})", kib(mine / 1024), kib(theirs / 1024), _verdict(mine <= theirs)]
        )
        mine, theirs = _value(s, "requests") or 0, _value(a, "requests") or 0
        window = min(s.get("seconds") or 0, a.get("seconds") or 0)
        # A watch is renewed every 5 to 10 minutes (client-go), every 10 (Slipway): a shorter window
        # counts a renewal or none depending on when it falls, and scaled up it says nothing.
        verdict = _verdict(mine <= theirs) if window >= 600 else f"**not measured** (a {window:.0f} s window)"
        out.append([f"API requests at rest ≤ Argo's (N = {n:,}, per 10 min)", fmt(mine, 0), fmt(theirs, 0), verdict])
    for n in sorted({r["n"] for r in rows if r["system"] == "slipway"}):
        s = at[("slipway", n)]
        startup, p99 = _value(s, "startup"), _value(s, "p99")
        out += [
            [f"0 writes at rest (N = {n:,})", fmt(s.get("writes"), 0), "0", _verdict(s.get("writes") == 0)],
            [
                f"start-up ≤ 60 s (N = {n:,})",
                fmt(startup, 1, " s"),
                "60 s",
                _verdict(startup is not None and startup <= 60),
            ],
            [f"spec → child p99 ≤ 2 s (N = {n:,})", fmt(p99, 2, " s"), "2 s", _verdict(p99 is not None and p99 <= 2)],
        ]
    if not any(r["n"] == TARGET for r in rows):
        out.append([f"every goal at N = {TARGET:,}", "not measured", "", "**not measured**"])
    return table(["goal (issue #54)", "Slipway", "Argo Rollouts / bound", "verdict"], out) + "\n"


def _verdict(met: bool) -> str:
    return "met" if met else "**missed**"
