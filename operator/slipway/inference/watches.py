"""What wakes a InferenceDeployment's passes besides its own children (its serving pods), and the index
its passes read them from."""

from __future__ import annotations

from typing import Any

import kopf

from slipway.inference.build import DEPLOYMENT_LABEL, TRACK_LABEL, deployment_of_pod
from slipway.packed import Packed
from slipway.watches import cached, listed


@kopf.index("v1", "pods", id="servingpods", labels={DEPLOYMENT_LABEL: kopf.PRESENT})
async def servingpods(body: kopf.Body, **_: Any) -> dict[tuple[str, ...], Packed]:
    """Serving pods by track: ``("track", namespace, inferencedeployment, track)`` (crash loops,
    the scheduler's reasons)."""
    meta = body["metadata"]
    labels = meta["labels"]
    return {("track", meta["namespace"], deployment_of_pod(meta), labels.get(TRACK_LABEL, "")): cached(body)}


@kopf.on.event("v1", "pods", id="wake-inferencedeployment-of-pod", labels={DEPLOYMENT_LABEL: kopf.PRESENT})
async def serving_pod_changed(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    listed(type, memo)
    meta = body["metadata"]
    memo.scheduler.wake(("inferencedeployments", meta["namespace"], deployment_of_pod(meta)))
