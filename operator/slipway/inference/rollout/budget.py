"""Each pass's move of the tracks' replica counts: the step's split of spec.replicas, as the traffic
router observed with the pass (``Observed.router``) plans it, reached one move at a time within
``maxSurgeReplicas`` and ``maxUnavailableReplicas``; the stable's roll budget beside canary pods; a
rolled-back canary's pods held out (pure)."""

from __future__ import annotations

from dataclasses import replace

from slipway.inference.model import InferenceDeploymentSpec, Rollout
from slipway.inference.rollout.base import Observed, Plan, Track, served_by
from slipway.inference.traffic import Sizing
from slipway.status.conditions import parse_time


def total_replicas(spec: InferenceDeploymentSpec, rolling: bool = False) -> int:
    """Serving pods of both tracks: spec.replicas (the autoscaler's, through the scale subresource),
    kept within the autoscaling bounds. ``rolling`` (a canary or a promotion under way): at least 1,
    even when an autoscaler scaled the deployment to zero: a canary never starts at zero, and the
    stable pod beside it is what its analysis compares it with."""
    total = min(spec.autoscaling.max_replicas, max(spec.autoscaling.min_replicas, spec.replicas))
    return max(total, 1) if rolling else total


def next_replicas(
    total: int, target: Sizing, rollout: Rollout, stable: Track, canary: Track | None, canary_out: bool = False
) -> tuple[int, int]:
    """One move from the tracks' replica counts toward ``target`` (stable, canary), within the
    budget: never more than ``total + maxSurgeReplicas`` pods (counting pods that still run above
    a count just lowered), never fewer than ``total - maxUnavailableReplicas`` ready ones. A track
    is scaled down only as far as the other's ready pods cover, and up only as far as the pods
    still running leave room; each pass moves again as pods become ready or go. ``canary_out``: the
    canary leaves at once (a rollback), and the stable comes back as its pods go."""
    floor = total - rollout.max_unavailable_replicas
    budget = total + rollout.max_surge_replicas
    canary_replicas = canary.replicas if canary is not None else 0
    canary_ready = canary.current_ready if canary is not None else 0
    canary_pods = max(canary.pods, canary_replicas) if canary is not None else 0
    s, c = stable.replicas, 0 if canary_out else canary_replicas
    if s > target.stable:
        s = max(target.stable, min(s, floor - min(canary_ready, c)))
    if c > target.pods:
        c = max(target.pods, min(c, floor - min(stable.ready, s)))
    if s < target.stable:
        s = min(target.stable, max(s, budget - max(c, canary_pods)))
    if c < target.pods:
        c = min(target.pods, max(c, budget - max(s, stable.pods)))
    return s, c


def size_tracks(obs: Observed, result: Plan) -> None:
    """The tracks' replica counts for this pass: one move toward the plan's split of spec.replicas
    (see :func:`next_replicas`). Without a canary in the plan, the canary leaves and the stable
    takes all of spec.replicas."""
    total = total_replicas(obs.spec, rolling=result.canary is not None or result.stable_target is not None)
    stable = obs.stable
    canary_out = result.canary is None
    target_canary = 0 if canary_out else result.canary_replicas
    target = Sizing(
        target_canary, 0, "", total - target_canary if result.stable_target is None else result.stable_target
    )
    if stable is None:
        result.stable_replicas = target.stable
        return
    canary = obs.canary
    if canary is not None and result.canary is not None and not canary.serves(result.canary):
        canary = replace(canary, ready=0)  # pods of another revision, being replaced: they carry nothing here
    # The canary leaves at once (a rollback), unless the stable has no ready pod to take its traffic
    # (after a 100% step): then the pods move within the budget like any others.
    out = canary_out and stable.ready > 0
    result.stable_replicas, canary_replicas = next_replicas(total, target, obs.spec.rollout, stable, canary, out)
    if not canary_out:
        result.canary_replicas = canary_replicas
    elif not out and canary_replicas and result.canary is None and canary is not None:
        result.canary, result.canary_replicas = served_by(canary), canary_replicas  # kept until the stable serves
        result.weight = result.route_weight = obs.router.shared(canary.current_ready, stable.ready)
    elif out and canary is not None and (held := held_out(obs, result, canary)) is not None:
        result.canary, result.canary_replicas, result.wake_in = served_by(canary), *held
        result.held_out = True
    if canary is not None and (out or result.phase == "Promoting"):
        route_first(obs, result, canary)
    rolling = result.revert_stable or (result.stable is not None and not stable.serves(result.stable))
    if rolling:
        result.stable_budget = roll_budget(
            total,
            obs.spec.rollout,
            result.stable_replicas,
            max(canary.pods, canary.replicas) if canary is not None else 0,
        )


def held_out(obs: Observed, result: Plan, canary: Track) -> tuple[int, float] | None:
    """After a rollback, where traffic follows the router's weights rather than the pods
    (GatewayAPI): the canary's ready pods kept with no traffic for spec.rollout.scaleDownDelaySeconds
    from the rollback, as many as maxSurgeReplicas allows beside the stable's full count; and the
    seconds left. None: they leave now."""
    rollout = obs.spec.rollout
    if result.phase != "RolledBack" or not canary.replicas or not rollout.scale_down_delay_seconds:
        return None
    if not obs.router.weights_apart_from_pods:
        return None
    record = result.status.get("lastRollback") or obs.status.get("lastRollback") or {}
    when = parse_time(record.get("time"))
    if when is None or record.get("revision") != canary.revision:
        return None
    left = rollout.scale_down_delay_seconds - (obs.now - when).total_seconds()
    keep = min(canary.replicas, canary.current_ready, rollout.max_surge_replicas)  # ready ones: the rest go
    return (keep, left) if left > 0 and keep > 0 else None


ROUTE_SETTLE_SECONDS = 2.0  # the least time a gateway is given to apply a route before pods leave


def route_first(obs: Observed, result: Plan, canary: Track) -> None:
    """Where traffic follows the router's weights, the canary's pods that leave (a promotion moving them
    to the stable, the canary going) leave the route first: this pass sends them no more traffic and
    keeps them until the gateway has had spec.drain.delaySeconds (at least :data:`ROUTE_SETTLE_SECONDS`)
    to apply it. An endpoint picker (InferencePool) stops choosing a pod the moment it starts terminating,
    so a pod that went before the route did would fail the requests still sent to its pool."""
    if not obs.router.weights_apart_from_pods or result.held_out:
        return
    staying = result.canary_replicas if result.canary is not None else 0
    if canary.current_ready <= staying:
        return
    shown = obs.status.get("canary") or {}
    stable_ready = obs.stable.ready if obs.stable is not None else 0
    after = obs.router.shared(staying, stable_ready) if staying else 0
    since = obs.now if (shown.get("weight") or 0) > after else parse_time(shown.get("trafficLeftTime"))
    if result.canary is not None:  # the pods that leave get no more traffic, now or while they stop
        result.weight, result.route_weight = after, after
    settle = max(ROUTE_SETTLE_SECONDS, float(obs.spec.drain.delay_seconds))
    left = settle - (obs.now - since).total_seconds() if since is not None else 0.0
    if since is None or left <= 0:
        return
    if result.canary is None:  # the canary goes: its pods stay, with no traffic, a moment longer
        result.canary, result.held_out = served_by(canary), True
    result.canary_replicas = canary.current_ready
    result.wake_in, result.traffic_left = min(left, result.wake_in or left), since


def roll_budget(total: int, rollout: Rollout, stable: int, canary_pods: int) -> tuple[int, int] | None:
    """The stable's (maxSurge, maxUnavailable) while it rolls beside canary pods, so that the
    budget holds: the surge is what spec.replicas + maxSurgeReplicas leaves; with none left, one
    pod at a time is replaced (the canary's pods carry its share meanwhile). None: the spec's."""
    room = total + rollout.max_surge_replicas - stable - canary_pods
    if room >= rollout.max_surge_replicas:
        return None
    surge = max(0, room)
    return surge, rollout.max_unavailable_replicas if surge > 0 else max(1, rollout.max_unavailable_replicas)
