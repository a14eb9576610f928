"""RESULTS.md, the page: ``bench/RESULTS.md`` from the runs kept in ``bench/runs/`` alone
(``python -m bench report``, ``make bench-report``), or one unpublished run's page in its own folder
(``python -m bench report RUN``). The numbers, tables and goals are ``bench/report.py``'s; the kept
runs' section is ``bench/kept.py``'s; the plots (matplotlib, the ``bench`` extra) ``bench/figures.py``'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import kept as kept_runs
from bench import rundir
from bench.llm_report import newest, render_llm_hand
from bench.report import goals, render_at_rest, render_goals, render_rollback, render_scale, render_start, table
from bench.scale_report import render_at_scale

RESULTS = rundir.BENCH / "RESULTS.md"
PLOTS = rundir.BENCH / "plots"
ONE_RUN = (
    "Rendered by `python -m bench report` from the raw JSON of this run; do not edit by hand "
    "(`python -m bench publish` keeps the run in `bench/runs/` and renders `bench/RESULTS.md` again).\n"
)
KEPT_RUNS = (
    "Rendered by `python -m bench report` (`make bench-report`) from the runs kept in `bench/runs/` alone: "
    "A to D from the newest run that holds all three scenarios, the last section from every kept run. "
    "Do not edit by hand; what the runs show is written in [ANALYSIS.md](ANALYSIS.md).\n"
)


def load_explanations() -> dict[str, Any]:
    path = rundir.BENCH / "explanations.json"
    return json.loads(path.read_text()) if path.exists() else {}


def results_markdown(
    run: Path, plots: Path, results: Path, explanations: dict[str, Any], intro: str = ONE_RUN, tail: str = "",
    at_scale: tuple[str, dict[str, Any]] | None = None, llm: tuple[str, dict[str, Any]] | None = None,
) -> str:  # fmt: skip
    """The page of ``run``'s scenarios; ``tail`` (a Markdown section) ends it. ``at_scale``: the run
    (name, at-rest data) whose scale rows (issue #54) the page shows; by default ``run``'s own."""
    meta = rundir.read(run, "run") or {}
    rollback, at_rest, scale = (rundir.read(run, n) for n in ("rollback", "at-rest", "scale"))
    if at_scale is None and at_rest and any("startup" in r for r in at_rest.get("runs", [])):
        at_scale = (run.name, at_rest)
    if llm is None and (hand := rundir.read(run, "llm-hand")):
        llm = (run.name, hand)
    failures = rundir.read(run, "failures") or {}
    m, v = meta.get("machine", {}), meta.get("versions", {})
    rel = _relative(plots, results.parent)
    try:
        shown_run = str(run.resolve().relative_to(rundir.ROOT))
    except ValueError:
        shown_run = str(run)
    parts = [
        "# Benchmark results: Slipway beside Argo Rollouts\n",
        intro,
        table(
            ["", ""],
            [
                ["run", f"`{shown_run}` (started {meta.get('started', '?')})"],
                [
                    "machine",
                    f"{m.get('cpus', '?')} CPUs ({m.get('cpu_model', '?')}), {m.get('memory_gib', '?')} GiB, "
                    f"kernel {m.get('kernel', '?')}, Python {m.get('python', '?')}",
                ],
                [
                    "versions",
                    f"Slipway {v.get('slipway', '?')}, Argo Rollouts {v.get('argo_rollouts', '?')}, "
                    f"kwok {v.get('kwok', '?')}, Kubernetes {v.get('kubernetes', '?')}, {v.get('go', '?')}",
                ],
            ],
        ),  # fmt: skip
        *_provenance(rollback, at_rest, scale),
        "\n## Goals\n",
        render_goals(goals(rollback, at_rest, scale), explanations, run.name),
        "\n## A. Rollback latency (real pods)\n",
        render_rollback(rollback),
        _plot_link(plots / "rollback.png", rel, rollback),
        "\n## B. Cost at rest (pods on kwok nodes)\n",
        render_at_rest(at_rest),
        _plot_link(plots / "at-rest.png", rel, at_rest),
        *_at_scale(at_scale, plots, rel),
        "\n## C. Slipway at scale (kwok nodes)\n",
        render_scale(scale),
        _plot_link(plots / "scale.png", rel, scale),
        "\n## D. Operator start\n",
        render_start(scale),
        _plot_link(plots / "start.png", rel, (scale or {}).get("start")),
    ]
    if llm is not None:
        parts += [
            "\n## E. An LLM canary in InferencePools: Slipway against weights moved by hand\n",
            render_llm_hand(*llm),
        ]
    if failures:
        parts.append("\n## Scenarios that failed in this run\n")
        parts += [f"- `{name}`: {f.get('error')}" for name, f in failures.items()]
    if tail:
        parts.append("\n" + tail)
    return "\n".join(parts).rstrip() + "\n"


def _at_scale(at_scale: tuple[str, dict[str, Any]] | None, plots: Path, rel: str) -> list[str]:
    if at_scale is None:
        return []
    name, data = at_scale
    return [f"\n## B at scale: N settled, side by side (run `{name}`)\n", render_at_scale(data),
            _plot_link(plots / "at-scale.png", rel, data)]  # fmt: skip


def _provenance(*results: dict[str, Any] | None) -> list[str]:
    """When each scenario's file was written, with which Slipway commit."""
    rows = []
    for label, data in zip(("A. rollback", "B. at rest", "C/D. scale"), results, strict=True):
        p = (data or {}).get("provenance")
        if p:
            rows.append([label, p.get("written", "?"), (p.get("versions") or {}).get("slipway", "?")])
    return ["\n" + table(["scenario", "written", "Slipway"], rows)] if rows else []


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def _plot_link(path: Path, rel: str, data: Any) -> str:
    return f"\n![{path.stem}]({rel}/{path.name})\n" if data else ""


def kept_markdown(kept: Path, plots: Path, results: Path, explanations: dict[str, Any]) -> str:
    """bench/RESULTS.md: the kept runs' page (see bench/kept.py), from ``kept`` alone."""
    found = kept_runs.runs(kept)
    main = kept_runs.main_run(found)
    return results_markdown(
        main.path,
        plots,
        results,
        explanations,
        KEPT_RUNS,
        kept_runs.index(found),
        kept_runs.at_scale(found),
        newest(found),
    )


def draw(run: Path, plots: Path) -> None:
    plots.mkdir(parents=True, exist_ok=True)
    try:
        from bench import figures
    except ImportError as e:  # matplotlib missing: the tables still render
        print(f"no plots ({e}); install the bench extra: make bench-env")
    else:
        figures.draw_all(run, plots)


def draw_at_scale(data: dict[str, Any], plots: Path) -> None:
    """The at-scale plot of the kept runs (issue #54), from :func:`bench.kept.at_scale`."""
    try:
        from bench import figures
    except ImportError as e:
        print(f"no plots ({e}); install the bench extra: make bench-env")
    else:
        figures.at_scale(data, plots / "at-scale.png")


def render(run: Path, results: Path, plots: Path) -> None:
    """Write a page and the plots of the unpublished ``run`` (in its own folder)."""
    draw(run, plots)
    results.write_text(results_markdown(run, plots, results, load_explanations()))
    print(f"wrote {results} from {run}")


def render_kept(results: Path = RESULTS, plots: Path = PLOTS) -> None:
    """Write bench/RESULTS.md and bench/plots/ from the kept runs alone."""
    found = kept_runs.runs(rundir.KEPT)
    draw(kept_runs.main_run(found).path, plots)
    if (scaled := kept_runs.at_scale(found)) is not None:
        draw_at_scale(scaled[1], plots)
    results.write_text(kept_markdown(rundir.KEPT, plots, results, load_explanations()))
    print(f"wrote {results} from {rundir.KEPT}")
