"""Analysis providers: where the values an analysis judges come from, one module per source.

Each metric of ``spec.rollout.analysis.metrics[]`` (or the default ones) is measured by the source
:func:`source_of` picks from what the metric names: a metric with a ``query`` is PromQL, so
Prometheus; else the source listing the metric's name in its ``metrics``; else the source of the
analysis' ``preset``; else Prometheus (which says the metric is not built in). Each source is opened
once per analysis, its metrics judged by :func:`slipway.inference.analysis.judge`, and the results kept in the
spec's order.

A new source (a web check, the gateway's metrics) is one module implementing :class:`Source` and
one row of :data:`PROVIDERS`; a source with an endpoint of its own opens its own client in
:meth:`Source.open` (the operator lends its settings and request timeout through :class:`Services`).
Today the API names no source: its metric names or preset would join the CRD's
(``BUILTIN_METRICS``, ``preset``), or a metric would name its source in a field of its own. See
docs/extending.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime

from slipway.config import OperatorConfig
from slipway.inference import analysis
from slipway.inference.model import Analysis, AnalysisMetric
from slipway.inference.providers.base import Services, Source, Target
from slipway.inference.providers.gateway import GatewaySource
from slipway.inference.providers.prometheus import PrometheusSource

DEFAULT = "prometheus"  # the source of queries, and of metrics no other source claims
PROVIDERS: dict[str, Source] = {source.name: source for source in (PrometheusSource(), GatewaySource())}


def source_of(metric: AnalysisMetric, preset: str) -> str:
    """The name of the source that measures ``metric`` in an analysis of ``preset``."""
    if metric.query is not None:
        return DEFAULT
    by_name = next((name for name, source in PROVIDERS.items() if metric.name in source.metrics), None)
    by_preset = next((name for name, source in PROVIDERS.items() if preset in source.presets), None)
    return by_name or by_preset or DEFAULT


def refusals(settings: Analysis, config: OperatorConfig) -> list[str]:
    """Why the operator will not run an analysis with ``settings``, one message per source that refuses it."""
    found = [why for source in PROVIDERS.values() if (why := source.refusal(settings, config)) is not None]
    return list(dict.fromkeys(found))  # the gateway source asks the same Prometheus: said once


def analyse(
    target: Target,
    services: Services,
    now: datetime | str,
    subject: str = analysis.CANARY_TRACK,
    pricing: analysis.Pricing | None = None,
) -> analysis.AnalysisOutcome:
    """Measure and judge ``target``'s analysis, each metric through its source. ``subject``
    STABLE_TRACK judges the stable's pods alone (a bake: absolute thresholds only). ``pricing``:
    each track's price per hour, for the cost metrics and each track's serving cost (measured by the
    source of the cost metrics, unless it is found down). A source that cannot be asked makes its
    metrics Inconclusive with its reason; when no source can, nothing is measured."""
    settings = target.settings
    rules = list(settings.metrics) or list(analysis.DEFAULT_METRICS)
    groups: dict[str, list[int]] = {}
    for i, rule in enumerate(rules):
        groups.setdefault(source_of(rule, settings.preset), []).append(i)
    costed = _cost_source(settings.preset) if pricing is not None else None
    with ExitStack() as stack:
        opened = {
            name: stack.enter_context(PROVIDERS[name].open(target, services))
            for name in dict.fromkeys([*groups, *([costed] if costed else [])])
        }
        why = {name: made for name, made in opened.items() if isinstance(made, str)}
        if all(name in why for name in groups):
            return analysis.not_measured(settings.metrics, now, why[next(iter(groups))])
        plain = pricing or analysis.Pricing({}, {})
        lanes = {
            name: (
                analysis.Priced(made(), plain.per_hour, plain.missing),
                analysis.Priced(made(), plain.per_hour, plain.missing),
            )
            for name, made in opened.items()
            if not isinstance(made, str)
        }
        outcome = _judge(rules, groups, lanes, why, settings.no_data, now, subject)
        inner = lanes[costed][0].inner if costed in lanes else None
        if pricing is None or inner is None or inner.unavailable is not None:
            return outcome
        tracks = [subject] + [t for t in target.versions if t != subject and subject == analysis.CANARY_TRACK]
        costs = {t: analysis.serving_cost(inner, pricing, t, now) for t in tracks}
        return dataclasses.replace(outcome, costs=costs)


def _cost_source(preset: str) -> str:
    """The source of the built-in cost metrics, which measures each track's throughput."""
    name = next(iter(analysis.PER_UNIT))
    return source_of(AnalysisMetric.model_construct(name=name, query=None), preset)


def _judge(
    rules: Sequence[AnalysisMetric],
    groups: Mapping[str, list[int]],
    lanes: Mapping[str, tuple[analysis.Provider, analysis.Provider]],
    why: Mapping[str, str],
    no_data: str,
    now: datetime | str,
    subject: str,
) -> analysis.AnalysisOutcome:
    """Each source's metrics judged through its two providers (deciding, dry run), or Inconclusive
    with ``why`` it cannot be asked; the results in ``rules``' order, found down if any source was."""
    results: dict[int, analysis.MetricResult] = {}
    down = False
    for name, indices in groups.items():
        group = [rules[i] for i in indices]
        if name in why:
            outcome = analysis.not_measured(group, now, why[name])
        else:
            outcome = analysis.judge(group, *lanes[name], no_data, now, subject)
        down = down or outcome.source_unavailable
        results.update(zip(indices, outcome.results, strict=True))
    return analysis.AnalysisOutcome(tuple(results[i] for i in range(len(rules))), source_unavailable=down)


__all__ = ["DEFAULT", "PROVIDERS", "Services", "Source", "Target", "analyse", "refusals", "source_of"]
