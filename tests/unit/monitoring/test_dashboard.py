"""The Grafana dashboard of the monitoring kit (manifests/monitoring/slipway-dashboard.json), read
without Grafana: each panel once, in a place of its own; every query read by Prometheus' own parser
(`make promql-oracle`) with the dashboard's variables filled in as Grafana fills them; every panel
over Slipway's objects filtered by the ``namespace`` and ``name`` variables; each preset's serving
panels reading the series that preset's analysis reads; and docs/how-to/monitoring.md naming what
the file holds. Whether each panel has data during a lifecycle is checked on the local cluster
(e2e/tests/test_lifecycle.py, tests/integration/test_llm_rollout.py and test_gateway_analysis.py)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from slipway import metrics
from slipway.inference.providers.gateway_queries import ISTIO, TRAEFIK
from slipway.inference.providers.prometheus_queries import DEPLOYMENT_LABEL, NAMESPACE_LABEL, PRESETS
from slipway.reference.metrics import collectors
from slipway_e2e import dashboard
from slipway_testing import ROOT, promql_parse

BOARD = dashboard.load()
ROWS = dashboard.rows(BOARD)
PANELS = [p for panels in ROWS.values() for p in panels]
# Values no series label holds, so that a matcher carrying one is known to come from the variable.
NS, NAME = "ns-of-the-variable", "name-of-the-variable"
SENTINELS = {"namespace": NS, "name": NAME}
# Grafana's values: one selected, several (a regex alternation) and All (the variables' allValue).
SELECTIONS = [
    {"namespace": "team-a", "name": "digits"},
    {"namespace": "(team-a|team-b)", "name": "(a|b-c)"},
    {"namespace": dashboard.ALL, "name": dashboard.ALL},
]


def selectors(query: str) -> list[list[dict[str, str]]]:
    """Every vector selector of ``query`` as Prometheus' parser reads it (without feature flags)."""
    answer = promql_parse([query])[0]["default"]
    assert "error" not in answer, (query, answer)
    return answer["selectors"]  # type: ignore[no-any-return]


def metric_names(query: str) -> set[str]:
    return {m["value"] for s in selectors(query) for m in s if m["name"] == "__name__"}


def matcher(text: str) -> dict[str, str]:
    """One label matcher (``code=~"5.."``) as the parser reads it."""
    return next(m for m in selectors(f"x{{{text}}}")[0] if m["name"] != "__name__")


def panel(title: str) -> dict[str, Any]:
    return next(p for p in PANELS if p["title"] == title)


def test_each_panel_is_there_once_with_an_id_and_a_place_of_its_own():
    every = BOARD["panels"]
    ids = Counter(p["id"] for p in every)
    assert [i for i, n in ids.items() if n > 1] == []
    titles = Counter(p["title"] for p in every)
    assert [t for t, n in titles.items() if n > 1] == []

    def cells(p: dict[str, Any]) -> set[tuple[int, int]]:
        g = p["gridPos"]
        return {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}

    taken: dict[tuple[int, int], str] = {}
    for p in every:
        assert p["gridPos"]["x"] >= 0 and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        overlap = {taken[c] for c in cells(p) if c in taken}
        assert not overlap, f"{p['title']} overlaps {overlap}"
        taken.update(dict.fromkeys(cells(p), p["title"]))
    assert all(p.get("targets") for p in PANELS)
    assert set(ROWS) >= {*dashboard.PRESET_ROWS.values(), dashboard.OPERATOR_ROW} and "" not in ROWS


def test_every_query_parses_with_prometheus_own_parser_whatever_the_variables_hold():
    texts = [q for values in [SENTINELS, *SELECTIONS] for p in PANELS for q in dashboard.queries(p, values)]
    answers = promql_parse(texts)
    refused = [(t, a[mode]["error"]) for t, a in zip(texts, answers, strict=True) for mode in a if "error" in a[mode]]
    assert refused == []
    # What is left of "$..." once the variables are filled is label_replace's "$1", never a variable.
    left = {m.group(0) for t in texts for m in dashboard.VARIABLE.finditer(t)}
    assert left <= {"$1"}


def test_the_variables_list_slipways_objects_and_every_object_panel_filters_by_both():
    defined = dashboard.variables(BOARD)
    assert list(defined) == ["namespace", "name"]
    per_object = {m._name for m in collectors() if {"namespace", "name"} <= set(m._labelnames)}
    listed = {}
    for variable in defined.values():
        assert (variable["multi"], variable["includeAll"], variable["allValue"]) == (True, True, dashboard.ALL)
        found = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert found is not None and variable["definition"] == variable["query"]["query"]
        assert found.group(2) == variable["name"]  # it lists the label of its name, from a per-object series
        assert metric_names(found.group(1)) <= per_object
        listed[variable["name"]] = selectors(dashboard.fill(found.group(1), SENTINELS))[0]
    assert {"name": "namespace", "type": "=~", "value": NS} in listed["name"]  # the names of those namespaces
    used = {
        m.group(1) or m.group(2) for p in PANELS for t in p["targets"] for m in dashboard.VARIABLE.finditer(t["expr"])
    }
    assert used >= set(defined)
    for title, panels in ROWS.items():
        for p in panels:
            for query in dashboard.queries(p, SENTINELS):
                for selector in selectors(query):
                    filled = [m for m in selector if NS in m["value"] or NAME in m["value"]]
                    if title == dashboard.OPERATOR_ROW:
                        assert filled == [], (p["title"], selector)
                        continue
                    assert {m["type"] for m in filled} == {"=~"}, (p["title"], selector)
                    assert any(NS in m["value"] for m in filled), (p["title"], "no namespace filter", selector)
                    assert any(NAME in m["value"] for m in filled), (p["title"], "no name filter", selector)


def test_the_operator_row_reads_series_without_object_labels_that_the_operator_exports():
    exported = {m._name: m for m in collectors()}
    suffixes = ("_bucket", "_total")
    for p in ROWS[dashboard.OPERATOR_ROW]:
        for query in dashboard.queries(p, SENTINELS):
            for name in metric_names(query):
                base = next((name.removesuffix(s) for s in suffixes if name.removesuffix(s) in exported), name)
                assert base in exported, (p["title"], name)
                assert not {"namespace", "name"} & set(exported[base]._labelnames), (p["title"], name)
    assert metric_names(dashboard.queries(panel("Operator build, by pod"), {})[0]) == {metrics.BUILD_INFO._name}


SLIPWAY, VLLM = PRESETS["slipway"], PRESETS["vllm"]


@pytest.mark.parametrize(
    ("preset", "error_rate", "latencies"),
    [
        (
            "slipway",
            "Error rate by track (preset slipway)",
            {"p95 latency by track (preset slipway)": [SLIPWAY.latency]},
        ),
        (
            "vllm",
            "Error rate by track (preset vllm)",
            {
                "p95 end-to-end latency by track (preset vllm)": [VLLM.latency],
                "p95 time to first token by track (preset vllm)": [VLLM.ttft],
                "p95 time per output token by track (preset vllm)": list(VLLM.tpot),
            },
        ),
    ],
)
def test_each_server_presets_panels_read_what_its_analysis_reads(preset, error_rate, latencies):
    """The series and matchers of the preset (slipway.inference.providers.prometheus_queries), selected
    by the pod labels the analysis selects (namespace, deployment)."""
    spec = PRESETS[preset]
    row = ROWS[dashboard.PRESET_ROWS[preset]]
    assert {p["title"] for p in row} == {error_rate, *latencies}
    (query,) = dashboard.queries(panel(error_rate), SENTINELS)
    assert metric_names(query) == {spec.requests}
    assert matcher(spec.failed_requests) in [m for s in selectors(query) for m in s]
    for title, histograms in latencies.items():
        (query,) = dashboard.queries(panel(title), SENTINELS)
        assert metric_names(query) == {f"{h}_bucket" for h in histograms}
    for p in row:
        for s in selectors(dashboard.queries(p, SENTINELS)[0]):
            labels = {m["name"]: m["value"] for m in s}
            assert (labels[NAMESPACE_LABEL], labels[DEPLOYMENT_LABEL]) == (NS, NAME), (p["title"], s)


def test_the_gateway_presets_panels_read_traefiks_and_istios_series_of_each_tracks_service():
    row = ROWS[dashboard.PRESET_ROWS["gateway"]]
    assert [p["title"] for p in row] == [
        "Error rate by track (preset gateway: Traefik, Istio)",
        "p95 latency by track (preset gateway: Traefik, Istio)",
    ]
    errors, latency = (dashboard.queries(p, SENTINELS) for p in row)  # each: Traefik's, then Istio's
    assert [metric_names(q) for q in errors] == [{TRAEFIK.requests}, {ISTIO.requests}]
    assert [metric_names(q) for q in latency] == [{f"{TRAEFIK.latency}_bucket"}, {f"{ISTIO.latency}_bucket"}]
    for query, gateway in zip(errors, (TRAEFIK, ISTIO), strict=True):
        assert matcher(f'{gateway.code_label}=~"5.."') in [m for s in selectors(query) for m in s]
    assert latency[1].endswith(f" * {ISTIO.latency_unit:g}")  # Istio's milliseconds, in seconds
    istio = [{m["name"]: m["value"] for m in s} for q in (errors[1], latency[1]) for s in selectors(q)]
    assert all(s["reporter"] == "destination" and s[ISTIO.namespace_label] == NS for s in istio)


def test_the_traefik_panels_select_the_label_a_running_traefik_wrote_and_name_its_track():
    ns = "t-test-mlflow-models-serve-is-canaried-and-d21b84"  # seen on the local cluster's Traefik v3.7.13
    seen = f"httproute-{ns}-scorer-gw-{ns}-web-ep-web-0-f9cab25143929d32ce91-svc-{ns}-scorer-canary-1@kubernetesgateway"
    traefik = dashboard.queries(panel("Error rate by track (preset gateway: Traefik, Istio)"), {})[0]
    cases = [
        ({"namespace": ns, "name": "scorer"}, True),
        ({"namespace": ns, "name": "other"}, False),
        ({"namespace": "t", "name": "scorer"}, False),
        ({"namespace": dashboard.ALL, "name": dashboard.ALL}, True),
    ]
    for values, selected in cases:
        (service,) = {
            m["value"] for s in selectors(dashboard.fill(traefik, values)) for m in s if m["name"] == "service"
        }
        assert (re.fullmatch(service, seen) is not None) is selected, values
    backend = re.search(r'"backend", "\$1", "service", "([^"]+)"', traefik)
    assert backend is not None
    assert re.fullmatch(backend.group(1), seen).group(1) == f"{ns}-scorer-canary"  # type: ignore[union-attr]


def test_the_monitoring_page_says_what_the_dashboard_holds():
    page = (ROOT / "docs" / "how-to" / "monitoring.md").read_text()
    counted = re.search(r"slipway-dashboard\.json`, (\d+) panels in (\d+) rows", page)
    assert counted is not None, "docs/how-to/monitoring.md names the dashboard's panel and row counts"
    assert (int(counted.group(1)), int(counted.group(2))) == (len(PANELS), len(ROWS))
    for title in ROWS:
        assert f"**{title}**" in page, f"docs/how-to/monitoring.md does not name the row {title}"
