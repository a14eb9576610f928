"""What wakes a TrainingRun's passes besides its own children (its training pods), and the index
its passes read them from."""

from __future__ import annotations

from typing import Any

import kopf

from slipway.training.build import RUN_LABEL, run_of_pod
from slipway.watches import cached, listed


@kopf.index("v1", "pods", id="pods", labels={RUN_LABEL: kopf.PRESENT})
async def pods(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], dict[str, Any]]:
    """Training pods by run: ``("run", namespace, trainingrun)``."""
    meta = body["metadata"]
    return {("run", meta["namespace"], run_of_pod(meta)): cached(body)}


@kopf.on.event("v1", "pods", id="wake-trainingrun-of-pod", labels={RUN_LABEL: kopf.PRESENT})
async def pod_changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    listed(type, memo)
    meta = body["metadata"]
    memo.scheduler.wake(("trainingruns", meta["namespace"], run_of_pod(meta)))
