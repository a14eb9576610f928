"""What wakes a TrainingRun's passes besides its own children: its training pods, and Kueue's
Workloads of its Jobs and JobSets; and the indexes its passes read them from."""

from __future__ import annotations

from typing import Any

import kopf

from slipway import kinds
from slipway.controller import owner_keys
from slipway.packed import Packed
from slipway.training.build import RUN_LABEL, run_of_pod
from slipway.watches import PLURALS, base_keys, cached, listed


@kopf.index("v1", "pods", id="pods", labels={RUN_LABEL: kopf.PRESENT})
async def pods(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Packed]:
    """Training pods by run: ``("run", namespace, trainingrun)``."""
    meta = body["metadata"]
    return {("run", meta["namespace"], run_of_pod(meta)): cached(body)}


@kopf.on.event("v1", "pods", id="wake-trainingrun-of-pod", labels={RUN_LABEL: kopf.PRESENT})
async def pod_changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    listed(type, memo)
    meta = body["metadata"]
    memo.scheduler.wake(("trainingruns", meta["namespace"], run_of_pod(meta)))


# Kueue's Workloads: one per queued Job or JobSet, owned by it, holding Kueue's verdicts (Queued, Admitted,
# Evicted). Kueue does not copy Slipway's labels to them, so they are watched unfiltered (there is
# one per Job in a Kueue queue); without Kueue installed the resource is absent and nothing is watched.
WORKLOADS = kinds.WORKLOAD.resource


@kopf.index(*WORKLOADS, id=kinds.WORKLOAD.index)
async def workloads(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Packed]:
    """Workloads by their Job: ``("owner", job uid)``."""
    return base_keys(body)


@kopf.on.event(*WORKLOADS, id="wake-trainingrun-of-workload")
async def workload_changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    listed(type, memo)
    meta = body["metadata"]
    owners = {(k.kind, k.api_version): k.index for k in (kinds.JOB, kinds.JOBSET)}
    for ref in meta.get("ownerReferences") or []:
        index = owners.get((str(ref.get("kind")), str(ref.get("apiVersion"))))
        if ref.get("controller") and index:
            owner = memo.cache.get(index, meta["namespace"], ref["name"])
            for key in owner_keys(owner or {}, PLURALS):
                memo.scheduler.wake(key)
