"""Analysis sources behind one registry (slipway.inference.providers): a source added from this file alone, one
class and one row of PROVIDERS, feeds the real analysis (slipway.inference.analysis) beside Prometheus, each
metric measured by the source that answers it; and the pure evaluation imports nothing that does I/O."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from slipway.config import OperatorConfig
from slipway.inference import providers
from slipway.inference.analysis import Measurement
from slipway.inference.model import Analysis, AnalysisMetric
from slipway.inference.providers import PROVIDERS, Services, Target, analyse, refusals, source_of
from slipway.prometheus import PrometheusClient

NOW = "2026-01-01T00:00:00Z"


class Fixed:
    """The toy provider: fixed values by (metric, track); records what it was asked."""

    def __init__(self, values: dict[tuple[str, str], float | None], asked: list[tuple[str, str]]) -> None:
        self.values, self.asked = values, asked
        self.unavailable: str | None = None

    def measure(self, metric: AnalysisMetric, track: str) -> Measurement:
        self.asked.append((metric.name, track))
        return Measurement(f"fixed:{metric.name}", value=self.values.get((metric.name, track)))


class FixedSource:
    """The toy source: answers the metric named toyScore, and every metric of the preset 'toy'."""

    name = "fixed"
    metrics = frozenset({"toyScore"})
    presets = frozenset({"toy"})

    def __init__(self, values: dict[tuple[str, str], float | None], down: str | None = None) -> None:
        self.values, self.down = values, down
        self.asked: list[tuple[str, str]] = []
        self.opened = self.closed = 0

    def refusal(self, settings: Analysis, config: OperatorConfig) -> str | None:
        return None

    @contextmanager
    def open(self, target: Target, services: Services) -> Iterator[providers.base.Opened]:
        self.opened += 1
        try:
            yield self.down if self.down else (lambda: Fixed(self.values, self.asked))
        finally:
            self.closed += 1


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> FixedSource:
    """The toy source in the registry for one test (one row, nothing else changed)."""
    source = FixedSource({})
    monkeypatch.setitem(PROVIDERS, source.name, source)
    return source


def toy(**kw: Any) -> AnalysisMetric:
    """A metric only the toy source knows. The API takes a name without a query only if it is built
    in, so it is constructed as an API that named the source would validate it."""
    return AnalysisMetric.model_construct(**{"query": None, "dry_run": False, "min": None, "max": None,
                                             "max_relative_to_stable": None, **kw})  # fmt: skip


def prometheus(values: dict[str, float]) -> tuple[PrometheusClient, list[str]]:
    """A Prometheus answering ``values[substring of the query]`` (first match), recording the queries."""
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        asked.append(query)
        value = next((v for k, v in values.items() if k in query), None)
        result = [] if value is None else [{"metric": {}, "value": [0, json.dumps(value)]}]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})

    return PrometheusClient("http://prom:9090", http=httpx.Client(transport=httpx.MockTransport(handle))), asked


def run(metrics: list[AnalysisMetric], client: PrometheusClient | None = None, **settings: object):
    spec = Analysis.model_validate(settings).model_copy(update={"metrics": metrics})  # toy metrics as they are
    target = Target(spec, "team-a", "digits", {"canary": "2", "stable": "1"})
    return analyse(target, Services(None, client, 5.0), NOW)


def test_a_source_added_from_the_test_tree_passes_and_fails_canaries_through_the_real_analysis(fixed):
    fixed.values.update({("toyScore", "canary"): 0.2, ("toyScore", "stable"): 0.1})
    passed = run([toy(name="toyScore", max=0.5)])
    assert passed.verdict == "Passed" and passed.results[0].value == 0.2
    assert passed.results[0].query == "fixed:toyScore" and passed.reason == "all 1 analysis metrics passed"
    failed = run([toy(name="toyScore", max=0.5, max_relative_to_stable=1.5)])
    assert failed.verdict == "Failed" and (failed.metric, failed.value) == ("toyScore", 0.2)
    assert failed.reason == "toyScore of the canary is 0.2, above 1.5 × the stable's 0.1"
    assert failed.to_status()[0]["threshold"] == "<= 0.5 and <= 1.5 × stable (0.1)"
    fixed.values[("toyScore", "canary")] = 0.9
    assert run([toy(name="toyScore", max=0.5)]).verdict == "Failed"
    fixed.values[("toyScore", "canary")] = None  # no data follows noData
    assert run([toy(name="toyScore", max=0.5)]).verdict == "Inconclusive"
    assert run([toy(name="toyScore", max=0.5)], noData="fail").verdict == "Failed"
    assert fixed.opened == fixed.closed == 5  # opened once per analysis, closed after it
    assert ("toyScore", "stable") in fixed.asked


def test_each_metric_is_measured_by_its_own_source_and_the_results_keep_the_specs_order(fixed):
    fixed.values.update({("toyScore", "canary"): 3.0})
    client, asked = prometheus({"slipway_requests_total": 0.01, "fixed_total": 7.0})
    metrics = [AnalysisMetric(name="errorRate", max=0.05), toy(name="toyScore", min=1.0),
               AnalysisMetric(name="toyScore", max=1.0, query="sum(fixed_total)", dryRun=True)]  # fmt: skip
    outcome = run(metrics, client)
    assert [r.metric for r in outcome.results] == ["errorRate", "toyScore", "toyScore"]
    assert [r.result for r in outcome.results] == ["Passed", "Passed", "Failed"]
    assert outcome.verdict == "Passed"  # the failing one is the dry-run query
    assert fixed.asked == [("toyScore", "canary")]  # a query is PromQL, whatever its name: Prometheus's
    assert len(asked) == 2 and asked[1] == 'sum(fixed_total{namespace="team-a"})'
    fixed.values[("toyScore", "canary")] = 0.5
    assert run(metrics, prometheus({"slipway_requests_total": 0.01})[0]).metric == "toyScore"


def test_a_source_is_chosen_by_the_metrics_name_then_by_the_preset(fixed):
    builtin, own = AnalysisMetric(name="errorRate", max=1), AnalysisMetric(name="toyScore", max=1, query="up")
    assert [source_of(m, "slipway") for m in (builtin, own, toy(name="toyScore", max=1))] == [
        "prometheus", "prometheus", "fixed"]  # fmt: skip
    assert source_of(builtin, "toy") == "fixed" and source_of(own, "toy") == "prometheus"
    assert source_of(toy(name="unknown", max=1), "vllm") == "prometheus"  # which says it is not built in
    fixed.values[("errorRate", "canary")] = 0.5
    settings = Analysis(metrics=[builtin]).model_copy(update={"preset": "toy"})
    outcome = analyse(Target(settings, "a", "d"), Services(None, None, 5.0), NOW)
    assert outcome.verdict == "Passed" and fixed.asked == [("errorRate", "canary")]  # no Prometheus needed


def test_a_source_that_cannot_be_asked_holds_only_its_own_metrics(monkeypatch):
    down = FixedSource({}, down="the toy source is switched off: switch it on")
    monkeypatch.setitem(PROVIDERS, down.name, down)
    client, _ = prometheus({"slipway_requests_total": 0.0})
    outcome = run([AnalysisMetric(name="errorRate", max=0.05), toy(name="toyScore", max=1)], client)
    assert [r.result for r in outcome.results] == ["Passed", "Inconclusive"]
    assert outcome.verdict == "Inconclusive" and outcome.reason == down.down
    alone = run([toy(name="toyScore", max=1)], client)  # nothing can be measured: nothing asked
    assert alone.verdict == "Inconclusive" and alone.results[0].message == down.down
    nothing = run([AnalysisMetric(name="errorRate", max=0.05)])  # no Prometheus at all
    assert nothing.verdict == "Inconclusive" and "no Prometheus" in nothing.reason


def test_every_source_checks_the_spec_it_reads(monkeypatch):
    class Picky(FixedSource):
        def refusal(self, settings: Analysis, config: OperatorConfig) -> str | None:
            return "spec.rollout.analysis.preset: the toy source wants preset toy" if settings.preset != "toy" else None

    config = OperatorConfig(prometheus_url="http://prom:9090")
    settings = Analysis(prometheus={"address": "http://elsewhere:9090"})
    assert refusals(Analysis(), config) == []
    assert refusals(settings, config) == [
        "spec.rollout.analysis.prometheus.address 'http://elsewhere:9090' is not a Prometheus the operator may "
        "query; add it to the operator's --allowed-prometheus-urls, or leave the field out to use the operator's "
        "Prometheus"]  # fmt: skip
    monkeypatch.setitem(PROVIDERS, "picky", Picky({}))
    assert refusals(Analysis(), config) == ["spec.rollout.analysis.preset: the toy source wants preset toy"]


PURE = {"slipway", "slipway._version", "slipway.clock", "slipway.models", "slipway.models.base", "slipway.models.pods",
        "slipway.artifact", "slipway.artifact.model", "slipway.inference", "slipway.inference.analysis",
        "slipway.inference.model", "slipway.inference.rollbacks", "slipway.reasons", "slipway.status",
        "slipway.status.conditions"}  # fmt: skip
IO_PACKAGES = ("httpx", "kubernetes", "yaml", "kopf", "prometheus_client", "requests")


def loaded_by(module: str) -> set[str]:
    """The Slipway modules, and the I/O libraries, that importing ``module`` loads (in a fresh interpreter)."""
    probe = (f"import sys, {module}; print(*(m for m in sys.modules if m.startswith('slipway') "
             f"or m.split('.')[0] in {IO_PACKAGES!r}))")  # fmt: skip
    return set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split())


def test_the_pure_evaluation_imports_nothing_that_does_io():
    assert loaded_by("slipway.inference.analysis") <= PURE
    assert {"slipway.prometheus", "httpx"} <= loaded_by(
        "slipway.inference.providers"
    )  # the probe sees I/O when it is there
