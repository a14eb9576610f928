"""A benchmark run's folder: ``bench/out/run-<time>/`` with ``run.json`` (when, where, which
versions), one raw JSON file per scenario (``rollback.json``, ``at-rest.json``, ``scale.json``)
and ``failures.json``. ``bench/out/last`` points at the newest run. A run kept in Git is published to
``bench/runs/<name>/`` with each file gzip'd (``<name>.json.gz``); ``read`` takes either form.

Only the standard library here: the report imports it without the cluster tooling.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
KEPT = BENCH / "runs"  # published runs, kept in Git (gzip'd JSON)
LAST = OUT / "last"
ARGO_ROLLOUTS_VERSION = "v1.10.1"
KWOK_VERSION = "v0.8.0"


def _run(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kib = next((int(line.split()[1]) for line in meminfo if line.startswith("MemTotal")), 0)
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kib / 1024 / 1024, 1),
            "kernel": platform.release(), "python": platform.python_version()}  # fmt: skip


def versions() -> dict[str, str]:
    controlplane = (ROOT / "e2e" / "controlplane" / "go.mod").read_text()
    lines = [line.split() for line in controlplane.splitlines()]
    kube = next((words[1] for words in lines if len(words) > 1 and words[0] == "k8s.io/kubernetes"), "")
    commit = _run("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD")
    dirty = bool(_run("git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"))
    return {
        "slipway": commit + ("-dirty" if dirty else ""),
        "argo_rollouts": ARGO_ROLLOUTS_VERSION,
        "kwok": KWOK_VERSION,
        "kubernetes": kube,
        "go": _run("go", "env", "GOVERSION"),
    }


def start(out: Path | None = None) -> Path:
    """Make (or reuse) a run's folder, write ``run.json`` if new and point ``bench/out/last`` at it."""
    run = out or OUT / f"run-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "run.json").exists():
        write(run, "run", {"started": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                           "versions": versions()})  # fmt: skip
    if run.resolve().parent == OUT.resolve():
        LAST.unlink(missing_ok=True)
        LAST.symlink_to(run.name)
    return run


def last_run() -> Path:
    if not LAST.exists():
        raise SystemExit(f"no run yet: {LAST} does not exist (run `make bench` first)")
    return LAST.resolve()


def write(run: Path, name: str, data: Any) -> Path:
    """Write ``<run>/<name>.json`` (atomically: a report never reads half a file). A scenario's
    result (a dict) is stamped with when it was written and the versions it ran with
    (``provenance``): a scenario run again into the same folder says so."""
    if isinstance(data, dict) and name not in ("run", "failures"):
        data = {**data, "provenance": {"written": datetime.now(UTC).isoformat(timespec="seconds"),
                                       "versions": versions()}}  # fmt: skip
    path = run / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    tmp.replace(path)
    return path


def read(run: Path, name: str) -> Any | None:
    """``<run>/<name>.json``, or ``<name>.json.gz`` as a kept run holds it; None when neither exists."""
    path = run / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    packed = path.with_name(path.name + ".gz")
    return json.loads(gzip.decompress(packed.read_bytes())) if packed.exists() else None


def pack(text: str) -> bytes:
    """gzip with no time stamp: the same JSON packs to the same bytes, so Git sees no change."""
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def publish(run: Path, name: str) -> Path:
    """Copy a run's raw JSON (not its logs), gzip'd, to ``bench/runs/<name>/``, which is kept in Git
    and which RESULTS.md is rendered from."""
    target = KEPT / name
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(run.glob("*.json")):
        (target / (path.name + ".gz")).write_bytes(pack(path.read_text()))
    return target


def record_failure(run: Path, scenario: str, error: BaseException) -> None:
    failures = read(run, "failures") or {}
    failures[scenario] = {"error": f"{type(error).__name__}: {error}",
                          "traceback": "".join(traceback.format_exception(error))[-4000:]}  # fmt: skip
    write(run, "failures", failures)
