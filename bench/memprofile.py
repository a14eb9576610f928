"""Where Slipway's memory goes at scale: the operator run under ``tracemalloc``, its allocations
snapshotted once it has taken up every object and gone quiet.

:data:`WRAPPER` is passed to the interpreter with ``-c`` in place of ``-m slipway``
(:class:`bench.harness.Operator`'s ``launcher``): it starts ``tracemalloc`` before anything is
imported, runs ``slipway`` as ``__main__``, and on ``SIGUSR1`` writes the snapshot's top allocations
(by line, by file, by package) as JSON to ``$SLIPWAY_BENCH_PROFILE_OUT``. :func:`profile` starts it
over a scenario's settled objects, waits for every first pass (as :func:`bench.reaction.startup`)
and a quiet spell, takes the snapshot and stops it. Tracing costs memory and time of its own, so the
RSS it reports is not comparable with an untraced run; the shares are what it is for.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from bench import reaction
from bench.argo import rss_bytes
from bench.harness import ROOT, Operator, log

OUT_ENV = "SLIPWAY_BENCH_PROFILE_OUT"
WRAPPER = r"""
import json, os, re, runpy, signal, sys, tracemalloc
tracemalloc.start(1)

def _package(filename):
    m = re.search(r"site-packages/([^/]+)", filename)
    if m:
        return m.group(1).removesuffix(".py")
    m = re.search(r"/operator/(slipway(?:/[^/]+)?)", filename)
    if m:
        return m.group(1).removesuffix(".py")
    return "python" if "/lib/python" in filename else filename

def _dump(*_):
    snap = tracemalloc.take_snapshot()
    total = sum(s.size for s in snap.statistics("filename"))
    packages = {}
    for s in snap.statistics("filename"):
        key = _package(s.traceback[0].filename)
        size, count = packages.get(key, (0, 0))
        packages[key] = (size + s.size, count + s.count)
    def rows(kind, limit):
        return [{"where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}" if kind == "lineno"
                 else s.traceback[0].filename, "bytes": s.size, "blocks": s.count}
                for s in snap.statistics(kind)[:limit]]
    out = {"traced_bytes": total, "traced_peak_bytes": tracemalloc.get_traced_memory()[1],
           "by_line": rows("lineno", 40), "by_file": rows("filename", 25),
           "by_package": sorted(({"package": k, "bytes": v[0], "blocks": v[1]} for k, v in packages.items()),
                                key=lambda r: -r["bytes"])[:25]}
    path = os.environ["SLIPWAY_BENCH_PROFILE_OUT"]
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)

signal.signal(signal.SIGUSR1, _dump)
sys.argv = ["slipway", *sys.argv[1:]]
runpy.run_module("slipway", run_name="__main__", alter_sys=True)
"""


def profile(
    env: dict[str, str], namespace: str, names: set[str], run_dir: Path, quiet_seconds: float = 30,
    timeout: float = 900,
) -> dict[str, Any]:  # fmt: skip
    """Run the operator of ``env`` under tracemalloc over ``names`` (the other operator stopped) and
    return its snapshot's top allocations."""
    out_path = run_dir / "memprofile.snapshot"  # JSON; not a scenario file (publish keeps *.json)
    out_path.unlink(missing_ok=True)
    operator = Operator(ROOT, {**env, OUT_ENV: str(out_path)}, [namespace], run_dir / "memprofile-operator.log",
                        launcher=["-c", WRAPPER])  # fmt: skip
    metrics_url = f"http://127.0.0.1:{env['SLIPWAY_METRICS_PORT']}/metrics"
    t0 = time.monotonic()
    operator.start()
    assert operator.pid is not None
    result: dict[str, Any] = {"objects": len(names), "notes": []}
    try:
        while time.monotonic() - t0 < timeout:
            if not operator.alive():
                raise RuntimeError("the profiled operator exited")
            try:
                seen = reaction.passed("slipway", httpx.get(metrics_url, timeout=10).text, namespace)
            except httpx.HTTPError:
                seen = set()
            if names <= seen:
                break
            time.sleep(2)
        else:
            result["notes"].append(f"not every object passed within {timeout:.0f} s")
        result["passed_seconds"] = round(time.monotonic() - t0, 1)
        time.sleep(quiet_seconds)
        result["rss_bytes_traced_process"] = rss_bytes(operator.pid)
        os.kill(operator.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 300
        while not out_path.exists() and time.monotonic() < deadline and operator.alive():
            time.sleep(1)
        if out_path.exists():
            result.update(json.loads(out_path.read_text()))
        else:
            result["notes"].append("no snapshot was written")
    finally:
        operator.stop()
    log(f"memprofile: {len(names)} objects, traced {result.get('traced_bytes', 0) / 2**20:.0f} MiB; top packages "
        f"{[(r['package'], round(r['bytes'] / 2**20, 1)) for r in result.get('by_package', [])[:6]]}")  # fmt: skip
    return result
