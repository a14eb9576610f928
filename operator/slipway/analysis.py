"""Canary analysis: the metrics that gate each rollout step, from PromQL to a verdict.

Pure: no I/O here. Three parts:

- ``resolve_query``: a metric of ``spec.rollout.analysis.metrics[]`` → PromQL for one track.
  Built-in names map to queries per ``preset`` (the metric names of the model server);
  a ``query`` of the user's own has its ``{{ track }}``, ``{{ namespace }}``,
  ``{{ deployment }}`` and ``{{ version }}`` filled in, as the pods' label values carry them
  (``{{ deployment }}`` is the name, hashed past 63 characters).
- ``evaluate``: the canary's (and, for ``maxRelativeToStable``, the stable's) measurements →
  one ``MetricResult`` per metric, shaped as ``status.analysis[]``.
- ``judge``: measure every metric through a :class:`Provider` (where values come from) and
  evaluate. Prometheus is one provider (``slipway.prometheus.PrometheusProvider``, whose
  ``run_analysis`` does the I/O); another source is one class with ``measure``.

Safety rules: no data follows ``noData`` (``inconclusive`` | ``fail`` | ``pass``); a Prometheus
that cannot be reached, or refuses a query, makes the metric Inconclusive whatever ``noData``
says: never promote blind, never roll back because monitoring is down.

Series are selected by labels that Prometheus derives from pod labels with
``labelmap __meta_kubernetes_pod_label_(.+)`` (``slipway.dev/track`` becomes
``slipway_dev_track``), plus the ``namespace`` label of pod discovery.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, Protocol

from slipway.builders.common import label_value
from slipway.models.base import parse_duration
from slipway.models.inferencedeployment import BUILTIN_METRICS, AnalysisMetric
from slipway.promql import ConfinementError, confine
from slipway.status.gates import bounds_text

Verdict = Literal["Passed", "Failed", "Inconclusive"]
NoDataPolicy = Literal["inconclusive", "fail", "pass"]

# Series labels, as Prometheus' labelmap of the pod labels slipway.dev/deployment and
# slipway.dev/track names them, and the namespace label of Kubernetes pod discovery.
NAMESPACE_LABEL = "namespace"
DEPLOYMENT_LABEL = "slipway_dev_deployment"
TRACK_LABEL = "slipway_dev_track"
# The model version label, and the revision label (the served pod template): a canary's window
# must not count the pods of an earlier canary, even one of the same model version.
VERSION_LABEL = "slipway_dev_model_version"
REVISION_LABEL = "slipway_dev_revision"
CANARY_TRACK = "canary"
STABLE_TRACK = "stable"

# rate() needs two samples in its window: 20s holds at least two at a 5s scrape interval
# even when a scrape is late, so a short analysis interval still measures something.
MIN_WINDOW_SECONDS = 20.0

# With no metrics in the spec the canary must keep its 5xx share at or under 5% and its p95
# latency within 1.5× the stable's: the two regressions every model server can show.
DEFAULT_METRICS: tuple[AnalysisMetric, ...] = (
    AnalysisMetric(name="errorRate", max=0.05),
    AnalysisMetric(name="latencyP95Seconds", max_relative_to_stable=1.5),
)

ANALYSIS_FAILED = "AnalysisFailed"  # status.lastRollback.reason of a failed analysis

_NO_DATA_VERDICT: dict[str, Verdict] = {"inconclusive": "Inconclusive", "fail": "Failed", "pass": "Passed"}
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
PLACEHOLDERS = ("track", "namespace", "deployment", "version", "revision")


class QueryError(ValueError):
    """A metric's query cannot be resolved (e.g. an unknown placeholder)."""


@dataclass(frozen=True)
class Preset:
    """The metric names of one model server.

    ``tpot`` lists histograms in order of preference: the first with data answers (vLLM
    renamed its per-token histogram).
    """

    requests: str  # counter of requests
    failed_requests: str  # label matcher selecting the failed ones on that counter
    latency: str  # histogram of request durations (without _bucket)
    ttft: str  # histogram of time to first token
    tpot: tuple[str, ...]  # histograms of time per output token
    accepted_requests: str = 'code=~"2.."'  # label matcher selecting the answered ones on ``requests``
    output_tokens: str = "vllm:generation_tokens_total"  # counter of generated tokens


# The reference server (slipway.workloads.serve): requests by HTTP code, and histograms.
SLIPWAY_PRESET = Preset(
    requests="slipway_requests_total",
    failed_requests='code=~"5.."',
    latency="slipway_request_duration_seconds",
    ttft="slipway_time_to_first_token_seconds",
    tpot=("slipway_time_per_output_token_seconds",),
)

# vLLM's OpenAI-compatible server.
# - errorRate: vLLM's engine counts only requests that finished (vllm:request_success_total by
#   finished_reason stop|length|abort, and error in recent versions); a request refused or
#   crashed before the engine never shows there, and ``abort`` is mostly clients hanging up.
#   So the 5xx share comes from the HTTP counter its API server exports through
#   prometheus-fastapi-instrumentator, http_requests_total{handler,method,status}, whose status
#   is grouped as "5xx" by default ("5.." matches both "5xx" and "503"). Limits: it counts every
#   instrumented handler (completions, chat, embeddings...), not /health nor /metrics; a server
#   started with its HTTP metrics off gives no data.
# - latency: vllm:e2e_request_latency_seconds, per finished request including queueing; it
#   grows with output length, so compare it to the stable's (maxRelativeToStable) rather than
#   with an absolute max when prompts vary.
# - ttft: vllm:time_to_first_token_seconds.
# - tpot: vllm:inter_token_latency_seconds (vLLM >= 0.11), else the older
#   vllm:time_per_output_token_seconds (deprecated in 0.11, gone in 0.13). Both observe the
#   time between engine steps, which with speculative decoding can carry several tokens;
#   a custom query over vllm:request_time_per_output_token_seconds gives per-request TPOT.
VLLM_PRESET = Preset(
    requests="http_requests_total",
    failed_requests='status=~"5.."',
    accepted_requests='status=~"2.."',
    latency="vllm:e2e_request_latency_seconds",
    ttft="vllm:time_to_first_token_seconds",
    tpot=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
)

PRESETS: dict[str, Preset] = {"slipway": SLIPWAY_PRESET, "vllm": VLLM_PRESET}


def counted_in_window(series: str, window: str) -> str:
    """How much the counters of ``series`` grew in the last ``window``, a series first seen inside it
    counting from 0. A labelled counter (requests by code) has no 5xx series until a pod's first failure,
    and ``rate()``/``increase()`` cannot see a series' first value: read with them alone, a fresh canary's
    first errors are no errors at all, and it passes. So: ``increase()`` of every series (it handles a
    counter reset, a restarted container), plus the first value of each series that had no sample before
    the window (a labelled counter starts at 0 when its first increment makes it)."""
    grown = f"(sum(increase({series}[{window}])) or vector(0))"
    before = f"last_over_time({series}[{window}] offset {window})"
    first = f"(sum(min_over_time({series}[{window}]) unless {before}) or vector(0))"
    return f"({grown} + {first})"


def _error_ratio(preset: Preset, selector: str, window: str) -> str:
    requests = f"{preset.requests}{{{selector}}}"
    failed = counted_in_window(f"{preset.requests}{{{selector}, {preset.failed_requests}}}", window)
    total = counted_in_window(requests, window)
    # No 5xx series at all is 0 errors; no request at all is no data (0/0): Inconclusive. Nor is a track
    # judged before two scrapes have seen it serve, the first may come before its first failure, unless
    # it has already failed MIN_FAILURES requests: errors are evidence from one scrape, their absence is not.
    judged = f"({served_before_last_scrape(requests, window)} > 0) or ({failed} >= {MIN_FAILURES})"
    return f"(({failed} or vector(0)) / {total}) and on() ({judged})"


# A track that has failed this many requests in the window is judged from one scrape. A healthy track with
# 1% errors reaches it by chance in a sample of 50 requests 1.4% of the time, in one of 20 in 0.1%.
MIN_FAILURES = 3


def served_before_last_scrape(series: str, window: str) -> str:
    """How much the counters of ``series`` had grown in the window by the scrape before the last one
    (a series with one sample had grown by nothing yet): more than 0 once two scrapes saw requests."""
    last = f"last_over_time({series}[{window}])"
    latest_step = f"(idelta({series}[{window}]) or {last})"
    before = f"(last_over_time({series}[{window}] offset {window}) or {last} * 0)"
    return f"sum(clamp_min({last} - {latest_step} - {before}, 0))"


def _quantile(q: float, histograms: Sequence[str], selector: str, window: str) -> str:
    per_histogram = [
        f"histogram_quantile({q}, sum by (le) (rate({name}_bucket{{{selector}}}[{window}])))" for name in histograms
    ]
    return " or ".join(per_histogram)


def per_pod_second(series: str, window: str) -> str:
    """What the track's busiest pod counted per second in the window: the slope of its count from its
    first answer on (``deriv`` over the seconds its count is above 0, not ``rate``: a canary pod a few
    seconds old, or whose counters were exported at 0 while its model loaded, is measured over the
    seconds it served, not diluted over the whole window). The busiest pod, because a track's pods
    share its traffic evenly: a pod draining serves less and would make the track look dearer than it
    is. ``instance`` tells the pods apart; a counter reset inside the window (a restarted container)
    lowers that pod's slope. A pod is measured only once it has served for :data:`MIN_SLOPE_SECONDS`
    (no data before: Inconclusive): the slope of a few seconds of Poisson arrivals is noise that a
    relative cost gate would read as a dearer canary."""
    served = f"(sum by (instance) ({series}) > 0)"
    long_enough = f"count_over_time({served}[{window}:1s]) >= {MIN_SLOPE_SECONDS}"
    return f"max(deriv({served}[{window}:1s]) and on(instance) ({long_enough}))"


MIN_SLOPE_SECONDS = 10  # a pod's throughput is judged over at least this many seconds of serving (< the window)

# Cost gates: the built-in query measures a pod's throughput (answered requests, generated tokens
# per second, see per_pod_second); :class:`Priced` turns it into a cost per unit with the price of
# one of the track's pods per hour.
PER_UNIT = {"costPer1kRequests": 1_000.0, "costPerMillionTokens": 1_000_000.0}

_BUILTIN_QUERIES: dict[str, Callable[[Preset, str, str], str]] = {
    "costPer1kRequests": lambda p, s, w: per_pod_second(f"{p.requests}{{{s}, {p.accepted_requests}}}", w),
    "costPerMillionTokens": lambda p, s, w: per_pod_second(f"{p.output_tokens}{{{s}}}", w),
    "errorRate": _error_ratio,
    "latencyP95Seconds": lambda p, s, w: _quantile(0.95, [p.latency], s, w),
    "latencyP99Seconds": lambda p, s, w: _quantile(0.99, [p.latency], s, w),
    "ttftP95Seconds": lambda p, s, w: _quantile(0.95, [p.ttft], s, w),
    "tpotP95Seconds": lambda p, s, w: _quantile(0.95, p.tpot, s, w),
}


def _label_value(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def track_selector(
    namespace: str, deployment: str, track: str, version: str | None = None, revision: str | None = None
) -> str:
    """The label matchers of one track's series (of one revision, else one model version, if given),
    without braces."""
    selector = (
        f"{NAMESPACE_LABEL}={_label_value(namespace)}, {DEPLOYMENT_LABEL}={_label_value(deployment)}, "
        f"{TRACK_LABEL}={_label_value(track)}"
    )
    if revision is not None:
        return f"{selector}, {REVISION_LABEL}={_label_value(revision)}"
    return selector if version is None else f"{selector}, {VERSION_LABEL}={_label_value(version)}"


def _duration_text(seconds: float) -> str:
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{round(seconds * 1000)}ms"


def analysis_window(interval: str) -> str:
    """The rate() window of an analysis: its interval, but never under ``MIN_WINDOW_SECONDS``."""
    return _duration_text(max(parse_duration(interval).total_seconds(), MIN_WINDOW_SECONDS))


def resolve_query(
    metric: AnalysisMetric,
    preset: str,
    track: str,
    namespace: str,
    deployment: str,
    window: str,
    version: str | None = None,
    revision: str | None = None,
) -> str:
    """The PromQL of ``metric`` for one track: the user's query if given, else the built-in of ``preset``."""
    deployment, version = label_value(deployment), None if version is None else label_value(version)
    if metric.query is not None:
        values = {"track": track, "namespace": namespace, "deployment": deployment, "version": version or "",
                  "revision": revision or ""}  # fmt: skip

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                known = ", ".join("{{ " + p + " }}" for p in PLACEHOLDERS)
                raise QueryError(f"metric {metric.name}: unknown placeholder {match.group(0)} in query; use {known}")
            return values[name]

        try:
            return confine(_PLACEHOLDER.sub(fill, metric.query), namespace)
        except ConfinementError as exc:
            raise QueryError(f"metric {metric.name}: spec.rollout.analysis.metrics[].query: {exc}") from exc
    if metric.name not in _BUILTIN_QUERIES:
        raise QueryError(f"metric {metric.name}: not built in ({', '.join(BUILTIN_METRICS)}); give it a query")
    if preset not in PRESETS:
        raise QueryError(f"preset {preset!r} unknown; use one of {', '.join(PRESETS)}")
    selector = track_selector(namespace, deployment, track, version, revision)
    return _BUILTIN_QUERIES[metric.name](PRESETS[preset], selector, window)


@dataclass(frozen=True)
class Measurement:
    """What Prometheus answered for one metric of one track."""

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
        return MetricResult(name, canary.query, canary.value, threshold, verdict, now, message, stable_value,
                            metric.dry_run)  # fmt: skip

    if canary.error is not None:
        return result("Inconclusive", f"{name}: no answer for the canary, so no verdict: {canary.error}")
    if canary.value is None:
        return result(
            _NO_DATA_VERDICT[no_data],
            f"{name}: no data for the canary (noData: {no_data}); is traffic reaching it, and is it scraped?",
        )
    value = canary.value
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
        if value > factor * stable.value:
            return result(
                "Failed",
                f"{name} of the canary is {_fmt(value)}, above {_fmt(factor)} × the stable's {_fmt(stable.value)}",
            )
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
    prometheus_unavailable: bool = False  # true: Inconclusive because monitoring is down
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
    throughput (see per_pod_second) and the value is ``per_hour[track]`` (one pod's price) over it,
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
        if unit is not None and hourly is None:  # nothing to ask Prometheus: the price is what is missing
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


_COST_FIELDS = {"costPer1kRequests": ("requestsPerPodSecond", "per1kRequests"),
                "costPerMillionTokens": ("tokensPerPodSecond", "perMillionTokens")}  # fmt: skip
_THROUGHPUT = {unit: AnalysisMetric.model_construct(name=unit, query=None, dry_run=False) for unit in PER_UNIT}


def serving_cost(provider: Provider, pricing: Pricing, track: str, now: datetime | str) -> dict[str, object]:
    """status.<track>.cost: the track's price per hour (its pods now), the answered requests and
    generated tokens per second of its busiest pod over the window, and the cost per 1K requests and
    per 1M tokens one pod's price over them makes."""
    out: dict[str, object] = {"time": timestamp(now)}
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
    results = evaluate(metrics, measured, stable_values, no_data, timestamp(now))
    return AnalysisOutcome(tuple(results), prometheus_unavailable=deciding.unavailable is not None)


def not_measured(metrics: Sequence[AnalysisMetric | str], now: datetime | str, message: str) -> AnalysisOutcome:
    """An Inconclusive analysis: nothing could be measured (e.g. no Prometheus configured). Metrics in
    dry run stay in dry run: they hold nothing."""
    when = timestamp(now)
    results = [MetricResult(m, "", None, "", "Inconclusive", when, message) if isinstance(m, str) else
               MetricResult(m.name, "", None, "", "Inconclusive", when, message, dry_run=m.dry_run)
               for m in metrics]  # fmt: skip
    return AnalysisOutcome(tuple(results) or (MetricResult("analysis", "", None, "", "Inconclusive", when, message),))


def timestamp(now: datetime | str) -> str:
    """``now`` as the status writes times: RFC 3339 in UTC, to the second (naive means UTC)."""
    if isinstance(now, str):
        return now
    if now.tzinfo is not None:
        now = now.astimezone(UTC)
    return now.replace(microsecond=0, tzinfo=None).isoformat() + "Z"
