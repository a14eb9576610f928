"""Scenario E's section of RESULTS.md (``bench/scenario_e.py``): an LLM canary in InferencePools,
Slipway against the HTTPRoute's weights moved by hand, from the newest kept run that holds it."""

from __future__ import annotations

from typing import Any

from bench.report import fmt, table

SCENARIO = "llm-hand"
NAMES = {"slipway": "Slipway (InferencePool mode)", "hand": "by hand (alert, then the route edited)"}


def render_llm_hand(name: str, data: dict[str, Any]) -> str:
    cfg, summary = data.get("config") or {}, data.get("summary") or {}
    rows = []
    for system, label in NAMES.items():
        s = summary.get(system)
        if not s:
            continue
        rows.append([
            label, str(s["trials"]),
            f"{fmt(s['ready_to_decision']['p50'])} / {fmt(s['ready_to_decision']['max'])}",
            f"{fmt(s['ready_to_zero']['p50'])} / {fmt(s['ready_to_zero']['max'])}",
            f"{fmt(s['failed']['p50'], 0)} / {fmt(s['failed']['max'], 0)}",
            str(s["on_canary_after_zero"]), str(s["problems"]),
        ])  # fmt: skip
    head = (
        f"Run `{name}`. A version answering {fmt(100 * float(cfg.get('error_rate', 0)), 0)}% 5xx at "
        f"{cfg.get('weight', '?')}% beside 2 stable pods, {fmt(cfg.get('rate'), 0)} streamed completions a second "
        f"through the test gateway (Envoy, GIE v1.5.0's endpoint picker). By hand: an alert on Slipway's own "
        f"errorRate query, `for: {fmt(cfg.get('hand_for_seconds'), 0)}s`, evaluated every "
        f"{fmt(cfg.get('hand_eval_seconds'), 0)} s, the route set to 0% "
        f"{fmt(cfg.get('hand_reaction_seconds'), 0)} s after it fires (a lower bound for a person).\n"
    )
    header = ["", "trials", "canary Ready → decision p50 / max (s)", "→ route at 0% p50 / max (s)",
              "failed answers p50 / max", "answers on the canary after 0%", "trials with problems"]  # fmt: skip
    notes = "".join(f"- {note}\n" for note in data.get("notes") or [])
    return head + "\n" + table(header, rows) + "\n\n" + notes


def newest(found: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """(run name, data) of the newest kept run (``bench.kept.Kept``) with scenario E."""
    with_it = [k for k in found if SCENARIO in k.files]
    return (with_it[-1].name, with_it[-1].files[SCENARIO]) if with_it else None
