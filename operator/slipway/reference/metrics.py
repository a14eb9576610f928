"""The metrics reference: every series the operator exports (``slipway.metrics``), its type, labels
and help text, and the label values it is made with where they are a fixed list."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

import slipway.operator  # noqa: F401 - the operator's kinds declare their phase gauges
from slipway import kinds, metrics
from slipway.reference.common import GENERATED, escape

SUFFIX = {"counter": "_total", "gauge": "", "histogram": "_bucket, _sum, _count"}


def collectors() -> list[MetricWrapperBase]:
    """Every metric of slipway.metrics, module attributes and the values of its dicts alike, by name."""
    found: dict[str, MetricWrapperBase] = {}
    for value in vars(metrics).values():
        for item in value.values() if isinstance(value, dict) else (value,):
            if isinstance(item, Counter | Gauge | Histogram):
                found[item._name] = item
    return [found[name] for name in sorted(found)]


def _name(metric: MetricWrapperBase) -> str:
    suffix = SUFFIX[str(metric._type)]
    if metric._type == "histogram":
        return f"`{metric._name}` (`{suffix.replace(', ', '`, `')}`)".replace("(`_", f"(`{metric._name}_", 1)
    return f"`{metric._name}{suffix}`"


def _values() -> list[str]:
    """The label values the operator creates series with ahead of time, or chooses from a fixed list."""
    lines = []
    for kind in (k.kind for k in kinds.OWN if k.kind in metrics.PHASES):
        phases = metrics.PHASES[kind]
        lines.append(f"- `slipway_{kind.lower()}_phase{{phase}}`: " + ", ".join(f"`{p}`" for p in phases))
    reasons = ", ".join(f"`{r}`" for r in metrics.ROLLBACK_REASONS)
    lines.append(
        f"- `slipway_rollbacks_total{{reason}}`: {reasons} (each made at 0 for every "
        "InferenceDeployment before its first pass, so a first rollback is an increase; removed when "
        "it is deleted)"
    )
    return lines


def markdown() -> str:
    lines = [
        "# Metrics",
        "",
        GENERATED.format(source="operator/slipway/metrics.py"),
        "",
        "The operator serves these on `:8080/metrics`. Per-object series (labels `namespace` and `name`) are set by "
        "the leader after every pass and removed when the object is deleted or the replica stops leading; scrape "
        "with `honorLabels: true` so that the operator pod's own namespace does not overwrite them "
        "(`manifests/monitoring/`). How to use them is in [Monitor Slipway](../how-to/monitoring.md).",
        "",
        "| metric | type | labels | help |",
        "|---|---|---|---|",
    ]
    for metric in collectors():
        labels = ", ".join(f"`{label}`" for label in metric._labelnames)
        lines.append(f"| {_name(metric)} | {metric._type} | {labels} | {escape(metric._documentation)} |")
    lines += ["", "## Label values", "", *_values()]
    return "\n".join(lines) + "\n"
