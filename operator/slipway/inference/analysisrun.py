"""The analysis a pass runs (an InferenceDeployment's canary, or its bake): what it measures, what
the operator lends its providers (its settings, its Prometheus, the cluster's namespaces), and each
analysed track's price per hour for the cost metrics and ``status.<track>.cost``."""

from __future__ import annotations

from datetime import datetime

from slipway import cost, kube, metrics, opencost
from slipway.inference import analysis, build, providers
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.bake import bake_analysis
from slipway.reconcile import Context


def analyse(
    ctx: Context, spec: InferenceDeploymentSpec, now: datetime, tracks: dict[str, tuple[str, str]], bake: bool = False
) -> analysis.AnalysisOutcome:
    """Each track's series narrowed to its revision (track -> (model version, revision)). ``bake``:
    the stable's pods alone, judged on spec.rollout.bake's absolute thresholds."""
    settings = bake_analysis(spec) if bake else spec.rollout.analysis
    assert settings is not None
    versions = {t: v for t, (v, _) in tracks.items()}
    revisions = {t: r for t, (_, r) in tracks.items() if r}
    target = providers.Target(settings, ctx.namespace, ctx.name, versions, revisions)
    lent = providers.Services(
        ctx.config, ctx.prometheus, ctx.config.http_timeout_seconds, lambda: ctx.cache.names("namespaces")
    )
    outcome = providers.analyse(target, lent, now, "stable" if bake else "canary", pricing(ctx, spec, tracks))
    for result in outcome.results:
        metrics.GATE_RESULTS.labels("InferenceDeployment", result.result.lower()).inc()
    return outcome


def pricing(ctx: Context, spec: InferenceDeploymentSpec, tracks: dict[str, tuple[str, str]]) -> analysis.Pricing | None:
    """The price per hour of one pod of each analysed track, from its pods' requests (slipway.cost)
    and nodes (OpenCost's prices with openCost, slipway.opencost), and their number; None when no
    price is configured and no cost metric is asked for (nothing to show or judge)."""
    table = cost.prices_of(ctx.config.prices_file)
    prices = opencost.with_node_prices(table, ctx.prometheus, ctx.config.http_timeout_seconds)
    settings = spec.rollout.analysis
    asked = settings is not None and any(m.name in analysis.PER_UNIT for m in settings.metrics)
    if not prices.configured and not asked:
        return None
    products = kube.gpu_products(ctx.kube) if prices.configured and cost.needs_products(prices) else {}
    per_hour: dict[str, float | None] = {}
    missing: dict[str, str] = {}
    counts: dict[str, int] = {}
    for track, (_, revision) in tracks.items():
        pods = ctx.cache.select("servingpods", "track", ctx.namespace, ctx.name, track)
        if revision:
            pods = [p for p in pods if (p["metadata"].get("labels") or {}).get(build.REVISION_LABEL) == revision]
        per_hour[track], counts[track], missing[track] = cost.pod_per_hour(prices, pods, products)
    return analysis.Pricing(per_hour, missing, prices.currency, counts)
