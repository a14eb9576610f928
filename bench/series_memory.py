"""What the operator's per-object metrics cost: memory per InferenceDeployment and the time of one
scrape, for N objects in one status (``python -m bench.series_memory [N]``, default 1,000; prints
numbers, asserts nothing). Issue #54 cut this from about 15 KB to about 2 KB per InferenceDeployment
by keeping rows of plain values and making the series at each scrape (``slipway.metrics``)."""

from __future__ import annotations

import sys
import time
import tracemalloc


def main(n: int = 1000) -> None:
    from prometheus_client import generate_latest

    import slipway.operator  # noqa: F401 - the kinds declare their phase gauges
    from slipway import metrics

    status = {
        "phase": "Promoted",
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Promoted"},
            {"type": "Stalled", "status": "False"},
        ],
        "stable": {"modelName": "digits", "modelVersion": "1"},
    }
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(n):
        metrics.OBJECTS.start("InferenceDeployment", "ns", f"d-{i:05d}")
        metrics.OBJECTS.observe("InferenceDeployment", "ns", f"d-{i:05d}", status)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    best, size = float("inf"), 0
    for _ in range(5):
        t0 = time.perf_counter()
        size = len(generate_latest())
        best = min(best, time.perf_counter() - t0)
    print(f"{n} InferenceDeployments: {grown / n:,.0f} bytes of per-object series each; "
          f"a scrape {best * 1000:,.0f} ms (best of 5), {size / n:,.0f} bytes of exposition each")  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
