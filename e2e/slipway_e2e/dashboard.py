"""The monitoring kit's Grafana dashboard (manifests/monitoring/slipway-dashboard.json) as the tests
read it: its rows, the panels under each, and each panel's queries with the dashboard's variables
filled in as Grafana fills them. Pure: no Prometheus here (slipway_e2e.monitoring asks one)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "manifests" / "monitoring" / "slipway-dashboard.json"

# The serving row of each analysis preset: its panels read that model server's (or gateway's) series,
# and have data only where a deployment uses it.
PRESET_ROWS = {
    "slipway": "Serving: preset slipway",
    "vllm": "Serving: preset vllm",
    "gateway": "Serving: preset gateway",
}
# The operator's own series without object labels. The other rows but the presets' read the
# operator's per-object series: all have data only where Prometheus scrapes the operator.
OPERATOR_ROW = "Operator"
# Grafana's value of a multi-value variable with everything selected (the variables' allValue).
ALL = ".*"
# $name and ${name}: the variable references Grafana replaces. label_replace's "$1" names no variable.
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def variables(board: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The dashboard's query variables (the data source aside), by name."""
    found = board.get("templating", {}).get("list", [])
    return {v["name"]: v for v in found if v.get("type") == "query"}


def rows(board: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The panels under each row, by the row's title, in the order Grafana lays them out: a panel
    belongs to the last row above it ("" for any above the first row)."""
    ordered = sorted(board["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    out: dict[str, list[dict[str, Any]]] = {}
    current = ""
    for panel in ordered:
        if panel["type"] == "row":
            current = panel["title"]
            out.setdefault(current, [])
        else:
            out.setdefault(current, []).append(panel)
    return out


def rows_for(board: Mapping[str, Any], preset: str) -> list[str]:
    """The rows that have data during a lifecycle of ``preset`` with the operator scraped: all but
    the other presets' serving rows."""
    others = {title for name, title in PRESET_ROWS.items() if name != preset}
    return [title for title in rows(board) if title not in others]


def panels_of(board: Mapping[str, Any], titles: Iterable[str]) -> list[dict[str, Any]]:
    by_row = rows(board)
    return [panel for title in titles for panel in by_row[title]]


def fill(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with each variable of ``values`` replaced by its value; other ``$`` references stay."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, match.group(0))

    return VARIABLE.sub(value, expr)


def queries(panel: Mapping[str, Any], values: Mapping[str, str]) -> list[str]:
    """The PromQL of each target of ``panel``, its variables filled in."""
    return [fill(target["expr"], values) for target in panel.get("targets", [])]
