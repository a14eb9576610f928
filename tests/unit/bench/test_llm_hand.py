"""Scenario E (bench/scenario_e.py): the person's alert follows Prometheus' ``for``, what they apply
carries no Slipway label, their alert reads only the canary's pods, and RESULTS.md's section E."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from bench import llm_report, scenario_e  # noqa: E402


def test_the_alert_fires_once_its_expression_has_held_for_its_for_and_a_dip_starts_it_again() -> None:
    alert = scenario_e.Alert(60)
    assert [alert.evaluate(t, True) for t in (0, 15, 30, 45)] == [False] * 4
    assert alert.evaluate(50, False) is False and alert.pending is None  # a dip: pending again from scratch
    assert [alert.evaluate(t, True) for t in (65, 110, 125)] == [False, False, True]


def test_what_the_person_applies_has_no_slipway_label_and_their_alert_reads_the_canary_of_the_version() -> None:
    deployment = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "slipway", "slipway.dev/routed": "true",
                                          "slipway.dev/track": "canary"}},
                  "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/managed-by": "slipway",
                                                                "slipway.dev/track": "canary"}}}}}  # fmt: skip
    scenario_e.by_hand(deployment)
    assert deployment["metadata"]["labels"] == {"slipway.dev/track": "canary"}
    assert deployment["spec"]["template"]["metadata"]["labels"] == {"slipway.dev/track": "canary"}
    query = scenario_e.alert_query("ld-hand", "7")
    assert 'namespace="ld-hand"' in query and 'slipway_dev_track="canary"' in query
    assert 'slipway_dev_model_version="7"' in query and "[20s]" in query


def test_section_e_shows_each_system_and_says_the_hand_figures_are_a_lower_bound() -> None:
    row = {"trials": 3, "problems": 0, "on_canary_after_zero": 0, "ready_to_decision": {"p50": 14.4, "max": 15.0},
           "ready_to_zero": {"p50": 14.9, "max": 15.5}, "failed": {"p50": 15, "max": 18}}  # fmt: skip
    config = {"error_rate": 0.3, "weight": 20, "rate": 20, "hand_for_seconds": 60, "hand_eval_seconds": 15,
              "hand_reaction_seconds": 0}  # fmt: skip
    data = {"config": config, "summary": {"slipway": row, "hand": {**row, "trials": 2}}}
    text = llm_report.render_llm_hand("run-x", data)
    assert "| Slipway (InferencePool mode) | 3 | 14.4 / 15.0 | 14.9 / 15.5 | 15 / 18 | 0 | 0 |" in text
    assert "| by hand (alert, then the route edited) | 2 |" in text
    assert "`for: 60s`" in text and "lower bound for a person" in text
