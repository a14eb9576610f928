"""Canary analysis: query resolution per preset, evaluation of each rule, verdicts, and
slipway.inference.providers.analyse over a Prometheus answering through httpx.MockTransport (the real
one is in tests/integration; hostile answers from real HTTP servers in test_prometheus_client.py)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest
from prometheus_client import REGISTRY

from slipway.clock import rfc3339
from slipway.inference.analysis import (
    DEFAULT_METRICS,
    AnalysisOutcome,
    Measurement,
    MetricResult,
    evaluate,
    evaluate_metric,
    threshold_text,
)
from slipway.inference.model import BUILTIN_METRICS, Analysis, AnalysisMetric, AnalysisResult
from slipway.inference.providers import PROVIDERS, Services, Target, analyse
from slipway.inference.providers.prometheus_queries import (
    _BUILTIN_QUERIES,
    MIN_WINDOW_SECONDS,
    QueryError,
    analysis_window,
    resolve_query,
)
from slipway.prometheus import PrometheusClient

NOW = "2025-01-01T00:00:00Z"
SELECTOR = 'namespace="team-a", slipway_dev_deployment="digits", slipway_dev_track="canary"'


def metric(**kw: object) -> AnalysisMetric:
    return AnalysisMetric.model_validate(kw)


def resolve(name: str, preset: str = "slipway", window: str = "30s") -> str:
    return resolve_query(metric(name=name, max=1), preset, "canary", "team-a", "digits", window)


# --- query resolution -------------------------------------------------------------------------


def error_ratio(counter: str, failed: str) -> str:
    def counted(series: str) -> str:
        return (f"((sum(increase({series}[30s])) or vector(0)) + (sum(min_over_time({series}[30s]) unless "
                f"last_over_time({series}[30s] offset 30s)) or vector(0)))")  # fmt: skip

    failures = counted(f"{counter}{{{SELECTOR}, {failed}}}")
    ratio = f"({failures} or vector(0)) / {counted(f'{counter}{{{SELECTOR}}}')}"
    series = f"{counter}{{{SELECTOR}}}"
    last = f"last_over_time({series}[30s])"
    served = (f"sum(clamp_min({last} - (idelta({series}[30s]) or {last}) - (last_over_time({series}[30s] offset 30s) "
              f"or {last} * 0), 0))")  # fmt: skip
    return f"({ratio}) and on() (({served} > 0) or ({failures} >= 3))"


def test_every_builtin_metric_of_the_api_is_answered_by_one_source():
    # A source that claims metric names answers them; Prometheus has a query for every other one.
    claimed = {name for source in PROVIDERS.values() for name in source.metrics}
    assert set(BUILTIN_METRICS) - claimed == set(_BUILTIN_QUERIES)
    assert claimed <= set(BUILTIN_METRICS)


@pytest.mark.parametrize(
    ("preset", "name", "promql"),
    [
        (
            "slipway",
            "errorRate",
            error_ratio("slipway_requests_total", 'code=~"5.."'),
        ),
        (
            "slipway",
            "latencyP95Seconds",
            f"histogram_quantile(0.95, sum by (le) (rate(slipway_request_duration_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        (
            "slipway",
            "latencyP99Seconds",
            f"histogram_quantile(0.99, sum by (le) (rate(slipway_request_duration_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        (
            "slipway",
            "ttftP95Seconds",
            "histogram_quantile(0.95, sum by (le) "
            f"(rate(slipway_time_to_first_token_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        (
            "slipway",
            "tpotP95Seconds",
            "histogram_quantile(0.95, sum by (le) "
            f"(rate(slipway_time_per_output_token_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        (
            "vllm",
            "errorRate",
            error_ratio("http_requests_total", 'status=~"5.."'),
        ),
        (
            "vllm",
            "latencyP95Seconds",
            f"histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        (
            "vllm",
            "latencyP99Seconds",
            f"histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        (
            "vllm",
            "ttftP95Seconds",
            f"histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        (
            "vllm",
            "tpotP95Seconds",
            f"histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{{{SELECTOR}}}[30s])))"
            " or histogram_quantile(0.95, sum by (le) "
            f"(rate(vllm:time_per_output_token_seconds_bucket{{{SELECTOR}}}[30s])))",
        ),
        ("vllm", "queueDepth", f"avg(avg_over_time(vllm:num_requests_waiting{{{SELECTOR}}}[30s]))"),
        ("vllm", "kvCacheUsage", f"avg(avg_over_time(vllm:kv_cache_usage_perc{{{SELECTOR}}}[30s]))"),
    ],
)
def test_builtin_queries_per_preset(preset, name, promql):
    assert resolve(name, preset) == promql


def test_the_track_and_window_go_into_the_selector():
    q = resolve_query(metric(name="latencyP95Seconds", max=1), "slipway", "stable", "ns", "d", "45s")
    assert 'slipway_dev_track="stable"' in q and "[45s]" in q and 'namespace="ns"' in q


@pytest.mark.parametrize(
    "template",
    [
        'sum(x{t="{{ track }}", n="{{ namespace }}", d="{{ deployment }}"})',
        'sum(x{t="{{track}}", n="{{namespace}}", d="{{deployment}}"})',
        'sum(x{t="{{   track }}", n="{{namespace  }}", d="{{\tdeployment }}"})',
    ],
)
def test_custom_query_placeholders_tolerate_spaces(template):
    q = resolve_query(metric(name="loss", max=1, query=template), "vllm", "canary", "team-a", "digits", "30s")
    assert q == 'sum(x{t="canary", n="team-a", d="digits", namespace="team-a"})'


def test_custom_query_overrides_a_builtin_name():
    q = resolve_query(metric(name="errorRate", max=1, query="vector(1)"), "slipway", "canary", "a", "b", "30s")
    assert q == "vector(1)"


def test_unknown_placeholder_is_a_query_error_naming_the_fix():
    with pytest.raises(QueryError, match=r"unknown placeholder \{\{ pod \}\}.*\{\{ track \}\}"):
        resolve_query(metric(name="x", max=1, query="up{pod='{{ pod }}'}"), "slipway", "canary", "a", "b", "30s")


def test_label_values_are_escaped():
    q = resolve_query(metric(name="errorRate", max=1), "slipway", "canary", 'a"b', "d", "30s")
    assert 'namespace="a\\"b"' in q


@pytest.mark.parametrize(
    ("interval", "window"),
    [("5s", "20s"), ("500ms", "20s"), ("20s", "20s"), ("30s", "30s"), ("1m30s", "90s"), ("20500ms", "20500ms")],
)
def test_window_is_the_interval_but_never_under_the_floor(interval, window):
    assert MIN_WINDOW_SECONDS == 20
    assert analysis_window(interval) == window


# --- evaluation of one metric ----------------------------------------------------------------

Q = "q"


def data(value: float | None) -> Measurement:
    return Measurement(Q, value=value)


DOWN = Measurement(Q, error="Prometheus at http://prom:9090 unreachable: connection refused")


@pytest.mark.parametrize(
    ("rule", "canary", "stable", "no_data", "verdict", "words"),
    [
        # max
        ({"name": "errorRate", "max": 0.05}, data(0.01), None, "inconclusive", "Passed", "within <= 0.05"),
        ({"name": "errorRate", "max": 0.05}, data(0.05), None, "inconclusive", "Passed", "within"),
        ({"name": "errorRate", "max": 0.05}, data(0.3), None, "inconclusive", "Failed", "0.3, above the maximum 0.05"),
        ({"name": "errorRate", "max": 0.05}, data(math.inf), None, "pass", "Failed", "+Inf, above the maximum"),
        # min
        ({"name": "qps", "min": 1, "query": "x"}, data(2.0), None, "inconclusive", "Passed", "within >= 1"),
        ({"name": "qps", "min": 1, "query": "x"}, data(0.5), None, "inconclusive", "Failed", "below the minimum 1"),
        # min and max together
        ({"name": "qps", "min": 1, "max": 5, "query": "x"}, data(6), None, "inconclusive", "Failed", "above"),
        # relative to stable
        ({"name": "latencyP95Seconds", "maxRelativeToStable": 1.5}, data(0.12), data(0.1), "fail", "Passed", "1.5"),
        ({"name": "latencyP95Seconds", "maxRelativeToStable": 1.5}, data(0.15), data(0.1), "fail", "Passed", "0.1"),
        (
            {"name": "latencyP95Seconds", "maxRelativeToStable": 1.5},
            data(0.3),
            data(0.1),
            "pass",
            "Failed",
            "0.3, above 1.5 × the stable's 0.1",
        ),
        # absolute and relative: absolute fails first
        (
            {"name": "latencyP95Seconds", "max": 0.2, "maxRelativeToStable": 1.5},
            data(0.25),
            data(0.2),
            "inconclusive",
            "Failed",
            "above the maximum 0.2",
        ),
        # canary without data: the policy decides
        ({"name": "errorRate", "max": 0.05}, data(None), None, "inconclusive", "Inconclusive", "noData: inconclusive"),
        ({"name": "errorRate", "max": 0.05}, data(None), None, "fail", "Failed", "no data for the canary"),
        ({"name": "errorRate", "max": 0.05}, data(None), None, "pass", "Passed", "noData: pass"),
        # stable without data: the policy decides too
        (
            {"name": "latencyP95Seconds", "maxRelativeToStable": 1.5},
            data(0.1),
            data(None),
            "inconclusive",
            "Inconclusive",
            "no data for the stable track",
        ),
        ({"name": "latencyP95Seconds", "maxRelativeToStable": 1.5}, data(0.1), data(None), "fail", "Failed", "stable"),
        ({"name": "latencyP95Seconds", "maxRelativeToStable": 1.5}, data(0.1), data(None), "pass", "Passed", "stable"),
        # Prometheus down: Inconclusive whatever the policy
        ({"name": "errorRate", "max": 0.05}, DOWN, None, "fail", "Inconclusive", "unreachable"),
        ({"name": "errorRate", "max": 0.05}, DOWN, None, "pass", "Inconclusive", "unreachable"),
        ({"name": "latencyP95Seconds", "maxRelativeToStable": 1.5}, data(0.1), DOWN, "fail", "Inconclusive", "stable"),
        (
            {"name": "latencyP95Seconds", "maxRelativeToStable": 1.5},
            data(0.1),
            DOWN,
            "pass",
            "Inconclusive",
            "unreachable",
        ),
    ],
)
def test_evaluate_metric(rule, canary, stable, no_data, verdict, words):
    result = evaluate_metric(metric(**rule), canary, stable, no_data, NOW)
    assert result.result == verdict, result.message
    assert words in result.message
    assert result.metric == rule["name"] and result.time == NOW and result.query == Q


@pytest.mark.parametrize(
    ("rule", "stable_value", "text"),
    [
        ({"name": "errorRate", "max": 0.05}, None, "<= 0.05"),
        ({"name": "x", "min": 10, "query": "q"}, None, ">= 10"),
        ({"name": "x", "min": 1, "max": 2, "query": "q"}, None, ">= 1 and <= 2"),
        ({"name": "latencyP95Seconds", "maxRelativeToStable": 1.5}, 0.12, "<= 1.5 × stable (0.12)"),
        ({"name": "latencyP95Seconds", "maxRelativeToStable": 1.5}, None, "<= 1.5 × stable"),
    ],
)
def test_threshold_text(rule, stable_value, text):
    assert threshold_text(metric(**rule), stable_value) == text


def test_result_to_status_matches_the_status_model():
    result = evaluate_metric(metric(name="errorRate", max=0.05), data(0.3), None, "inconclusive", NOW)
    status = result.to_status()
    assert status == {"metric": "errorRate", "query": Q, "value": 0.3, "threshold": "<= 0.05", "result": "Failed",
                      "time": NOW, "message": result.message}  # fmt: skip
    assert "0.3" in result.message
    AnalysisResult.model_validate(status)


@pytest.mark.parametrize("value", [None, math.inf])
def test_status_leaves_out_values_json_cannot_carry(value):
    result = MetricResult("m", Q, value, "<= 1", "Failed", NOW, "")
    assert "value" not in result.to_status()


# --- verdicts --------------------------------------------------------------------------------


def outcome(*verdicts: str, unavailable: bool = False) -> AnalysisOutcome:
    results = tuple(
        MetricResult(f"m{i}", Q, float(i), "<= 1", v, NOW, f"m{i} is {v}")  # type: ignore[arg-type]
        for i, v in enumerate(verdicts)
    )
    return AnalysisOutcome(results, source_unavailable=unavailable)


@pytest.mark.parametrize(
    ("verdicts", "verdict", "failed_metric", "message"),
    [
        (("Passed", "Passed"), "Passed", None, "all 2 analysis metrics passed"),
        (("Passed", "Inconclusive"), "Inconclusive", None, "m1 is Inconclusive"),
        (("Inconclusive", "Failed", "Failed"), "Failed", "m1", "m1 is Failed"),
        (("Failed", "Passed"), "Failed", "m0", "m0 is Failed"),
    ],
)
def test_verdict_and_first_failure(verdicts, verdict, failed_metric, message):
    o = outcome(*verdicts)
    assert o.verdict == verdict
    assert o.metric == failed_metric
    assert o.reason == message
    assert o.value == (float(failed_metric[1:]) if failed_metric else None)


def test_evaluate_keeps_the_order_of_the_metrics():
    metrics = [metric(name="errorRate", max=0.05), metric(name="latencyP95Seconds", maxRelativeToStable=2)]
    results = evaluate(metrics, [data(0.0), data(0.1)], [None, data(0.1)], "inconclusive", NOW)
    assert [(r.metric, r.result) for r in results] == [("errorRate", "Passed"), ("latencyP95Seconds", "Passed")]


def test_default_metrics():
    assert [(m.name, m.max, m.max_relative_to_stable) for m in DEFAULT_METRICS] == [
        ("errorRate", 0.05, None),
        ("latencyP95Seconds", None, 1.5),
    ]


# --- the operator's analysis over a scripted Prometheus ----------------------------------------


def prometheus(answer) -> tuple[PrometheusClient, list[str]]:
    """A client whose Prometheus answers ``answer(query) -> (status, body)``; records the queries."""
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        asked.append(query)
        status, body = answer(query)
        return httpx.Response(status, json=body)

    return PrometheusClient("http://prom:9090", http=httpx.Client(transport=httpx.MockTransport(handle))), asked


def analysed(
    client: PrometheusClient, settings: Analysis, namespace: str, deployment: str, now: datetime | str = NOW
) -> AnalysisOutcome:
    """The analysis the operator runs (providers.analyse), ``client`` lent as its own Prometheus."""
    return analyse(Target(settings, namespace, deployment), Services(None, client, client.timeout), now)


def sent(outcome: str) -> float:
    """How many queries were sent to Prometheus with this outcome, as the operator's metric counts them."""
    labels = {"service": "prometheus", "outcome": outcome}
    return REGISTRY.get_sample_value("slipway_external_requests_total", labels) or 0


def vector(value: float | None) -> dict[str, object]:
    result = [] if value is None else [{"metric": {}, "value": [0, json.dumps(value)]}]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_analysis_with_default_metrics_queries_both_tracks_where_needed():
    def answer(q: str) -> tuple[int, dict[str, object]]:
        if "slipway_requests_total" in q:
            return 200, vector(0.3)
        return 200, vector(0.2 if 'track="canary"' in q else 0.1)

    client, asked = prometheus(answer)
    ok = sent("ok")
    o = analysed(client, Analysis(interval="10s"), "team-a", "digits", NOW)
    assert len(asked) == 3  # errorRate on the canary; p95 latency on both tracks
    assert sent("ok") == ok + 3
    assert all("[20s]" in q for q in asked)  # the window floor
    assert o.verdict == "Failed"
    assert (o.metric, o.value) == ("errorRate", 0.3)
    assert o.reason == "errorRate of the canary is 0.3, above the maximum 0.05"
    assert [r["result"] for r in o.to_status()] == ["Failed", "Failed"]
    assert o.results[1].threshold == "<= 1.5 × stable (0.1)"


def test_analysis_unreachable_is_inconclusive_and_stops_asking():
    def answer(q: str) -> tuple[int, dict[str, object]]:
        raise httpx.ConnectError("connection refused")

    client, asked = prometheus(answer)
    errors = sent("error")
    o = analysed(client, Analysis(noData="fail"), "team-a", "digits", NOW)
    assert o.verdict == "Inconclusive" and o.source_unavailable
    assert len(asked) == 1 and sent("error") == errors + 1
    assert "unreachable" in o.reason and "neither promotes nor rolls back" in o.reason
    assert o.metric is None and o.value is None


def test_analysis_refused_query_is_inconclusive_with_the_fix():
    client, _ = prometheus(lambda q: (400, {"status": "error", "errorType": "bad_data", "error": "parse error"}))
    analysis = Analysis(metrics=[metric(name="custom", max=1, query="rate(x)")])  # Prometheus: not a range
    o = analysed(client, analysis, "team-a", "digits", NOW)
    assert o.verdict == "Inconclusive" and not o.source_unavailable
    assert "refused the query (400 bad_data)" in o.reason and "spec.rollout.analysis.metrics" in o.reason
    assert "parse error" not in o.reason  # never Prometheus' own words (see test_prometheus_client.py)


def test_analysis_several_series_is_inconclusive_asking_to_aggregate():
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "a"}, "value": [0, "1"]}, {"metric": {"pod": "b"}, "value": [0, "2"]}]}}  # fmt: skip
    client, _ = prometheus(lambda q: (200, body))
    o = analysed(client, Analysis(metrics=[metric(name="c", max=5, query="x")]), "a", "b", NOW)
    assert o.verdict == "Inconclusive" and "aggregate it to one" in o.reason


def test_analysis_unknown_placeholder_is_inconclusive_without_asking():
    client, asked = prometheus(lambda q: (200, vector(1)))
    o = analysed(client, Analysis(metrics=[metric(name="c", max=5, query="x{p='{{ pod }}'}")]), "a", "b", NOW)
    assert o.verdict == "Inconclusive" and "unknown placeholder" in o.reason and asked == []


def test_analysis_healthy_canary_passes():
    client, _ = prometheus(lambda q: (200, vector(0.0 if "requests" in q else 0.1)))
    o = analysed(client, Analysis(), "team-a", "digits", NOW)
    assert o.verdict == "Passed" and o.first_failure is None


@pytest.mark.parametrize(
    ("now", "text"),
    [
        (datetime(2025, 1, 2, 3, 4, 5, 678, tzinfo=UTC), "2025-01-02T03:04:05Z"),
        (datetime(2025, 1, 2, 4, 4, 5, tzinfo=timezone(timedelta(hours=1))), "2025-01-02T03:04:05Z"),
        (datetime(2025, 1, 2, 3, 4, 5), "2025-01-02T03:04:05Z"),
        ("2025-01-02T03:04:05Z", "2025-01-02T03:04:05Z"),
    ],
)
def test_times_are_written_as_the_status_writes_them(now, text):
    assert rfc3339(now) == text
    client, _ = prometheus(lambda q: (200, vector(0.0)))
    o = analysed(client, Analysis(metrics=[metric(name="errorRate", max=0.05)]), "a", "b", now)
    assert o.results[0].time == text


def test_a_version_narrows_the_track_to_its_pods():
    query = resolve_query(metric(name="errorRate", max=0.05), "slipway", "canary", "team-a", "digits", "20s", "7")
    assert 'slipway_dev_track="canary", slipway_dev_model_version="7"' in query
    custom = metric(name="q", max=1, query='up{slipway_dev_model_version="{{ version }}"}')
    confined = 'up{slipway_dev_model_version="7", namespace="ns"}'
    assert resolve_query(custom, "slipway", "canary", "ns", "d", "20s", "7") == confined


def test_the_query_help_names_every_placeholder_a_query_may_use():
    from slipway.inference.model import AnalysisMetric

    description = AnalysisMetric.model_fields["query"].description or ""
    from slipway.inference.providers.prometheus_queries import PLACEHOLDERS

    for placeholder in PLACEHOLDERS:
        assert "{{ " + placeholder + " }}" in description


def test_a_canary_of_the_same_model_version_is_told_apart_by_its_revision():
    from slipway.inference.providers.prometheus_queries import track_selector

    by_revision = track_selector("ns", "digits", "canary", version="3", revision="ab12")
    assert 'slipway_dev_revision="ab12"' in by_revision and "model_version" not in by_revision
    assert 'slipway_dev_model_version="3"' in track_selector("ns", "digits", "canary", version="3")


def test_a_custom_query_reads_only_its_namespace_and_one_naming_another_is_never_sent():
    client, asked = prometheus(lambda q: (200, vector(0.01)))
    own = metric(name="errors", max=0.05, query='sum(rate(errors_total{slipway_dev_track="{{ track }}"}[1m]))')
    o = analysed(client, Analysis(metrics=[own]), "team-a", "digits", NOW)
    assert o.verdict == "Passed"
    assert asked == ['sum(rate(errors_total{slipway_dev_track="canary", namespace="team-a"}[1m]))']
    other = metric(name="spy", max=1, query='sum(secrets_total{namespace="team-b"})')
    client, asked = prometheus(lambda q: (200, vector(0.01)))
    o = analysed(client, Analysis(metrics=[other]), "team-a", "digits", NOW)
    assert o.verdict == "Inconclusive" and asked == []
    assert 'namespace="team-b"' in o.reason and "spec.rollout.analysis.metrics[].query" in o.reason


@pytest.mark.parametrize("name", ["queueDepth", "kvCacheUsage"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_queue_or_cache_value_never_passes_and_the_query_stays_in_the_namespace(name: str, value: float):
    """A gauge a server exports as NaN or +Inf (or a stable whose value is) gives no verdict either way."""
    from slipway.inference.analysis import evaluate_metric
    from slipway.inference.providers.prometheus_queries import resolve_query

    absolute = AnalysisMetric(name=name, max=4)
    assert evaluate_metric(absolute, Measurement("q", value), None, "inconclusive", "t").result != "Passed"
    floor = AnalysisMetric(name=name, min=0)
    assert evaluate_metric(floor, Measurement("q", value), None, "pass", "t").result == "Inconclusive"
    relative = AnalysisMetric(name=name, maxRelativeToStable=2)
    judged = evaluate_metric(relative, Measurement("q", 1.0), Measurement("q", value), "inconclusive", "t")
    assert judged.result != "Passed"
    query = resolve_query(absolute, "vllm", "canary", "team-a", "llm", "30s")
    assert 'namespace="team-a"' in query and 'slipway_dev_track="canary"' in query
