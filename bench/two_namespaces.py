"""Scenario C's second namespace (``--scale-other-namespace``): while the burst of scenario C holds
the operator's pass slots in ``scale``, M TrainingRuns are created one at a time in another
namespace, and their apply -> first child is reported apart from the burst's, against the bound
of ``slipway.slots``.

The bound: a namespace with no pass running gets a slot among the next k + 1 slots freed that its
lane may use (k: other such namespaces waiting before it; here k = 0, one other namespace), and
every running pass frees its slot within D, the longest pass. So an object of the other namespace
waits at most (k + 1) * D for its slot and its own first pass takes at most D: apply -> first child
<= (k + 2) * D, plus the watch events' delivery (the operator's, then the bench's). D is read from
the operator's histogram ``slipway_reconcile_duration_seconds`` (every kind) between the burst's
first create and the other namespace's last first child: the upper edge of the highest bucket a
pass fell into in that window (an upper bound of D, as coarse as the buckets).
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

BUCKET = "slipway_reconcile_duration_seconds_bucket"


def source_of(path: Path) -> Path:
    """A checkout whose ``operator/slipway`` is the package to run (``--scale-source``)."""
    source = path.resolve()
    if not (source / "operator" / "slipway" / "__init__.py").exists():
        raise SystemExit(f"{source}/operator/slipway is not the slipway package")
    return source


def operator_slots(env: dict[str, str], cwd: Path) -> int | None:
    """The operator's pass slots (``OperatorConfig().workers``) in the operator's own environment."""
    code = "from slipway.config import OperatorConfig; print(OperatorConfig().workers)"
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                             check=True, timeout=60)  # fmt: skip
        return int(out.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def pass_buckets(metrics_url: str) -> dict[float, float] | None:
    """Passes by upper bucket edge (cumulative, every kind summed) from the operator's /metrics."""
    try:
        text = httpx.get(metrics_url, timeout=10).text
    except httpx.HTTPError:
        return None
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if not line.startswith(BUCKET + "{"):
            continue
        labels, _, value = line.rpartition(" ")
        edge = labels.split('le="', 1)[1].split('"', 1)[0]
        with contextlib.suppress(ValueError):
            le = math.inf if edge == "+Inf" else float(edge)
            buckets[le] = buckets.get(le, 0.0) + float(value)
    return buckets


def longest_pass(before: dict[float, float] | None, after: dict[float, float] | None) -> dict[str, Any]:
    """The upper edge of the highest bucket a pass fell into between two scrapes (None: no scrape)."""
    if not before or not after:
        return {"seconds_at_most": None, "passes": None}
    edges = sorted(after)
    counts = {le: after[le] - before.get(le, 0.0) for le in edges}  # cumulative in the window
    passes = counts[edges[-1]]
    below = 0.0
    highest = None
    for le in edges:
        if counts[le] > below:
            highest = le
        below = counts[le]
    return {"seconds_at_most": None if highest in (None, math.inf) else highest, "passes": int(passes),
            "over_last_edge": highest == math.inf,
            "window_buckets": {str(le): int(counts[le]) for le in edges}}  # fmt: skip


class Spaced:
    """Calls ``create(name)`` for each name, the j-th at ``t0 + (j + 1) * interval``, in a thread;
    ``errors`` holds what failed."""

    def __init__(self, create: Callable[[str], None], names: list[str], t0: float, interval: float) -> None:
        self.create, self.names, self.t0, self.interval = create, names, t0, interval
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="other namespace", daemon=True)

    def _run(self) -> None:
        for j, name in enumerate(self.names):
            time.sleep(max(0.0, self.t0 + (j + 1) * self.interval - time.time()))
            try:
                self.create(name)
            except Exception as e:  # noqa: BLE001 - reported in the notes
                self.errors.append(f"{name}: {e!r}"[:300])

    def start(self) -> Spaced:
        self.thread.start()
        return self

    def join(self) -> None:
        self.thread.join()


class Other:
    """The other namespace during C: ``observed`` (an ``Observed`` of its watches) and ``create``
    (records the send time in ``observed.applied``, then creates the TrainingRun ``name``)."""

    def __init__(self, count: int, interval: float, observed: Any, create: Callable[[str], None], metrics_url: str):
        self.names = [f"other-{j:03d}" for j in range(count)]
        self.interval, self.observed, self.create, self.metrics_url = interval, observed, create, metrics_url
        self.before: dict[float, float] | None = None
        self.after: dict[float, float] | None = None
        self.spaced: Spaced | None = None
        self.watches: Any = None  # the namespace's watches (their ``close`` ends them)

    def start(self, t_apply0: float) -> None:
        """Just before the burst's first create: the histogram as it is, then the spaced creates."""
        self.before = pass_buckets(self.metrics_url)
        self.spaced = Spaced(self.create, self.names, t_apply0, self.interval).start()

    def done(self) -> bool:
        """Every object has its first child (the histogram is read again the first time it is so)."""
        with self.observed.lock:
            finished = len(self.observed.first_child) >= len(self.names)
        if finished and self.after is None:
            self.after = pass_buckets(self.metrics_url)
        return finished

    def result(self, burst: Any, t_apply0: float, slots: int | None, summary: Callable[..., dict[str, Any]]) -> dict:
        if self.after is None:  # C ended before every first child came
            self.after = pass_buckets(self.metrics_url)
        if self.watches is not None:
            self.watches.close()
        with self.observed.lock, burst.lock:
            other_seen = (dict(self.observed.applied), dict(self.observed.first_child))
            burst_seen = (dict(burst.applied), dict(burst.first_child))
        out = report(other_seen, burst_seen, t_apply0, longest_pass(self.before, self.after), slots, summary)
        out["create_errors"] = self.spaced.errors if self.spaced else []
        return out


def report(
    other: tuple[dict[Any, float], dict[Any, tuple[float, str]]],
    burst: tuple[dict[Any, float], dict[Any, tuple[float, str]]],
    t_apply0: float,
    longest: dict[str, Any],
    slots: int | None,
    summary: Callable[[list[float]], dict[str, Any]],
) -> dict[str, Any]:
    """The other namespace's objects (apply -> first child, and how many of the burst's objects
    still waited for theirs as each was applied), their summary and the bound (k = 0)."""
    (applied, first), (burst_applied, burst_first) = other, burst
    objects = []
    for key, sent in sorted(applied.items(), key=lambda item: item[1]):
        child = first.get(key)
        backlog = sum(
            1 for k, t in burst_applied.items() if t <= sent and (k not in burst_first or burst_first[k][0] > sent)
        )
        objects.append({"name": key[1], "applied_t": round(sent - t_apply0, 3), "burst_without_child": backlog,
                        "first_child_seconds": round(child[0] - sent, 3) if child else None,
                        "child": child[1] if child else None})  # fmt: skip
    seconds = [o["first_child_seconds"] for o in objects if o["first_child_seconds"] is not None]
    d = longest.get("seconds_at_most")
    return {
        "objects": objects,
        "apply_to_first_child": seconds,
        "summary": summary(seconds),
        "slots": slots,
        "longest_pass": longest,
        "bound_seconds": None if d is None else round(2 * d, 3),
        "bound_means": "(k + 1) * D to get a slot (k = 0: no other namespace waits) + D for its own first pass, "
        "D the upper edge of the longest pass's histogram bucket between the burst's first create and the "
        "other namespace's last first child; watch delivery (the operator's and the bench's) not included",
    }
