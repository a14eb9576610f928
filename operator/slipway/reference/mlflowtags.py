"""The MLflow tags reference: every tag Slipway reads or writes (the table of slipway.mlflow.tags),
on what, who writes it, who reads it and why, with the name earlier versions wrote; and the metrics
Slipway logs to MLflow itself."""

from __future__ import annotations

from slipway.mlflow.tag import Tag
from slipway.mlflow.tags import COST_CURRENCY, TAGS
from slipway.reference.common import GENERATED, escape
from slipway.training.cost import COST_METRICS


def _name(tag: Tag) -> str:
    return f"`{tag.name}<key>`" if tag.family else f"`{tag.name}`"


def _formerly(tag: Tag) -> str:
    if not tag.formerly:
        return ""
    return f"`{tag.formerly}<key>`" if tag.family else f"`{tag.formerly}`"


def markdown() -> str:
    lines = [
        "# MLflow tags",
        "",
        GENERATED.format(source="operator/slipway/mlflow/tags.py and programtags.py"),
        "",
        "Every MLflow tag Slipway reads or writes: on which objects, who writes it, who reads it and why. Every "
        "name is `slipway.dev/<name>`. Tags that earlier Slipway versions wrote as `slipway.<a>.<b>` (last "
        "column) are written under the new name only, and still read under the old one: runs and versions "
        "already in MLflow keep working across an upgrade, and a program written for an earlier version (a "
        "quantizer setting `slipway.quantize.uri`) is still understood; where both are set, the new name wins. "
        "What your own programs set is on their pages: [trainer](programs/trainer.md), "
        "[quantizer](programs/quantizer.md), [evaluator](programs/evaluator.md).",
        "",
        "| tag | on | written by | read by, and why | meaning | earlier name (still read) |",
        "|---|---|---|---|---|---|",
    ]
    for tag in sorted(TAGS, key=lambda t: t.name):
        lines.append(
            f"| {_name(tag)} | {escape(tag.on)} | {escape(tag.written_by)} | {escape(tag.read_by)} | "
            f"{escape(tag.meaning)} | {_formerly(tag)} |"
        )
    lines += [
        "",
        "`<key>`: one tag per key of a family (a metric's name, a fault switch's name).",
        "",
        "## Metrics Slipway logs",
        "",
        f"On a TrainingRun's MLflow run, once the run finished (with tag `{COST_CURRENCY.name}`; see "
        "[cost](../concepts/cost.md)):",
        "",
        *(f"- `{name}`: `status.cost.{field}`" for name, field in COST_METRICS.items()),
    ]
    return "\n".join(lines) + "\n"
