"""When a canary's next analysis is due (pure): every ``analysis.interval`` after the latest one,
sooner early in a step while the latest was inconclusive."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from slipway.inference.model import Analysis
from slipway.models.base import parse_duration
from slipway.status.conditions import parse_time

# In a step's first analysis interval, an inconclusive analysis (a canary Prometheus has not yet
# scraped twice, nor seen fail 3 requests) is tried again this soon, not a whole interval later: a
# breach shows at a scrape, and every second of lag after it is a second more of the canary's errors
# (scenario A measured the lag of a 2 s retry at 0.9 to 1.5 s; a query is a few milliseconds).
INCONCLUSIVE_RETRY = timedelta(seconds=1)
# How long into a step an inconclusive analysis is retried after INCONCLUSIVE_RETRY (at least the
# analysis interval): two scrapes of a pod that just became ready come up to two scrape intervals
# later (15 s each by default), and a verdict that misses the first interval must not wait a second.
INCONCLUSIVE_WINDOW = timedelta(seconds=30)


def next_analysis(
    analysis: Analysis, results: Sequence[dict[str, Any]], now: datetime, step_started: datetime
) -> timedelta:
    """How long until the next analysis is due after ``results`` (status.analysis[] of the step; due
    now when none has a time). Every ``analysis.interval``; sooner early in the step (its first
    interval, or :data:`INCONCLUSIVE_WINDOW` if longer) while the latest analysis was inconclusive: a
    canary's first query usually comes before Prometheus holds two samples of its pods, and waiting a
    whole interval for the next one would delay every verdict by that much. It is tried again after
    :data:`INCONCLUSIVE_RETRY` instead (no data never counts towards ``failureLimit``, so this never
    rolls back sooner on no data). Past that, a canary with no data is queried once per interval, as
    any other. A step's first analysis waits for ``analysis.warmup`` after its pods are ready."""
    warm = warm_from(analysis, step_started)
    timed = [(t, r) for r in results if (t := parse_time(r.get("time"))) is not None]
    if not timed:
        return max(timedelta(0), warm - now)
    last = max(t for t, _ in timed)
    interval = parse_duration(analysis.interval)
    latest_deciding = [r for t, r in timed if t == last and not r.get("dryRun")]
    inconclusive = bool(latest_deciding) and all(r.get("result") == "Inconclusive" for r in latest_deciding)
    if inconclusive and now - warm < max(interval, INCONCLUSIVE_WINDOW):
        interval = min(interval, INCONCLUSIVE_RETRY)
    return last + interval - now


def warm_from(analysis: Analysis, step_started: datetime) -> datetime:
    """When a step's canary is judged warm: ``analysis.warmup`` after its pods are ready."""
    return step_started + (parse_duration(analysis.warmup) if analysis.warmup else timedelta(0))
