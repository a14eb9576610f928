"""The runs kept in Git, ``bench/runs/<name>/`` (gzip'd JSON, see ``rundir.publish``), and the
last section of RESULTS.md: every kept run with its headline figures, computed from its files.

RESULTS.md is rendered from these runs alone: its scenarios A to D from the newest kept run that
holds all three scenarios (``main_run``), its last section from every one. What the runs show is
written by hand in ``bench/ANALYSIS.md``, which names the runs it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import rundir
from bench.report import NAMES, at_rest_rows, fmt, mib, percentile, rollback_stats, table

SCENARIOS = ("rollback", "at-rest", "scale")  # a file's name starts with its scenario's
ALSO = ("llm-hand",)  # kept beside them, in runs of their own (scenario E)


@dataclass(frozen=True)
class Kept:
    name: str
    path: Path
    meta: dict[str, Any]  # run.json
    files: dict[str, dict[str, Any]]  # the scenario files by name (scale, scale-1-..., at-rest-attempt1)

    def of(self, scenario: str) -> list[tuple[str, dict[str, Any]]]:
        return [(stem, data) for stem, data in sorted(self.files.items()) if scenario_of(stem) == scenario]

    def label(self, stem: str) -> str:
        return f"`{self.name}`" if stem in SCENARIOS else f"`{self.name}/{stem}`"

    def commit(self, data: dict[str, Any]) -> str:
        """The Slipway commit the run started at, and the one its file was written at if it moved since."""
        started = str((self.meta.get("versions") or {}).get("slipway", "?"))
        written = ((data.get("provenance") or {}).get("versions") or {}).get("slipway")
        return started if written in (None, started) else f"{started} → {written}"


def scenario_of(stem: str) -> str | None:
    return next((s for s in (*SCENARIOS, *ALSO) if stem == s or stem.startswith(s + "-")), None)


def runs(kept: Path = rundir.KEPT) -> list[Kept]:
    """Every kept run, oldest first (by ``run.json``'s start)."""
    found = []
    for path in sorted(p for p in kept.iterdir() if p.is_dir()) if kept.is_dir() else []:
        stems = {f.name.removesuffix(".gz").removesuffix(".json") for f in path.glob("*.json*")}
        files = {s: d for s in sorted(stems) if scenario_of(s) and (d := rundir.read(path, s)) is not None}
        found.append(Kept(path.name, path, rundir.read(path, "run") or {}, files))
    return sorted(found, key=lambda k: (str(k.meta.get("started", "")), k.name))


def _scale_rows(k: Kept) -> list[dict[str, Any]]:
    """Scenario B's rows of N deployments with their start-up measured (rows with N finished TrainingRuns
    beside them, ``--at-rest-training-runs``, measure something else: ANALYSIS.md reads them)."""
    rows = (k.files.get("at-rest") or {}).get("runs", [])
    return [r for r in rows if "startup" in r and not r.get("training_runs")]


def scale_run(found: list[Kept]) -> Kept | None:
    """The kept run whose scenario B measured start-up at the most sizes (issue #54), the newest of
    those: a later run of one size alone (a restart's RSS measured again) does not replace it."""
    scaled = [(len({r.get("n") for r in _scale_rows(k)}), i, k) for i, k in enumerate(found) if _scale_rows(k)]
    return max(scaled, key=lambda t: t[:2])[2] if scaled else None


def at_scale(found: list[Kept]) -> tuple[str, dict[str, Any]] | None:
    """Scenario B at scale from the newest such run; a system it did not run (Argo Rollouts, when only
    Slipway was measured again) from the newest kept run that did, said in a note."""
    newest = scale_run(found)
    if newest is None:
        return None
    data = dict(newest.files["at-rest"])
    rows, notes = list(data.get("runs", [])), list(data.get("notes", []))
    for system in ("slipway", "argo"):
        if any(r.get("system") == system for r in _scale_rows(newest)):
            continue
        older = [k for k in found if any(r.get("system") == system for r in _scale_rows(k))]
        if older:
            rows += [r for r in _scale_rows(older[-1]) if r.get("system") == system]
            notes.append(f"{system}'s rows from the kept run `{older[-1].name}` (this run measured only the other)")
    # A size this run did not reach, measured by a later kept run of one system (10,000 alone): its row too.
    for later in found[found.index(newest) + 1 :]:
        for r in _scale_rows(later):
            if not any(o.get("system") == r.get("system") and o.get("n") == r.get("n") for o in rows):
                rows.append(r)
                notes.append(f"{r.get('system')} at N = {r.get('n'):,} from the kept run `{later.name}` "
                             f"(Slipway {later.commit(later.files['at-rest'])})")  # fmt: skip
    return newest.name, {**data, "runs": rows, "notes": notes}


def main_run(found: list[Kept]) -> Kept:
    """The newest kept run that holds all three scenarios: RESULTS.md's A to D."""
    whole = [k for k in found if all(s in k.files for s in SCENARIOS)]
    if not whole:
        raise SystemExit(f"no run in {rundir.KEPT} holds {', '.join(SCENARIOS)} (python -m bench publish)")
    return whole[-1]


def _rollback_row(k: Kept, stem: str, data: dict[str, Any]) -> list[str]:
    stats, cfg = rollback_stats(data), data.get("config") or {}
    row = [k.label(stem), k.commit(data), f"{cfg.get('interval_seconds', '?')} s, {cfg.get('failure_limit', '?')}"]
    for system in ("slipway", "argo"):
        s = stats.get(system)
        row.append("—" if not s else f"{s['trials']}: {fmt(s['decision']['p50'])} / {fmt(s['decision']['p90'])}")
    return row


def _at_rest_row(k: Kept, stem: str, data: dict[str, Any]) -> list[str]:
    rows = at_rest_rows(data)
    biggest = max((r.get("n", 0) for r in rows), default=None)
    at = {r["system"]: r for r in rows if r.get("n") == biggest}
    sizes = ", ".join(str(n) for n in sorted({int(r.get("n") or 0) for r in rows}))
    row = [k.label(stem), k.commit(data), fmt(data.get("window_seconds"), 0), sizes or "—"]
    for system in ("slipway", "argo"):
        r = at.get(system)
        row.append("—" if not r else f"{fmt(r['rpm_per_object'], 3)}, {mib(r.get('rss_bytes_max'))}")
    return row


def _scale_row(k: Kept, stem: str, data: dict[str, Any]) -> list[str]:
    cfg, by_kind = data.get("config") or {}, data.get("first_child_by_kind") or {}
    runs_, deps = by_kind.get("TrainingRun") or [], by_kind.get("InferenceDeployment") or []
    rate = cfg.get("apply_rate")
    return [
        k.label(stem), k.commit(data),
        f"{cfg.get('training_runs', '?')} + {cfg.get('deployments', '?')}",
        f"{fmt(rate, 0)}/s" if rate else "one thread", str(cfg.get("kueue_gpus") or "—"),
        f"{fmt(percentile(runs_, 50), 2)} / {fmt(percentile(runs_, 99), 2)}", fmt(percentile(deps, 99), 2),
        fmt(percentile(data.get("apply_to_succeeded") or [], 99), 1),
        fmt(percentile(data.get("apply_to_promoted") or [], 99), 1),
        fmt(data.get("cpu_seconds"), 0), mib(data.get("rss_bytes_max")),
    ]  # fmt: skip


def index(found: list[Kept]) -> str:
    """RESULTS.md's last section: a table per scenario, a row per kept file of it, oldest run first."""
    a, b, c = NAMES["slipway"], NAMES["argo"], "InferenceDeployment"
    parts = [
        "## Every kept run\n",
        "Each file of `bench/runs/`, by scenario; a run's name is its folder there. Commit: Slipway's when "
        "the run started, → when the file was written if it had moved. Read in [ANALYSIS.md](ANALYSIS.md).\n",
        "### A. Rollback latency\n",
        table(["run", "commit", "interval, failureLimit", f"{a}: trials: → decision p50 / p90 (s)",
               f"{b}: trials: → decision p50 / p90 (s)"],
              [_rollback_row(k, s, d) for k in found for s, d in k.of("rollback")]),
        "\n### B. Cost at rest\n",
        table(["run", "commit", "window (s)", "N", f"{a} at the largest N: API req/min per object, RSS max",
               f"{b} at the largest N: API req/min per object, RSS max"],
              [_at_rest_row(k, s, d) for k in found for s, d in k.of("at-rest")]),
        "\n### C. At scale\n",
        table(["run", "commit", "TrainingRuns + InferenceDeployments", "arrivals", "Kueue GPUs",
               "TrainingRun apply → first child p50 / p99 (s)", f"{c} apply → first child p99 (s)",
               "TrainingRun apply → Succeeded p99 (s)", f"{c} apply → Promoted p99 (s)", "operator CPU-s", "RSS max"],
              [_scale_row(k, s, d) for k in found for s, d in k.of("scale")]),
    ]  # fmt: skip
    return "\n".join(parts) + "\n"
