"""A queued TrainingRun's Kueue queue: what Kueue says of its Job, with its place in the LocalQueue
(Kueue's visibility API) and whether its ClusterQueue can ever admit its GPUs."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from slipway.reconcile import Context
from slipway.training import kueue, queueposition, queuequota
from slipway.training.model import TrainingRunSpec
from slipway.training.state import queue_of


def queue(ctx: Context, spec: TrainingRunSpec, job: dict[str, Any]) -> tuple[str | None, kueue.QueueView | None, bool]:
    """The run's Kueue queue, what Kueue says of its Job, and whether its queue position is known."""
    queue_name = queue_of(spec, job)
    queue = kueue.workload_of(job, ctx.cache.owned_by("workloads", job["metadata"]["uid"])) if queue_name else None
    placed = False  # a queued run whose LocalQueue's positions Kueue answers: looked at again in a while
    if queue_name and queue is not None and not queue.admitted and job["spec"].get("suspend"):
        queue, placed = _with_position(ctx, queue_name, queue)
        queue = _with_quota(ctx, spec, queue_name, queue)
    return queue_name, queue, placed


def _with_position(ctx: Context, queue_name: str, queue: kueue.QueueView) -> tuple[kueue.QueueView, bool]:
    """``queue`` with its place in the LocalQueue as Kueue's visibility API says (read at most every
    queueposition.TTL_SECONDS per LocalQueue), and whether that API answered for it."""
    if not ctx.config.queue_position_seconds:
        return queue, False
    place = queueposition.place_of(ctx.kube.api, ctx.namespace, queue_name, queue.workload)
    if place.position is None:
        return queue, place.served
    local, cluster = place.position.in_local_queue, place.position.in_cluster_queue
    return dataclasses.replace(queue, position=local, position_in_cluster_queue=cluster), True


def _with_quota(ctx: Context, spec: TrainingRunSpec, queue_name: str, queue: kueue.QueueView) -> kueue.QueueView:
    """``queue`` saying why its ClusterQueue can never admit the run's GPUs, if it cannot."""
    resources = spec.resources
    if not resources.gpus:
        return queue
    quota = queuequota.quota_of(ctx.kube.api, ctx.namespace, queue_name, resources.gpu_resource_name)
    field = (
        f"spec.resources.gpus ({resources.gpus} per pod x {spec.nodes} pods)"
        if spec.nodes > 1
        else "spec.resources.gpus"
    )
    exceeds = quota.refusal(Decimal(resources.gpus * spec.nodes), field) if quota is not None else None
    return dataclasses.replace(queue, exceeds=exceeds) if exceeds else queue
