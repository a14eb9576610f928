"""Scenario B at scale (issue #54): growth per object, the line through the RSS, the ratios and the
goals, from rows of the shape bench/reaction.py writes."""

from __future__ import annotations

from bench.scale_report import fit, render_at_scale, scale_rows

MIB = 2**20


def row(system: str, n: int, rss_mib: float, startup: float, p99: float, writes: int = 0) -> dict:
    return {
        "system": system, "n": n, "rss_bytes_max": rss_mib * MIB, "seconds": 300, "requests_by_verb": {"watch": 7},
        "requests": 7, "cpu_seconds": 0.1, "writes": writes, "rss_bytes_after_startup": 2 * rss_mib * MIB,
        "startup": {"seconds": startup, "writes": 0}, "spec_changes": {"p50_seconds": 0.03, "p99_seconds": p99},
    }  # fmt: skip


SIZES = [("slipway", 1000, 300, 10, 0.05), ("argo", 1000, 200, 30, 0.05), ("slipway", 3000, 500, 70, 3.0),
         ("argo", 3000, 300, 90, 0.06)]  # fmt: skip
DATA = {"window_seconds": 300, "runs": [row(*size) for size in SIZES]}


def test_growth_per_object_is_measured_between_sizes() -> None:
    rows = {(r["system"], r["n"]): r for r in scale_rows(DATA)}
    assert rows[("slipway", 1000)]["rss_per_object"] == 300 * MIB / 1000
    assert rows[("slipway", 3000)]["rss_per_object"] == 200 * MIB / 2000
    assert fit([(1000, 300.0), (3000, 500.0)]) == (200.0, 0.1)
    assert fit([(1000, 300.0)]) is None


def test_the_page_gives_ratios_goals_and_the_projection_to_ten_thousand() -> None:
    page = render_at_scale(DATA)
    assert "| ratio Slipway/Argo | 1,000 | 1.50 | 1.50 |" in page
    assert "at 10,000: 1,200 MiB" in page  # 200 MiB + 0.1 MiB x 10,000
    assert "| start-up ≤ 60 s (N = 3,000) | 70.0 s | 60 s | **missed** |" in page
    assert "| spec → child p99 ≤ 2 s (N = 1,000) | 0.05 s | 2 s | met |" in page
    assert "| every goal at N = 10,000 | not measured |" in page


def test_requests_at_rest_are_judged_only_over_ten_minutes() -> None:
    """Watches renew every 5 to 10 minutes: a 5-minute window, scaled up, says nothing about the rate."""
    assert (
        "| API requests at rest ≤ Argo's (N = 1,000, per 10 min) | 14 | 14 | **not measured** (a 300 s window) |"
        in (render_at_scale(DATA))
    )
    longer = {"window_seconds": 600, "runs": [{**r, "seconds": 600} for r in DATA["runs"]]}
    assert "| API requests at rest ≤ Argo's (N = 1,000, per 10 min) | 7 | 7 | met |" in render_at_scale(longer)


def test_a_later_kept_run_of_a_larger_size_joins_the_scale_rows_and_training_run_rows_do_not() -> None:
    from pathlib import Path

    from bench.kept import Kept, at_scale

    def row(system: str, n: int, **more: object) -> dict[str, object]:
        return {"system": system, "n": n, "startup": {}, "rss_bytes_max": n * 1000, **more}

    def kept(name: str, rows: list[dict[str, object]]) -> Kept:
        return Kept(name, Path(name), {"versions": {"slipway": name}}, {"at-rest": {"runs": rows}})

    both = kept("a", [row("slipway", 1000), row("argo", 1000), row("slipway", 3000), row("argo", 3000)])
    alone = kept("b", [row("slipway", 10000), row("slipway", 1000, training_runs=1000)])
    name, data = at_scale([both, alone])  # type: ignore[misc]
    assert name == "a"
    assert sorted((r["system"], r["n"]) for r in data["runs"]) == [
        ("argo", 1000), ("argo", 3000), ("slipway", 1000), ("slipway", 3000), ("slipway", 10000)]  # fmt: skip
    assert any("N = 10,000 from the kept run `b`" in note for note in data["notes"])
