"""The PNG plots of RESULTS.md, one per scenario, drawn with matplotlib from a run's raw JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench import rundir  # noqa: E402
from bench.report import MIB, NAMES, SYSTEMS, at_rest_rows, rollback_stats  # noqa: E402

COLORS = {"slipway": "#1f77b4", "argo": "#ff7f0e"}


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rollback(data: dict[str, Any], path: Path) -> None:
    stats = rollback_stats(data)
    fig, ax = plt.subplots(figsize=(7, 4))
    labels, series, colors = [], [], []
    for system in SYSTEMS:
        if system not in stats:
            continue
        for key, what in (("decision", "decision"), ("stable", "traffic on stable")):
            labels.append(f"{NAMES[system]}\n{what}")
            series.append(stats[system][key]["values"])
            colors.append(COLORS[system])
    if series:
        box = ax.boxplot(series, patch_artist=True, widths=0.5)
        for patch, color in zip(box["boxes"], colors, strict=True):
            patch.set_facecolor(color)
            patch.set_alpha(0.35)
        for i, (values, color) in enumerate(zip(series, colors, strict=True), start=1):
            ax.scatter([i] * len(values), values, color=color, s=14, zorder=3)
        ax.set_xticks(range(1, len(labels) + 1), labels)
    if bound := data.get("two_sample_bound_seconds"):
        label = f"reference: scrape + interval × failureLimit = {bound:.0f} s"
        ax.axhline(bound, color="grey", linestyle="--", linewidth=1, label=label)
        ax.legend(loc="lower left")
    ax.set_ylabel("seconds from canary Ready")
    ax.set_title("A. Bad canary: time to the rollback decision and to traffic back on stable")
    ax.set_ylim(bottom=0)
    _save(fig, path)


def at_rest(data: dict[str, Any], path: Path) -> None:
    rows = at_rest_rows(data)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    for system in SYSTEMS:
        mine = sorted((r for r in rows if r["system"] == system), key=lambda r: r["n"])
        if not mine:
            continue
        ns = [r["n"] for r in mine]
        left.plot(ns, [r["rpm_per_object"] or 0 for r in mine], marker="o", color=COLORS[system], label=NAMES[system])
        right.plot(ns, [(r.get("rss_bytes_max") or 0) / MIB for r in mine], marker="o", color=COLORS[system],
                   label=NAMES[system])  # fmt: skip
    left.set_xlabel("settled deployments")
    left.set_ylabel("API requests / min / object")
    left.set_xscale("log")
    right.set_xlabel("settled deployments")
    right.set_ylabel("controller RSS max (MiB)")
    right.set_xscale("log")
    for ax in (left, right):
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.suptitle("B. Cost at rest")
    _save(fig, path)


def scale(data: dict[str, Any], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, key in (("first child", "apply_to_first_child"), ("Succeeded", "apply_to_succeeded"),
                       ("Promoted", "apply_to_promoted")):  # fmt: skip
        values = sorted(data.get(key) or [])
        if values:
            left.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=f"apply → {label}")
    left.axvline(2.0, color="grey", linestyle="--", linewidth=1, label="2 s goal (first child p99)")
    left.set_xscale("symlog", linthresh=1)
    left.set_xlim(left=0)
    left.set_xlabel("seconds from apply")
    left.set_ylabel("fraction of objects")
    left.legend(fontsize=8)
    timeline = data.get("timeline") or []
    if timeline:
        t = [p["t"] for p in timeline]
        right.plot(t, [(p.get("rss_bytes") or 0) / MIB for p in timeline], color=COLORS["slipway"], label="RSS (MiB)")
        right.axhline(250e6 / MIB, color="grey", linestyle="--", linewidth=1, label="250 MB goal")
        right.set_xlabel("seconds since the first apply")
        right.set_ylabel("operator RSS (MiB)")
        right.set_ylim(bottom=0)
        twin = right.twinx()
        for key, style in (("succeeded", ":"), ("promoted", "-.")):
            twin.plot(t, [p.get(key) or 0 for p in timeline], linestyle=style, color="black", label=key)
        twin.set_ylabel("objects")
        right.legend(loc="upper left", fontsize=8)
        twin.legend(loc="lower right", fontsize=8)
    fig.suptitle("C. Slipway at scale on kwok nodes")
    _save(fig, path)


def start(data: dict[str, Any], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    timeline = data.get("timeline") or []
    ax.step([p["t"] for p in timeline], [p.get("resumed", 0) for p in timeline], where="post", color=COLORS["slipway"])
    if objects := data.get("objects"):
        ax.axhline(objects, color="grey", linestyle="--", linewidth=1, label=f"{objects} objects")
        ax.legend(loc="lower right")
    ax.set_xlabel("seconds since the fresh operator started")
    ax.set_ylabel("objects resumed")
    ax.set_title("D. Operator start")
    _save(fig, path)


def at_scale(data: dict[str, Any], path: Path) -> None:
    """Issue #54: RSS against N for both systems, and start-up and spec → child against N."""
    from bench.scale_report import scale_rows

    rows = scale_rows(data)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for system in SYSTEMS:
        mine = sorted((r for r in rows if r["system"] == system), key=lambda r: r["n"])
        if not mine:
            continue
        ns, color = [r["n"] for r in mine], COLORS[system]
        left.plot(ns, [r["rss_bytes_max"] / MIB for r in mine], marker="o", color=color, label=NAMES[system])
        starts = [(r["n"], (r.get("startup") or {}).get("seconds")) for r in mine]
        right.plot(*zip(*[p for p in starts if p[1] is not None], strict=True), marker="o", color=color,
                   label=f"{NAMES[system]}: start-up")  # fmt: skip
        p99 = [(r["n"], (r.get("spec_changes") or {}).get("p99_seconds")) for r in mine]
        right.plot(*zip(*[p for p in p99 if p[1] is not None], strict=True), marker="s", linestyle="--", color=color,
                   label=f"{NAMES[system]}: spec → child p99")  # fmt: skip
    left.set_xlabel("settled deployments (N)")
    left.set_ylabel("controller RSS, settled (MiB)")
    right.set_xlabel("settled deployments (N)")
    right.set_ylabel("seconds")
    right.set_yscale("log")
    left.set_ylim(bottom=0)
    for ax in (left, right):
        ax.legend(fontsize=8)
    fig.suptitle("B at scale: memory, start-up and reaction time against N")
    _save(fig, path)


def draw_all(run: Path, plots: Path) -> None:
    rollback_data, at_rest_data, scale_data = (rundir.read(run, n) for n in ("rollback", "at-rest", "scale"))
    if rollback_data:
        rollback(rollback_data, plots / "rollback.png")
    if at_rest_data:
        at_rest(at_rest_data, plots / "at-rest.png")
        if any("startup" in r for r in at_rest_data.get("runs", [])):
            at_scale(at_rest_data, plots / "at-scale.png")
    if scale_data:
        scale(scale_data, plots / "scale.png")
        if scale_data.get("start"):
            start(scale_data["start"], plots / "start.png")
