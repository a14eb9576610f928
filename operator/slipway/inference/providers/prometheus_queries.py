"""The PromQL of an analysis metric: built-in per ``preset``, or the user's query, for one track.

Pure: no I/O here (the Prometheus provider, :mod:`slipway.inference.providers.prometheus`, sends it).

- ``resolve_query``: a metric of ``spec.rollout.analysis.metrics[]`` → PromQL for one track.
  Built-in names map to queries per ``preset`` (the metric names of the model server);
  a ``query`` of the user's own has its ``{{ track }}``, ``{{ namespace }}``,
  ``{{ deployment }}`` and ``{{ version }}`` filled in, as the pods' label values carry them
  (``{{ deployment }}`` is the name, hashed past 63 characters), and is confined to the
  namespace (:func:`slipway.promql.confine`).

Series are selected by labels that Prometheus derives from pod labels with
``labelmap __meta_kubernetes_pod_label_(.+)`` (``slipway.dev/track`` becomes
``slipway_dev_track``), plus the ``namespace`` label of pod discovery.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slipway.inference.model import BUILTIN_METRICS, AnalysisMetric
from slipway.models.base import parse_duration
from slipway.names import label_value
from slipway.promql import ConfinementError, confine

# Series labels, as Prometheus' labelmap of the pod labels slipway.dev/deployment and
# slipway.dev/track names them, and the namespace label of Kubernetes pod discovery.
NAMESPACE_LABEL = "namespace"
DEPLOYMENT_LABEL = "slipway_dev_deployment"
TRACK_LABEL = "slipway_dev_track"
# The model version label, and the revision label (the served pod template): a canary's window
# must not count the pods of an earlier canary, even one of the same model version.
VERSION_LABEL = "slipway_dev_model_version"
REVISION_LABEL = "slipway_dev_revision"

# rate() needs two samples in its window: 20s holds at least two at a 5s scrape interval
# even when a scrape is late, so a short analysis interval still measures something.
MIN_WINDOW_SECONDS = 20.0

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
    queue: str = "vllm:num_requests_waiting"  # gauge: requests waiting for a slot in the engine
    kv_cache: str = "vllm:kv_cache_usage_perc"  # gauge: the share of KV-cache blocks in use, 0 to 1


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


def pods_mean(gauge: str, window: str) -> str:
    """A gauge averaged over the window per pod, then over the track's pods (a queue or a cache that fills
    on one pod shows as that pod's share of the track: the endpoint picker moves requests away from it)."""
    return f"avg(avg_over_time({gauge}[{window}]))"


MIN_SLOPE_SECONDS = 10  # a pod's throughput is judged over at least this many seconds of serving (< the window)

BUILTIN_QUERIES: dict[str, Callable[[Preset, str, str], str]] = {
    "costPer1kRequests": lambda p, s, w: per_pod_second(f"{p.requests}{{{s}, {p.accepted_requests}}}", w),
    "costPerMillionTokens": lambda p, s, w: per_pod_second(f"{p.output_tokens}{{{s}}}", w),
    "errorRate": _error_ratio,
    "latencyP95Seconds": lambda p, s, w: _quantile(0.95, [p.latency], s, w),
    "latencyP99Seconds": lambda p, s, w: _quantile(0.99, [p.latency], s, w),
    "ttftP95Seconds": lambda p, s, w: _quantile(0.95, [p.ttft], s, w),
    "tpotP95Seconds": lambda p, s, w: _quantile(0.95, p.tpot, s, w),
    "queueDepth": lambda p, s, w: pods_mean(f"{p.queue}{{{s}}}", w),
    "kvCacheUsage": lambda p, s, w: pods_mean(f"{p.kv_cache}{{{s}}}", w),
}


_BUILTIN_QUERIES = BUILTIN_QUERIES  # the name the analysis tests import


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
        values = {
            "track": track,
            "namespace": namespace,
            "deployment": deployment,
            "version": version or "",
            "revision": revision or "",
        }

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
    if metric.name not in BUILTIN_QUERIES:
        raise QueryError(f"metric {metric.name}: not built in ({', '.join(BUILTIN_METRICS)}); give it a query")
    if preset not in PRESETS:
        raise QueryError(f"preset {preset!r} unknown; use one of {', '.join(PRESETS)}")
    selector = track_selector(namespace, deployment, track, version, revision)
    return BUILTIN_QUERIES[metric.name](PRESETS[preset], selector, window)
