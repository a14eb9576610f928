"""bench/report.py, page.py and kept.py: the numbers, goals and tables of RESULTS.md, from a run
folder's raw JSON, and RESULTS.md itself from the runs kept in bench/runs/.

The plots (matplotlib, the ``bench`` extra) are not drawn here; the report renders its tables
without them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from bench import kept, page, report, rundir  # noqa: E402


def test_percentile_interpolates_between_ranks() -> None:
    assert report.percentile([], 50) is None
    assert report.percentile([7.0], 99) == 7.0
    assert report.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert report.percentile([4.0, 1.0, 3.0, 2.0], 90) == pytest.approx(3.7)
    assert report.percentile(range(1, 101), 99) == pytest.approx(99.01)


def trial(system: str, ready: float, decision: float | None, stable: float | None, **kw: object) -> dict:
    return {"system": system, "round": 0, "canary_ready": ready, "breach_visible": ready + 10,
            "decision": decision, "stable_only": stable, "fivexx": 30, "fivexx_after_decision": 2, **kw}  # fmt: skip


ROLLBACK = {
    "scenario": "A",
    "config": {"rps": 20, "error_rate": 0.3, "stable_replicas": 2, "interval_seconds": 10, "failure_limit": 1},
    "floor_seconds": 45.0,
    "two_sample_bound_seconds": 15.0,
    "trials": [
        trial("slipway", 100, 140, 141),
        trial("slipway", 200, 250, 252),
        trial("slipway", 300, None, None),
        trial("argo", 100, 160, 161),
        trial("argo", 200, 255, 256, problems=["promoted"]),
    ],  # fmt: skip
}


def test_rollback_stats_measure_from_canary_ready_and_count_undecided_trials() -> None:
    stats = report.rollback_stats(ROLLBACK)
    assert stats["slipway"]["trials"] == 3
    assert stats["slipway"]["undecided"] == 1
    assert stats["slipway"]["decision"]["values"] == [40, 50]
    assert stats["slipway"]["decision"]["p50"] == 45
    assert stats["slipway"]["stable"]["min"] == 41
    assert stats["argo"]["decision"]["p50"] == 57.5
    assert stats["argo"]["problems"] == ["round 0: promoted"]


def at_rest(slipway_rss: float, argo_rss: float, slipway_gets: int, writes: int = 0) -> dict:
    return {
        "scenario": "B",
        "window_seconds": 120,
        "runs": [
            {"system": "slipway", "n": 300, "requests_by_verb": {"get": slipway_gets, "watch": 0}, "writes": writes,
             "cpu_seconds": 3.0, "rss_bytes_max": slipway_rss},
            {"system": "argo", "n": 300, "requests_by_verb": {"list": 6}, "writes": 0, "cpu_seconds": 1.0,
             "rss_bytes_max": argo_rss},
            {"system": "slipway", "n": 10, "requests_by_verb": {}, "writes": 0, "rss_bytes_max": 1},
        ],
    }  # fmt: skip


def by_id(goals: list[report.Goal]) -> dict[str, report.Goal]:
    return {g.id: g for g in goals}


def test_goals_compare_slipway_with_argo_from_the_same_run() -> None:
    scale = {"apply_to_first_child": [0.2] * 98 + [3.0, 4.0], "rss_bytes_max": 200e6}
    goals = by_id(report.goals(ROLLBACK, at_rest(100e6, 200e6, slipway_gets=3, writes=1), scale))
    assert goals["rollback-p50"].met is True
    assert goals["rollback-p50"].ratio == pytest.approx(45 / 57.5)
    # 3 gets in 120 s over 300 objects against Argo's 6 lists: half as many per object.
    assert goals["rest-requests"].slipway == pytest.approx(3 * 60 / 120 / 300)
    assert goals["rest-requests"].met is True
    assert goals["rest-writes"].met is False  # one write at rest misses the target of none
    assert goals["rest-rss"].met is True
    assert goals["scale-first-child"].met is False  # p99 of 100 values interpolates into the slow tail
    assert goals["scale-rss"].met is True


def test_goals_not_measured_when_a_scenario_did_not_run() -> None:
    goals = by_id(report.goals(None, None, None))
    assert {g.met for g in goals.values()} == {None}
    assert "not measured" in report.render_goals(list(goals.values()), {}, "run-x")


def test_results_page_names_its_run_and_explains_a_missed_goal(tmp_path: Path) -> None:
    run = tmp_path / "run-20261201-000000"
    run.mkdir()
    rundir.write(run, "run", {"started": "2026-12-01T00:00:00+00:00", "machine": {"cpus": 2},
                              "versions": {"slipway": "abc1234", "argo_rollouts": "v1.10.1"}})  # fmt: skip
    rundir.write(run, "rollback", ROLLBACK)
    rundir.write(run, "at-rest", at_rest(300e6, 200e6, slipway_gets=0))
    page_ = page.results_markdown(run, tmp_path / "plots", tmp_path / "RESULTS.md", {})
    assert "run-20261201-000000" in page_ and "abc1234" in page_ and "v1.10.1" in page_
    assert "| Slipway | 3 |" in page_  # the rollback table's row: three trials
    assert "controller RSS at 300 deployments ≤ Argo's | 286 MiB | 191 MiB | 1.50 | **missed** |" in page_
    assert "no explanation written yet" in page_
    assert "## C. Slipway at scale (kwok nodes)\n\nNot run." in page_


def test_an_explanation_written_for_another_run_is_marked() -> None:
    goals = report.goals(ROLLBACK, at_rest(300e6, 200e6, slipway_gets=0), None)
    text = report.render_goals(goals, {"rest-rss": {"run": "run-old", "text": "the kopf indexes"}}, "run-new")
    assert "*(written for run run-old)*: the kopf indexes" in text


def test_a_published_run_is_gzipped_and_reads_as_the_run_it_came_from(tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "run-20261201-000000"
    run.mkdir()
    rundir.write(run, "run", {"started": "2026-12-01T00:00:00+00:00"})
    rundir.write(run, "rollback", ROLLBACK)
    monkeypatch.setattr(rundir, "KEPT", tmp_path / "runs")
    kept = rundir.publish(run, "2026-12-01")
    assert sorted(p.name for p in kept.iterdir()) == ["rollback.json.gz", "run.json.gz"]
    assert rundir.read(kept, "rollback") == rundir.read(run, "rollback")
    assert rundir.read(kept, "scale") is None
    first = (kept / "rollback.json.gz").read_bytes()
    rundir.publish(run, "2026-12-01")  # no time stamp in the gzip header: published again, the same bytes
    assert (kept / "rollback.json.gz").read_bytes() == first


def test_results_md_is_what_the_kept_runs_render() -> None:
    """bench/RESULTS.md holds nothing but what `make bench-report` renders from bench/runs/ (the
    narrative is bench/ANALYSIS.md's): rendered again, it is the committed page, byte for byte."""
    rendered = page.kept_markdown(rundir.KEPT, page.PLOTS, page.RESULTS, page.load_explanations())
    assert rendered == page.RESULTS.read_text()


def short_names(name: str) -> set[str]:
    """A kept run's names in ANALYSIS.md: its folder, or what follows the section's prefix."""
    parts = name.split("-")
    return {name, "-".join(parts[3:]), "-".join(parts[4:])} - {""}


def test_every_kept_run_is_named_by_a_document_and_every_named_run_is_kept() -> None:
    found = kept.runs()
    analysis = (rundir.BENCH / "ANALYSIS.md").read_text()
    docs = [analysis, (rundir.BENCH / "README.md").read_text(), (ROOT / "README.md").read_text()]
    cited = {m for m in re.findall(r"`([\w.-]+)`", analysis)} | set(re.findall(r"runs/([\w.-]+)/", analysis))
    unnamed = [k.name for k in found if k is not kept.main_run(found) and not short_names(k.name) & cited]
    assert unnamed == []
    named = {m for doc in docs for m in re.findall(r"bench/runs/(\d{4}-[\w.-]+)/", doc)}
    assert named and all((rundir.KEPT / name).is_dir() for name in named), named


def test_the_main_run_is_the_newest_kept_run_with_all_three_scenarios(tmp_path: Path) -> None:
    for name, started, scenarios in (("old", "2026-12-01", kept.SCENARIOS), ("new", "2026-12-03", kept.SCENARIOS),
                                     ("newest", "2026-12-04", ("scale",))):  # fmt: skip
        run = tmp_path / name
        run.mkdir()
        rundir.write(run, "run", {"started": started})
        for scenario in scenarios:
            rundir.write(run, scenario, {"scenario": scenario})
    found = kept.runs(tmp_path)
    assert [k.name for k in found] == ["old", "new", "newest"]
    assert kept.main_run(found).name == "new"
    assert kept.main_run(found).label("scale") == "`new`"
    assert [stem for stem, _ in found[2].of("scale")] == ["scale"]
