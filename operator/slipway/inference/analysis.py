"""Canary analysis: the metrics that gate each rollout step, from measurements to a verdict.

Pure: no I/O here, and nothing imported does any. Three parts:

- ``evaluate``: the canary's (and, for ``maxRelativeToStable``, the stable's) measurements →
  one ``MetricResult`` per metric, shaped as ``status.analysis[]``.
- :class:`Provider`: where values come from, one measurement of a metric on one track's pods.
  Prometheus is one provider; the providers and the registry that picks one per metric are
  :mod:`slipway.inference.providers` (they do the I/O).
- ``judge``: measure every metric through a provider and evaluate.

Safety rules: no data follows ``noData`` (``inconclusive`` | ``fail`` | ``pass``); a source
that cannot be reached, or refuses a query, makes the metric Inconclusive whatever ``noData``
says: never promote blind, never roll back because monitoring is down.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from slipway.clock import rfc3339
from slipway.inference.model import AnalysisMetric
from slipway.status.conditions import bounds_text

Verdict = Literal["Passed", "Failed", "Inconclusive"]
NoDataPolicy = Literal["inconclusive", "fail", "pass"]
CANARY_TRACK = "canary"
STABLE_TRACK = "stable"

# With no metrics in the spec the canary must keep its 5xx share at or under 5% and its p95
# latency within 1.5× the stable's: the two regressions every model server can show.
DEFAULT_METRICS: tuple[AnalysisMetric, ...] = (
    AnalysisMetric(name="errorRate", max=0.05),
    AnalysisMetric(name="latencyP95Seconds", max_relative_to_stable=1.5),
)

ANALYSIS_FAILED = "AnalysisFailed"  # status.lastRollback.reason of a failed analysis

_NO_DATA_VERDICT: dict[str, Verdict] = {"inconclusive": "Inconclusive", "fail": "Failed", "pass": "Passed"}

# Cost gates: the source measures a pod's throughput (answered requests, generated tokens per second;
# Prometheus: prometheus_queries.per_pod_second); :class:`Priced` turns it into a cost per unit with
# the price of one of the track's pods per hour.
PER_UNIT = {"costPer1kRequests": 1_000.0, "costPerMillionTokens": 1_000_000.0}


@dataclass(frozen=True)
class Measurement:
    """What a provider answered for one metric of one track (``query``: what it asked, as status shows it)."""

    query: str
    value: float | None = None  # None: no data (no series, or NaN such as 0/0 without traffic)
    error: str | None = None  # why there is no answer at all: unreachable, query refused


@dataclass(frozen=True)
class MetricResult:
    """One evaluation of one metric, as ``status.analysis[]`` records it, with a message for people."""

    metric: str
    query: str
    value: float | None
    threshold: str
    result: Verdict
    time: str
    message: str
    stable_value: float | None = None
    dry_run: bool = False  # evaluated and shown, never decides

    def to_status(self) -> dict[str, object]:
        """The ``AnalysisResult`` of the status (infinities left out: JSON cannot carry them)."""
        out: dict[str, object] = {
            "metric": self.metric,
            "query": self.query,
            "threshold": self.threshold,
            "result": self.result,
            "time": self.time,
            "message": self.message,
        }
        if self.value is not None and math.isfinite(self.value):
            out["value"] = self.value
        if self.dry_run:
            out["dryRun"] = True
        return out


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else ("+Inf" if value > 0 else str(value))


def threshold_text(metric: AnalysisMetric, stable_value: float | None = None) -> str:
    """The rule as people read it, e.g. ``<= 0.05`` or ``<= 1.5 × stable (0.12)``."""
    parts = bounds_text(metric.min, metric.max, _fmt)
    if metric.max_relative_to_stable is not None:
        relative = f"<= {_fmt(metric.max_relative_to_stable)} × stable"
        parts.append(f"{relative} ({_fmt(stable_value)})" if stable_value is not None else relative)
    return " and ".join(parts)


def evaluate_metric(
    metric: AnalysisMetric, canary: Measurement, stable: Measurement | None, no_data: NoDataPolicy | str, now: str
) -> MetricResult:
    """Judge one metric: ``min``/``max`` on the canary, then ``maxRelativeToStable`` against the stable."""
    stable_value = stable.value if stable is not None and stable.error is None else None
    threshold = threshold_text(metric, stable_value)
    name = metric.name

    def result(verdict: Verdict, message: str) -> MetricResult:
        if metric.dry_run:
            message = f"{message} (dry run: shown, never decides)"
        return MetricResult(
            name, canary.query, canary.value, threshold, verdict, now, message, stable_value, metric.dry_run
        )

    if canary.error is not None:
        return result("Inconclusive", f"{name}: no answer for the canary, so no verdict: {canary.error}")
    if canary.value is None:
        return result(
            _NO_DATA_VERDICT[no_data],
            f"{name}: no data for the canary (noData: {no_data}); is traffic reaching it, and is it scraped?",
        )
    value = canary.value
    if math.isnan(value):  # NaN passes every comparison: never a verdict, whatever noData says
        return result("Inconclusive", f"{name} of the canary is NaN, not a number to judge")
    if metric.min is not None and value < metric.min:
        return result("Failed", f"{name} of the canary is {_fmt(value)}, below the minimum {_fmt(metric.min)}")
    if metric.max is not None and value > metric.max:
        return result("Failed", f"{name} of the canary is {_fmt(value)}, above the maximum {_fmt(metric.max)}")
    factor = metric.max_relative_to_stable
    if factor is not None:
        if stable is None or stable.error is not None:
            why = stable.error if stable is not None else "not measured"
            return result("Inconclusive", f"{name}: no answer for the stable track to compare with: {why}")
        if stable.value is None:
            return result(
                _NO_DATA_VERDICT[no_data], f"{name}: no data for the stable track to compare with (noData: {no_data})"
            )
        if not math.isfinite(stable.value):
            return result("Inconclusive", f"{name} of the stable track is {stable.value}, not a number to compare with")
        if value > factor * stable.value:
            return result(
                "Failed",
                f"{name} of the canary is {_fmt(value)}, above {_fmt(factor)} × the stable's {_fmt(stable.value)}",
            )
    if math.isinf(value):  # beyond no bound it was given (a max alone with -Inf, a min alone with +Inf)
        return result("Inconclusive", f"{name} of the canary is {value}, not a number to pass")
    return result("Passed", f"{name} of the canary is {_fmt(value)}, within {threshold}")


def evaluate(
    metrics: Sequence[AnalysisMetric],
    canary: Sequence[Measurement],
    stable: Sequence[Measurement | None],
    no_data: NoDataPolicy | str,
    now: str,
) -> list[MetricResult]:
    """Judge every metric; ``canary`` and ``stable`` are aligned with ``metrics`` (stable None: not measured)."""
    return [evaluate_metric(m, c, s, no_data, now) for m, c, s in zip(metrics, canary, stable, strict=True)]


@dataclass(frozen=True)
class AnalysisOutcome:
    """The results of one analysis and their verdict: Failed if any failed, Passed if all passed.

    ``metric`` and ``value`` name the first failure (for ``status.lastRollback``, whose reason is
    ``ANALYSIS_FAILED``); ``reason`` says why the verdict is what it is, for conditions and Events.
    """

    results: tuple[MetricResult, ...]
    source_unavailable: bool = False  # true: Inconclusive because a source (monitoring) is down
    costs: Mapping[str, dict[str, object]] = field(default_factory=dict)  # track -> status.<track>.cost

    @property
    def deciding(self) -> tuple[MetricResult, ...]:
        """The results that decide: every metric but those in ``dryRun``."""
        return tuple(r for r in self.results if not r.dry_run)

    @property
    def verdict(self) -> Verdict:
        verdicts = {r.result for r in self.deciding}
        if "Failed" in verdicts:
            return "Failed"
        return "Passed" if verdicts <= {"Passed"} and (verdicts or self.results) else "Inconclusive"

    @property
    def first_failure(self) -> MetricResult | None:
        return next((r for r in self.deciding if r.result == "Failed"), None)

    @property
    def metric(self) -> str | None:
        failure = self.first_failure
        return failure.metric if failure else None

    @property
    def value(self) -> float | None:
        failure = self.first_failure
        return failure.value if failure and failure.value is not None and math.isfinite(failure.value) else None

    @property
    def reason(self) -> str:
        verdict = self.verdict
        if verdict == "Passed":
            shown = len(self.results) - len(self.deciding)
            dry = f" ({shown} more in dry run)" if shown else ""
            return f"all {len(self.deciding)} analysis metrics passed{dry}"
        deciding = next((r for r in self.deciding if r.result == verdict), None)
        return deciding.message if deciding else "no analysis metric was measured"

    def to_status(self) -> list[dict[str, object]]:
        """``status.analysis``."""
        return [r.to_status() for r in self.results]


class Provider(Protocol):
    """Where analysis values come from: one measurement of a metric on one track's pods.
    ``unavailable`` says why, once the source is found unreachable; it is then asked no more."""

    unavailable: str | None

    def measure(self, metric: AnalysisMetric, track: str) -> Measurement: ...


class Priced:
    """A provider whose cost metrics (PER_UNIT, built-in) are priced: ``inner`` measures a pod's
    throughput (see PER_UNIT) and the value is ``per_hour[track]`` (one pod's price) over it,
    per 1K requests or 1M tokens. No price for the track: an error naming it (Inconclusive: never promoted
    blind); nothing served: no data."""

    def __init__(self, inner: Provider, per_hour: Mapping[str, float | None], missing: Mapping[str, str]) -> None:
        self.inner, self.per_hour, self.missing = inner, per_hour, missing

    @property
    def unavailable(self) -> str | None:
        return self.inner.unavailable

    @unavailable.setter
    def unavailable(self, value: str | None) -> None:
        self.inner.unavailable = value

    def measure(self, metric: AnalysisMetric, track: str) -> Measurement:
        unit = PER_UNIT.get(metric.name) if metric.query is None else None
        hourly = self.per_hour.get(track)
        if unit is not None and hourly is None:  # nothing to ask the source: the price is what is missing
            why = self.missing.get(track) or "no price configured (--prices-file)"
            return Measurement("", error=f"the {track}'s cost per hour is unknown: {why}")
        measured = self.inner.measure(metric, track)
        if unit is None or hourly is None or measured.error is not None or measured.value is None:
            return measured
        if measured.value <= 0:
            return Measurement(measured.query)  # nothing answered in the window: no data
        return Measurement(f"{_fmt(hourly)}/h / ({measured.query})", value=hourly / (measured.value * 3600) * unit)


@dataclass(frozen=True)
class Pricing:
    """What one pod of each track costs per hour (None: unknown, ``missing`` says why), and how many
    pods it has now, in ``currency``."""

    per_hour: Mapping[str, float | None]
    missing: Mapping[str, str]
    currency: str = ""
    pods: Mapping[str, int] = field(default_factory=dict)


_COST_FIELDS = {
    "costPer1kRequests": ("requestsPerPodSecond", "per1kRequests"),
    "costPerMillionTokens": ("tokensPerPodSecond", "perMillionTokens"),
}
_THROUGHPUT = {unit: AnalysisMetric.model_construct(name=unit, query=None, dry_run=False) for unit in PER_UNIT}


def serving_cost(provider: Provider, pricing: Pricing, track: str, now: datetime | str) -> dict[str, object]:
    """status.<track>.cost: the track's price per hour (its pods now), the answered requests and
    generated tokens per second of its busiest pod over the window, and the cost per 1K requests and
    per 1M tokens one pod's price over them makes."""
    out: dict[str, object] = {"time": rfc3339(now)}
    hourly = pricing.per_hour.get(track)
    if pricing.currency:
        out["currency"] = pricing.currency
    if hourly is not None:
        out["perHour"] = round(hourly * pricing.pods.get(track, 1), 6)
    else:
        out["message"] = pricing.missing.get(track) or "no price configured (--prices-file)"
    for name, (rate_key, cost_key) in _COST_FIELDS.items():
        rate = provider.measure(_THROUGHPUT[name], track).value
        if rate is None:
            continue
        out[rate_key] = round(rate, 6)
        if hourly is not None and rate > 0:
            out[cost_key] = round(hourly / (rate * 3600) * PER_UNIT[name], 6)
    return out


def judge(
    metrics: Sequence[AnalysisMetric],
    deciding: Provider,
    dry: Provider,
    no_data: NoDataPolicy | str,
    now: datetime | str,
    subject: str = CANARY_TRACK,
) -> AnalysisOutcome:
    """Measure ``metrics`` on ``subject``'s pods (and the stable's where a metric compares with it)
    and judge them. The metrics that decide are measured first, through ``deciding``; those in dry
    run through ``dry`` (a dry-run query that times out, a new and heavy one, must not leave the
    deciding ones unmeasured); once the source is down for the deciding ones, the dry-run ones are
    not asked either. ``subject`` STABLE_TRACK judges the stable alone (a bake)."""

    def measure(metric: AnalysisMetric, track: str) -> Measurement:
        if metric.dry_run and deciding.unavailable is not None:
            dry.unavailable = deciding.unavailable
        return (dry if metric.dry_run else deciding).measure(metric, track)

    order = sorted(range(len(metrics)), key=lambda i: metrics[i].dry_run)  # deciding ones first
    subject_values: list[Measurement | None] = [None] * len(metrics)
    stable_values: list[Measurement | None] = [None] * len(metrics)
    for i in order:
        subject_values[i] = measure(metrics[i], subject)
    for i in order:
        if metrics[i].max_relative_to_stable is not None and subject == CANARY_TRACK:
            stable_values[i] = measure(metrics[i], STABLE_TRACK)
    measured = [m for m in subject_values if m is not None]
    results = evaluate(metrics, measured, stable_values, no_data, rfc3339(now))
    return AnalysisOutcome(tuple(results), source_unavailable=deciding.unavailable is not None)


def not_measured(metrics: Sequence[AnalysisMetric | str], now: datetime | str, message: str) -> AnalysisOutcome:
    """An Inconclusive analysis: nothing could be measured (e.g. no source can be asked). Metrics in
    dry run stay in dry run: they hold nothing."""
    when = rfc3339(now)
    results = [
        MetricResult(m, "", None, "", "Inconclusive", when, message)
        if isinstance(m, str)
        else MetricResult(m.name, "", None, "", "Inconclusive", when, message, dry_run=m.dry_run)
        for m in metrics
    ]
    return AnalysisOutcome(tuple(results) or (MetricResult("analysis", "", None, "", "Inconclusive", when, message),))
