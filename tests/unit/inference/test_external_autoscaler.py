"""spec.autoscaling.mode External: another autoscaler (a KEDA ScaledObject) writes spec.replicas
through the scale subresource, Slipway makes no HPA and splits the total between the tracks as it
does under its own HPA; minReplicas 0 is allowed there alone. At zero, an idle deployment runs no
pod; a canary never starts at zero: while a version is canaried or promoted, one stable pod stays
beside it (the baseline its analysis compares with)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from slipway.inference import traffic
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.base import Desired, Observed, Track
from slipway.inference.rollout.budget import total_replicas
from slipway.inference.rollout.planner import plan

BASE: dict[str, Any] = {"model": {"name": "m", "alias": "candidate"}, "image": "i"}
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")


def track(d: Desired, ready: int, replicas: int | None = None) -> Track:
    replicas = ready if replicas is None else replicas
    return Track(d.version, d.uri, replicas, ready, replicas, True, revision=d.revision, model=d.model,
                 available=ready, pods=max(ready, replicas))  # fmt: skip


def canary_status(step: int) -> dict[str, Any]:
    since = NOW.isoformat().replace("+00:00", "Z")
    return {"phase": "Analyzing", "canary": {"revision": V2.revision, "modelVersion": "2"}, "currentStep": step,
            "stepStartTime": since, "canaryStartTime": since, "lastProgressTime": since}  # fmt: skip


def external(replicas: int, min_replicas: int = 0, max_replicas: int = 3) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate(
        {
            **BASE,
            "replicas": replicas,
            "autoscaling": {"mode": "External", "minReplicas": min_replicas, "maxReplicas": max_replicas},
            "rollout": {"steps": [{"weight": 20}, {"weight": 50}], "interval": "30s"},
        }
    )


def observe(s: InferenceDeploymentSpec, desired: Desired, stable: Track | None, canary: Track | None = None,
            status: dict | None = None) -> Observed:  # fmt: skip
    return Observed(s, desired, None, stable, canary, status or {}, {}, NOW, None, router=traffic.router("Replicas"))


@pytest.mark.parametrize(
    ("replicas", "rolling", "total"),
    [(0, False, 0), (0, True, 1), (2, False, 2), (2, True, 2), (9, False, 3), (9, True, 3)],
)
def test_the_total_follows_the_autoscaler_within_the_bounds_and_never_zero_while_rolling(replicas, rolling, total):
    assert total_replicas(external(replicas), rolling=rolling) == total


def test_an_idle_deployment_scaled_to_zero_runs_no_pod() -> None:
    p = plan(observe(external(0), V1, track(V1, ready=1)))
    assert p.stable_replicas == 0 and p.canary is None


def test_a_canary_never_starts_at_zero_one_stable_pod_stays_beside_it() -> None:
    p = plan(observe(external(0), V2, track(V1, ready=0, replicas=0)))
    assert p.canary == V2 and p.canary_replicas == 1
    assert p.stable_replicas == 1, "the stable comes back to one pod: the canary's baseline"


@pytest.mark.parametrize(("total", "stable", "share"), [(1, 1, 50), (2, 2, 33), (3, 3, 25)])
def test_the_autoscalers_total_is_split_mid_canary_as_under_the_hpa(total: int, stable: int, share: int) -> None:
    """Scaled from 1 to 3 at the 20% step (one canary pod from the surge budget): the stable takes
    the new total, and the canary's share of traffic falls as the stable's pods become ready."""
    status = canary_status(step=0)
    p = plan(observe(external(total), V2, track(V1, ready=1), track(V2, ready=1), status))
    assert (p.stable_replicas, p.canary_replicas) == (stable, 1)
    settled = plan(observe(external(total), V2, track(V1, ready=total), track(V2, ready=1), status))
    assert (settled.stable_replicas, settled.canary_replicas, settled.weight) == (stable, 1, share)


@pytest.mark.parametrize(
    ("autoscaling", "words"),
    [
        ({"minReplicas": 0, "maxReplicas": 2}, "0 needs mode External"),
        ({"mode": "HPA", "minReplicas": 0, "maxReplicas": 2}, "0 needs mode External"),
        ({"mode": "External", "maxReplicas": 2, "metrics": [{"type": "Cpu", "targetAverageUtilization": 70}]},
         "with mode External the autoscaler"),
        ({"mode": "Keda", "maxReplicas": 2}, "autoscaling.mode"),
    ],
)  # fmt: skip
def test_a_bad_autoscaling_is_refused_naming_the_field(autoscaling: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as refused:
        InferenceDeploymentSpec.model_validate({**BASE, "autoscaling": autoscaling})
    assert words in str(refused.value), str(refused.value)
