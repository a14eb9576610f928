"""Scenario B at scale, beyond the window at rest: how fast a controller takes up N settled objects
after a start, and how fast it carries a spec change on one of them to its child while the others
stay settled.

Start-up (:func:`startup`): the controller is stopped and started again; from starting the process
until every one of the N objects has had its first pass, read from the controller's own
``/metrics`` once a second:

- Slipway: the per-object series ``slipway_object_stalled{kind="InferenceDeployment"}`` (a pass
  sets it at the end of each object's first pass, also for an object that needs nothing);
- Argo Rollouts: the per-rollout histogram ``rollout_reconcile_count{namespace,name}`` (observed at
  the end of each reconcile, ``rollout/controller.go``).

Its writes from the start until 15 s after the last object are counted from the audit log (0 is
the goal: a restart changes nothing).

Spec change to child (:func:`spec_changes`): ``changes`` objects picked at random (a fixed seed),
one after the other; each gets a change that Slipway and Argo both carry to one child by one write,
and the time from the patch's answer to the child read back with the new value is recorded, polled
every 20 ms:

- Slipway: ``spec.autoscaling.maxReplicas`` 1 <-> 2, child the HorizontalPodAutoscaler (outside the
  revision: no canary starts);
- Argo: ``spec.replicas`` 1 <-> 2, child the Rollout's current ReplicaSet (``spec.replicas``).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from bench.argo import rss_bytes
from bench.harness import GROUP, VERSION, log
from localkube.audit import requests_by, summarize
from localkube.kube import Kube
from localkube.state import ClusterInfo

WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
SERIES = {
    "slipway": re.compile(r'^slipway_object_stalled\{([^}]*kind="InferenceDeployment"[^}]*)\}', re.M),
    "argo": re.compile(r"^rollout_reconcile_count\{([^}]*)\}", re.M),
}
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def passed(system: str, metrics_text: str, namespace: str) -> set[str]:
    """Names of the objects of ``namespace`` whose first pass the controller's /metrics shows."""
    names = set()
    for match in SERIES[system].finditer(metrics_text):
        labels = dict(LABEL.findall(match.group(1)))
        if labels.get("namespace") == namespace:
            names.add(labels.get("name", ""))
    return names


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..100) of ``values``."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return round(ordered[int(rank) - 1], 3)


def startup(
    info: ClusterInfo, system: str, user: str, namespace: str, names: set[str],
    restart: Callable[[], None], metrics_url: Callable[[], str], alive: Callable[[], bool], timeout: float,
    pid: Callable[[], int | None] | None = None, rss_seconds: float = 90,
) -> dict[str, Any]:  # fmt: skip
    """Restart the controller (``restart`` stops and starts it) and time its first pass over ``names``;
    with ``pid``, its RSS every second until ``rss_seconds`` after the start (the peak of the relist
    and the first passes, and what the process still holds once they are over)."""
    out: dict[str, Any] = {"objects": len(names), "notes": []}
    start = datetime.now(UTC)
    t0 = time.monotonic()
    restart()
    timeline: list[tuple[float, int]] = []
    rss: list[tuple[float, int]] = []

    def sample() -> None:
        if pid is not None and (process := pid()) is not None:
            rss.append((round(time.monotonic() - t0, 1), rss_bytes(process)))

    done_at: float | None = None
    while time.monotonic() - t0 < timeout:
        if not alive():
            out["notes"].append("the controller exited during start-up")
            break
        sample()
        try:
            seen = passed(system, httpx.get(metrics_url(), timeout=10).text, namespace)
        except httpx.HTTPError:
            seen = set()
        count = len(seen & names)
        timeline.append((round(time.monotonic() - t0, 2), count))
        if count >= len(names):
            done_at = time.monotonic()
            break
        time.sleep(1)
    if done_at is None:
        out["notes"].append(f"{timeline[-1][1] if timeline else 0} of {len(names)} passed within {timeout:.0f} s")
    else:
        time.sleep(15)  # requests still in flight after the last first pass are counted too
    while pid is not None and alive() and time.monotonic() - t0 < rss_seconds:
        sample()
        time.sleep(1)
    sample()
    records = requests_by(info, user, start, datetime.now(UTC))
    writes = [r for r in records if r.verb in WRITES]
    out.update({
        "seconds": round(done_at - t0, 2) if done_at is not None else None,
        "means": f"from starting the process to every object's first pass on /metrics ({SERIES[system].pattern})",
        "timeline": timeline[:: max(1, len(timeline) // 60)],
        "requests": len(records),
        "requests_by_verb_resource": summarize(records),
        "writes": len(writes),
        "writes_by_verb_resource": summarize(writes),
        "rss": rss[:: max(1, len(rss) // 90)],
        "rss_bytes_peak": max((b for _, b in rss), default=None),
        "rss_bytes_last": rss[-1][1] if rss else None,
    })  # fmt: skip
    log(f"{system}: start-up over {len(names)} objects: {out['seconds']} s, {len(writes)} writes")
    return out


def _current_replica_set(kube: Kube, namespace: str, name: str) -> str:
    rollout = kube.get(f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/rollouts/{name}")
    return f"{name}-{(rollout.get('status') or {}).get('currentPodHash')}"


def spec_changes(
    kube: Kube, system: str, namespace: str, names: list[str], changes: int, timeout: float = 120, seed: int = 54,
) -> dict[str, Any]:  # fmt: skip
    """``changes`` spec changes, one object at a time; per change, seconds from the patch to its child updated."""
    picks = random.Random(seed).sample(names, min(changes, len(names)))
    seconds: list[float] = []
    missed: list[str] = []
    for name in picks:
        if system == "slipway":
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/inferencedeployments/{name}"
            current = kube.get(path)["spec"]["autoscaling"]["maxReplicas"]
            want = 2 if current == 1 else 1
            body: dict[str, Any] = {"spec": {"autoscaling": {"maxReplicas": want}}}
            child = f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/{name}"
            field = "maxReplicas"
        else:
            path = f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/rollouts/{name}"
            current = kube.get(path)["spec"].get("replicas", 1)
            want = 2 if current == 1 else 1
            body = {"spec": {"replicas": want}}
            child = f"/apis/apps/v1/namespaces/{namespace}/replicasets/{_current_replica_set(kube, namespace, name)}"
            field = "replicas"
        kube.patch(path, body, kind="merge")
        t0 = time.monotonic()
        while True:
            obj = kube.get_or_none(child)
            if obj is not None and (obj.get("spec") or {}).get(field) == want:
                seconds.append(time.monotonic() - t0)
                break
            if time.monotonic() - t0 > timeout:
                missed.append(name)
                break
            time.sleep(0.02)
        time.sleep(0.5)
    out = {
        "changes": len(picks),
        "missed": missed,
        "p50_seconds": percentile(seconds, 50),
        "p90_seconds": percentile(seconds, 90),
        "p99_seconds": percentile(seconds, 99),
        "max_seconds": round(max(seconds), 3) if seconds else None,
        "seconds": [round(s, 3) for s in seconds],
        "means": ("Slipway: spec.autoscaling.maxReplicas 1<->2 until the HPA has it; Argo: spec.replicas 1<->2 until "
                  "the Rollout's current ReplicaSet has it; from the patch's answer, polled every 20 ms"),
    }  # fmt: skip
    log(f"{system}: {len(seconds)} spec changes: p50 {out['p50_seconds']} s, p99 {out['p99_seconds']} s, "
        f"{len(missed)} missed")  # fmt: skip
    return out
