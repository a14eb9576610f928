"""The monitoring kit (manifests/monitoring/) against a real Prometheus: the PrometheusRule's
groups loaded as a rule file, alerts read back, and the dashboard's panels run."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from localkube import prometheus
from localkube.state import ClusterInfo
from slipway_e2e import dashboard

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "manifests" / "monitoring"
PROMTOOL = prometheus.PROMETHEUS_BIN.parent / "promtool"


def rule_groups() -> list[dict[str, Any]]:
    """The rule groups of the shipped PrometheusRule."""
    rule = yaml.safe_load((KIT / "prometheusrule.yaml").read_text())
    return rule["spec"]["groups"]  # type: ignore[no-any-return]


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel of the shipped dashboard, with every
    variable at Grafana's "All"."""
    board = dashboard.load()
    values = dict.fromkeys(dashboard.variables(board), dashboard.ALL)
    panels = [p for row in dashboard.rows(board).values() for p in row]
    return [(p["title"], q) for p in panels for q in dashboard.queries(p, values)]


def promtool_check(rules: Path) -> str:
    """``promtool check rules``: its output; raises with it when the rules are refused."""
    done = subprocess.run([str(PROMTOOL), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"promtool check rules {rules}:\n{done.stdout}{done.stderr}")
    return done.stdout


def load_kit_rules(cluster: ClusterInfo) -> Path:
    """Load the kit's rules into the cluster's Prometheus, checked by promtool first."""
    assert cluster.prometheus_url, "the cluster runs no Prometheus"
    config = cluster.directory / "prometheus" / "prometheus.yml"
    rules = prometheus.load_rules(config, cluster.prometheus_url, rule_groups())
    promtool_check(rules)
    return rules


def query(url: str, promql: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=30).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


def query_range(url: str, promql: str, start: float, end: float, step: float = 5) -> list[dict[str, Any]]:
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    answer = httpx.get(f"{url}/api/v1/query_range", params=params, timeout=60).json()
    assert answer["status"] == "success", (promql, answer)
    return answer["data"]["result"]  # type: ignore[no-any-return]


def rules_loaded(url: str) -> set[str]:
    """Names of the alerting rules Prometheus evaluates."""
    groups = httpx.get(f"{url}/api/v1/rules", timeout=30).json()["data"]["groups"]
    return {r["name"] for g in groups for r in g["rules"] if r.get("type") == "alerting"}


def panel_series(url: str, rows: list[str], values: Mapping[str, str], start: float, end: float) -> dict[str, int]:
    """How many series each dashboard panel of ``rows`` shows, its variables at ``values``: its
    queries' series over [start, end], or at the end where a query has none over the range (a range
    query's last step may fall before a series that began seconds ago)."""
    board = dashboard.load()
    shown = {}
    for panel in dashboard.panels_of(board, rows):
        shown[panel["title"]] = sum(
            len(query_range(url, q, start, end) or query(url, q)) for q in dashboard.queries(panel, values)
        )
    return shown


def report_panels(shown: Mapping[str, int]) -> str:
    """One line per panel: its series, or that it has none."""
    return "\n".join(f"  {n:4d} series  {title}" if n else f"  NO SERIES    {title}" for title, n in shown.items())
