"""The numbers, tables and goals of RESULTS.md, from one run's raw JSON (``bench/page.py`` makes the
page, ``python -m bench report``). Every number in RESULTS.md is computed here from the files of a
run folder, which RESULTS.md names, so a figure can always be traced to its run. The goals of
issue #13 are checked here too, each beside the measured ratio (Slipway / Argo Rollouts, both from
the same run). Why a goal is missed is written by hand
in ``bench/explanations.json`` (``{goal id: {"run": run folder name, "text": ...}}``); a missed
goal without one, or with one written for another run, says so.

The tables and goals need only the standard library (unit-tested in tests/unit); the plots need
matplotlib (the ``bench`` extra, installed by ``make bench``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

SYSTEMS = ("slipway", "argo")
NAMES = {"slipway": "Slipway", "argo": "Argo Rollouts"}
MIB = 1024 * 1024


# --------------------------------------------------------------------------- numbers


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between ranks; None when empty."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    rank = (len(data) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return data[low] + (data[high] - data[low]) * (rank - low)


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{unit}"


def mib(value: float | None) -> str:
    return "—" if value is None else f"{value / MIB:,.0f} MiB"


def megabytes(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e6:,.0f} MB"


def ratio(slipway: float | None, argo: float | None) -> float | None:
    if slipway is None or argo is None:
        return None
    if argo == 0:
        return 1.0 if slipway == 0 else math.inf
    return slipway / argo


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "—"
    return "∞" if math.isinf(value) else f"{value:.2f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- scenario A


def span(trial: dict[str, Any], start: str, end: str) -> float | None:
    a, b = trial.get(start), trial.get(end)
    return None if a is None or b is None else b - a


def rollback_stats(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per system: the trials, and p50/p90/min of canary ready → breach visible, → decision and →
    traffic back on stable; the 5xx served; trials with a problem or no decision."""
    out: dict[str, dict[str, Any]] = {}
    for system in SYSTEMS:
        trials = [t for t in data.get("trials", []) if t.get("system") == system]
        if not trials:
            continue
        stats: dict[str, Any] = {"trials": len(trials)}
        for key, end in (("breach", "breach_visible"), ("decision", "decision"), ("stable", "stable_only")):
            values = [v for t in trials if (v := span(t, "canary_ready", end)) is not None]
            stats[key] = {"n": len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
                          "min": min(values) if values else None, "values": values}  # fmt: skip
        stats["fivexx_p50"] = percentile([t.get("fivexx", 0) for t in trials], 50)
        stats["fivexx_after_decision_p50"] = percentile([t.get("fivexx_after_decision", 0) for t in trials], 50)
        stats["undecided"] = sum(1 for t in trials if t.get("decision") is None)
        stats["problems"] = [f"round {t.get('round')}: {p}" for t in trials for p in t.get("problems", [])]
        out[system] = stats
    return out


def render_rollback(data: dict[str, Any] | None) -> str:
    if not data:
        return "Not run.\n"
    cfg = data.get("config", {})
    stats = rollback_stats(data)
    text = [
        f"{cfg.get('rps', '?')} requests/s, the canary answering {cfg.get('error_rate', '?')} of them with 500, "
        f"{cfg.get('stable_replicas', '?')} stable replicas and one canary pod, analysis every "
        f"{cfg.get('interval_seconds', '?')} s with failureLimit {cfg.get('failure_limit', '?')}, scrape interval "
        f"{cfg.get('scrape_interval_seconds', '?')} s, rate window {cfg.get('rate_window_seconds', '?')} s. "
        f"Reference times for the decision: with `rate()` over the first two samples after Ready, scrape + "
        f"interval × failureLimit = **{fmt(data.get('two_sample_bound_seconds'))} s**; with a full rate window, "
        f"scrape + rate window + interval × (failureLimit + 1) = {fmt(data.get('floor_seconds'))} s (a pod is "
        "scraped from Running, before it is Ready and takes traffic, so its series can start earlier). "
        "Seconds from the canary pod Ready:",
        "",
    ]
    rows = []
    for system, s in stats.items():
        rows.append([
            NAMES[system], str(s["trials"]),
            fmt(s["breach"]["p50"]),
            f"{fmt(s['decision']['p50'])} / {fmt(s['decision']['p90'])} / {fmt(s['decision']['min'])}",
            f"{fmt(s['stable']['p50'])} / {fmt(s['stable']['p90'])} / {fmt(s['stable']['min'])}",
            fmt(s["fivexx_p50"], 0), fmt(s["fivexx_after_decision_p50"], 0),
            str(s["undecided"]),
        ])  # fmt: skip
    text.append(table(["system", "trials", "→ breach visible p50", "→ decision p50 / p90 / min",
                       "→ traffic on stable p50 / p90 / min", "5xx p50", "5xx after decision p50", "undecided"],
                      rows))  # fmt: skip
    for q in ("slipway", "argo"):
        if query := cfg.get("query", {}).get(q):
            text.append(f"\n{NAMES[q]} query: `{query}`")
    problems = [f"{NAMES[s]} {p}" for s, st in stats.items() for p in st["problems"]]
    if problems:
        text.append("\nProblems seen:\n" + "\n".join(f"- {p}" for p in problems))
    return "\n".join(text) + "\n" + notes(data)


# --------------------------------------------------------------------------- scenario B


def per_minute(count: float | None, seconds: float) -> float | None:
    return None if count is None or not seconds else count * 60 / seconds


def at_rest_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each (system, N) of the at-rest runs with its rates per minute and per object."""
    seconds = data.get("window_seconds") or 0
    rows = []
    for run in sorted(data.get("runs", []), key=lambda r: (r.get("n", 0), SYSTEMS.index(r.get("system", "slipway")))):
        requests = sum((run.get("requests_by_verb") or {}).values())
        rpm = per_minute(requests, run.get("seconds") or seconds)
        n = run.get("n") or 1
        rows.append({
            **run, "requests": requests, "rpm": rpm, "rpm_per_object": None if rpm is None else rpm / n,
            "writes_per_minute": per_minute(run.get("writes"), run.get("seconds") or seconds),
            "cpu_per_minute": per_minute(run.get("cpu_seconds"), run.get("seconds") or seconds),
        })  # fmt: skip
    return rows


def render_at_rest(data: dict[str, Any] | None) -> str:
    if not data:
        return "Not run.\n"
    seconds = data.get("window_seconds")
    rows = []
    for r in at_rest_rows(data):
        verbs = ", ".join(f"{verb} {count}" for verb, count in sorted((r.get("requests_by_verb") or {}).items()))
        rows.append([
            NAMES.get(r["system"], r["system"]), str(r.get("n")), fmt(r["rpm"]), fmt(r["rpm_per_object"], 3),
            fmt(r["writes_per_minute"], 2), verbs or "none", fmt(r["cpu_per_minute"], 2), mib(r.get("rss_bytes_max")),
            fmt(per_minute(r.get("prometheus_calls"), r.get("seconds") or seconds or 0)),
            fmt(per_minute(r.get("mlflow_calls"), r.get("seconds") or seconds or 0)),
        ])  # fmt: skip
    head = (f"Settled deployments, each system alone, counted for {fmt(seconds, 0)} s after it settled. Rates "
            "are per minute; API requests are the controller's own (audit log), watches included.\n\n")  # fmt: skip
    header = ["system", "N", "API req/min", "per object", "writes/min", "requests by verb", "CPU s/min", "RSS max",
              "Prometheus/min", "MLflow/min"]  # fmt: skip
    return head + table(header, rows) + "\n" + notes(data)


# --------------------------------------------------------------------------- scenarios C and D


def render_scale(data: dict[str, Any] | None) -> str:
    if not data:
        return "Not run.\n"
    cfg = data.get("config", {})
    rows = []
    spans = (("apply → first child", "apply_to_first_child"), ("TrainingRun apply → Succeeded", "apply_to_succeeded"),
             ("InferenceDeployment apply → Promoted", "apply_to_promoted"))  # fmt: skip
    for label, key in spans:
        values = data.get(key) or []
        rows.append([label, str(len(values)), fmt(percentile(values, 50), 2), fmt(percentile(values, 99), 2),
                     fmt(max(values) if values else None, 2)])  # fmt: skip
    for kind, values in (data.get("first_child_by_kind") or {}).items():
        rows.append([f"{kind} apply → first child", str(len(values)), fmt(percentile(values, 50), 2),
                     fmt(percentile(values, 99), 2), fmt(max(values) if values else None, 2)])  # fmt: skip
    head = (f"{cfg.get('training_runs', '?')} TrainingRuns and {cfg.get('deployments', '?')} InferenceDeployments "
            f"over {cfg.get('nodes', '?')} kwok GPU nodes (training pods complete {cfg.get('train_seconds', '?')} s "
            "after they start). Seconds:\n\n")  # fmt: skip
    body = table(["from apply", "objects", "p50", "p99", "max"], rows)
    facts = [
        f"- operator RSS max {mib(data.get('rss_bytes_max'))}, CPU {fmt(data.get('cpu_seconds'))} s",
        f"- API requests by the operator: {fmt(data.get('api_requests_per_second'), 1)} /s "
        f"({', '.join(f'{v} {c}' for v, c in sorted((data.get('requests_by_verb') or {}).items()))})",
        f"- Ready flaps (True, then False): {data.get('ready_flaps', '—')}",
    ]
    return head + body + "\n\n" + "\n".join(facts) + "\n" + notes(data)


def render_start(data: dict[str, Any] | None) -> str:
    start = (data or {}).get("start")
    if not start:
        return "Not run.\n"
    verbs = ", ".join(f"{v} {c}" for v, c in sorted((start.get("requests_by_verb") or {}).items()))
    return (f"A fresh operator resumed {start.get('objects', '?')} objects in **{fmt(start.get('resume_seconds'))} s** "
            f"and wrote {start.get('writes', '—')} times while doing so (requests: {verbs or 'none'}).\n"
            + notes(start))  # fmt: skip


def notes(data: dict[str, Any]) -> str:
    items = data.get("notes") or []
    return ("\n" + "\n".join(f"- {n}" for n in items) + "\n") if items else ""


# --------------------------------------------------------------------------- goals


@dataclass
class Goal:
    id: str
    text: str
    slipway: float | None
    argo: float | None  # or the bound, for a goal against a fixed number
    met: bool | None  # None: not measured
    show: Callable[[float | None], str] = fmt
    against: str = "argo"  # "argo": a ratio; "bound": a fixed bound

    @property
    def ratio(self) -> float | None:
        return ratio(self.slipway, self.argo) if self.against == "argo" else None


def _at(rows: list[dict[str, Any]], system: str, n: int | None = None) -> dict[str, Any] | None:
    mine = [r for r in rows if r["system"] == system and (n is None or r.get("n") == n)]
    return max(mine, key=lambda r: r.get("n", 0)) if mine else None


def goals(rollback: dict[str, Any] | None, at_rest: dict[str, Any] | None, scale: dict[str, Any] | None) -> list[Goal]:
    out = []
    stats = rollback_stats(rollback or {})
    s50 = stats.get("slipway", {}).get("decision", {}).get("p50")
    a50 = stats.get("argo", {}).get("decision", {}).get("p50")
    out.append(Goal("rollback-p50", "rollback latency p50 (canary ready → decision) ≤ Argo's", s50, a50,
                    None if s50 is None or a50 is None else s50 <= a50, show=lambda v: fmt(v, 1, " s")))  # fmt: skip
    rows = at_rest_rows(at_rest or {})
    biggest = max((r.get("n", 0) for r in rows), default=None)
    s_rest, a_rest = _at(rows, "slipway", biggest), _at(rows, "argo", biggest)
    sv = s_rest and s_rest["rpm_per_object"]
    av = a_rest and a_rest["rpm_per_object"]
    out.append(Goal("rest-requests", f"API requests at rest per object per minute ≤ Argo's (N = {biggest})", sv, av,
                    None if sv is None or av is None else sv <= av, show=lambda v: fmt(v, 3)))  # fmt: skip
    sw = s_rest and s_rest.get("writes")
    out.append(Goal("rest-writes", f"writes at rest = 0 (N = {biggest}, Slipway)", sw, 0,
                    None if sw is None else sw == 0, show=lambda v: fmt(v, 0), against="bound"))  # fmt: skip
    s300, a300 = _at(rows, "slipway", 300), _at(rows, "argo", 300)
    sr = s300 and s300.get("rss_bytes_max")
    ar = a300 and a300.get("rss_bytes_max")
    out.append(Goal("rest-rss", "controller RSS at 300 deployments ≤ Argo's", sr, ar,
                    None if sr is None or ar is None else sr <= ar, show=mib))  # fmt: skip
    first = (scale or {}).get("apply_to_first_child") or []
    p99 = percentile(first, 99)
    out.append(Goal("scale-first-child", "Scenario C: p99 apply → first child ≤ 2 s", p99, 2.0,
                    None if p99 is None else p99 <= 2.0, show=lambda v: fmt(v, 2, " s"), against="bound"))  # fmt: skip
    rss = (scale or {}).get("rss_bytes_max")
    out.append(Goal("scale-rss", "Scenario C: operator RSS < 250 MB", rss, 250e6,
                    None if rss is None else rss < 250e6, show=megabytes, against="bound"))  # fmt: skip
    return out


def render_goals(found: list[Goal], explanations: dict[str, Any], run_name: str) -> str:
    rows = []
    for g in found:
        verdict = "not measured" if g.met is None else ("met" if g.met else "**missed**")
        other = g.show(g.argo) if g.against == "argo" else f"bound {g.show(g.argo)}"
        rows.append([g.text, g.show(g.slipway), other, fmt_ratio(g.ratio), verdict])
    text = [table(["goal", "Slipway", "Argo Rollouts / bound", "ratio Slipway/Argo", "verdict"], rows)]
    missed = [g for g in found if g.met is False]
    if missed:
        text.append("\n### Missed goals: why, and what it would take\n")
        for g in missed:
            why = explanations.get(g.id)
            if not why:
                text.append(f"- **{g.text}**: no explanation written yet (bench/explanations.json).")
            else:
                stale = "" if why.get("run") == run_name else f" *(written for run {why.get('run')})*"
                text.append(f"- **{g.text}**{stale}: {why.get('text', '')}")
    return "\n".join(text) + "\n"
