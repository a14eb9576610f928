"""A traffic router added from the test tree alone, with an object kind no router owned before (a
made-up TrafficSplit): what docs/extending.md lists for a router is all it takes. Its module is the
class here, its kind a row of slipway.kinds (:data:`TRAFFIC_SPLIT`), its row of traffic.ROUTERS added
where a test needs it; the CRD's traffic.mode enum is left out (the test builds its spec past it).

The planner, handed the router with what the pass observes, runs a canary through its step and its
promotion taking every share of traffic from the router; the handler's routing ensures its
TrafficSplit once the pods are applied and prunes it when the mode changes; the RBAC generated from
the table grants the new kind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from slipway import kinds, rbacgen
from slipway.inference import build, routing, traffic
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.base import Desired, Observed, Track
from slipway.inference.rollout.planner import plan
from slipway.inference.traffic import Objects, Sizing
from slipway.kinds import SERVICE, Kind, UpdateRule

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")

# The kind's row, as it would read in slipway.kinds.CHILDREN.
TRAFFIC_SPLIT = Kind(
    "TrafficSplit",
    "split.example.com",
    "v1alpha1",
    "trafficsplits",
    indexes=("trafficsplits",),
    managed=True,
    rule=UpdateRule(),
    parents=("InferenceDeployment",),
    verbs=("get", "list", "watch", "create", "update", "delete"),
    uses="Fixed traffic mode: the TrafficSplit's weights; deleted when the mode changes.",
)


class Fixed:
    """A router Slipway has never heard of: any step gets 2 canary pods carrying 25% once both are
    ready (none before), and while both tracks serve with no step the canary gets 30%. The split is
    carried by a TrafficSplit between the tracks' Services."""

    mode = "Fixed"
    kinds: tuple[Kind, ...] = (SERVICE, TRAFFIC_SPLIT)
    weights_apart_from_pods = False

    def __init__(self) -> None:
        self.asked: list[str] = []

    def check(self, spec: Any, namespace: str, tenancy: Any) -> None:
        return None

    def split(self, weight: int, total: int, max_surge: int) -> Sizing:
        self.asked.append("split")
        return Sizing(2, 25, "", total - 2)

    def carried(self, sizing: Sizing, weight: int, canary_ready: int, stable_ready: int) -> int:
        self.asked.append("carried")
        return sizing.share if canary_ready >= sizing.pods else 0

    def shared(self, canary_ready: int, stable_ready: int) -> int:
        self.asked.append("shared")
        return 30

    def objects(self, name: str, namespace: str, spec: Any, canary_weight: int, held_out: bool = False) -> Objects:
        services = {track: build.service(name, namespace, spec, track) for track in ("stable", "canary")}
        share = {"stable": 100 - canary_weight, "canary": canary_weight}
        backends = [{"service": body["metadata"]["name"], "weight": share[t]} for t, body in services.items()]
        split = {
            "apiVersion": TRAFFIC_SPLIT.api_version,
            "kind": TRAFFIC_SPLIT.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"backends": backends},
        }
        return {SERVICE: tuple(services.values()), TRAFFIC_SPLIT: (split,)}


def fixed_spec() -> InferenceDeploymentSpec:
    spec = InferenceDeploymentSpec.model_validate({
        "model": {"name": "m", "alias": "candidate"}, "image": "i", "replicas": 4,
        "autoscaling": {"minReplicas": 4, "maxReplicas": 4},
        "rollout": {"steps": [{"weight": 20}], "interval": "30s", "maxSurgeReplicas": 2},
    })  # fmt: skip
    # The CRD's enum would name a real router's mode; this router is handed to the planner directly.
    return spec.model_copy(update={"traffic": spec.traffic.model_copy(update={"mode": "Fixed"})})


def track(d: Desired, ready: int, replicas: int) -> Track:
    return Track(
        d.version, d.uri, replicas, ready, replicas, True, replicas, revision=d.revision, model=d.model, available=ready
    )


def observe(
    router: Fixed, stable: Track, canary: Track | None, status: dict[str, Any], now: datetime = NOW
) -> Observed:
    return Observed(fixed_spec(), V2, None, stable, canary, status, {}, now, router=router)


def weights(routed: Objects) -> dict[str, int]:
    [split] = routed[TRAFFIC_SPLIT]
    return {b["service"]: b["weight"] for b in split["spec"]["backends"]}


def test_a_router_added_by_a_test_drives_a_canary_step_and_its_promotion():
    fixed, stable = Fixed(), track(V1, 4, 4)
    # A new revision: the canary's pods start as the router split the step, carrying nothing yet.
    starting = plan(observe(fixed, stable, None, {"phase": "Promoted", "stable": {"revision": "rev1"}}))
    assert (starting.phase, starting.canary_replicas, starting.stable_target) == ("Progressing", 2, 2)
    assert (starting.weight, starting.route_weight, starting.requested_weight) == (0, 0, 20)
    assert fixed.asked[:2] == ["split", "carried"]

    # Both canary pods ready: the step's share is the router's 25% (the step asked for 20%), and
    # its TrafficSplit carries it.
    step = {"phase": "Analyzing", "canary": {"revision": "rev2", "readyReplicas": 2}, "currentStep": 0,
            "stepStartTime": NOW.isoformat(), "canaryStartTime": NOW.isoformat()}  # fmt: skip
    serving = plan(observe(fixed, stable, track(V2, 2, 2), step, NOW + timedelta(seconds=10)))
    assert (serving.phase, serving.weight, serving.route_weight, serving.requested_weight) == ("Analyzing", 25, 25, 20)
    routed = fixed.objects("digits", "team", fixed_spec(), serving.route_weight, serving.held_out)
    assert weights(routed) == {"digits-stable": 75, "digits-canary": 25}

    # The step held its 30 s: promoted, both tracks share traffic as the router says (30%).
    promoting = plan(observe(fixed, stable, track(V2, 2, 2), step, NOW + timedelta(seconds=31)))
    assert (promoting.phase, promoting.weight, promoting.route_weight) == ("Promoting", 30, 30)
    assert promoting.durable and promoting.status["previousStable"]["revision"] == "rev1"

    # The promotion rolls the stable while the canary's pods keep serving their router's share.
    rolling = {
        **step,
        "phase": "Promoting",
        "previousStable": promoting.status["previousStable"],
        "lastProgressTime": (NOW + timedelta(seconds=31)).isoformat(),
    }
    p = plan(observe(fixed, stable, track(V2, 2, 2), rolling, NOW + timedelta(seconds=35)))
    assert (p.phase, p.stable, p.weight, p.route_weight) == ("Promoting", V2, 30, 30)
    assert fixed.asked.count("shared") == 2


class Recorded:
    """The pass's context as routing uses it: what it ensures and what it keeps, by index."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, tuple[str, ...]]] = []

    def ensure(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("ensure", index, (body["metadata"]["name"],)))
        return body

    def prune(self, index: str, wanted: list[str], only: object = None) -> None:
        self.calls.append(("keep", index, tuple(wanted)))


def test_its_objects_are_ensured_by_kind_and_pruned_when_the_mode_changes(monkeypatch: pytest.MonkeyPatch):
    fixed, ctx = Fixed(), Recorded()
    routed = fixed.objects("digits", "team", fixed_spec(), 25)
    routing.before_pods(ctx, routed)
    assert ctx.calls == [
        ("ensure", "services", ("digits-stable",)),
        ("ensure", "services", ("digits-canary",)),
        ("keep", "services", ("digits-stable", "digits-canary")),
    ]
    ctx.calls.clear()
    routing.after_pods(ctx, routed)  # once the track Deployments are applied
    assert ("ensure", "trafficsplits", ("digits",)) in ctx.calls and ("keep", "trafficsplits", ("digits",)) in ctx.calls
    assert ("keep", "httproutes", ()) in ctx.calls  # another router's kind: none of it is wanted

    # The deployment moves to Replicas: with the router's row in traffic.ROUTERS, its kind is pruned.
    monkeypatch.setitem(traffic.ROUTERS, fixed.mode, fixed)
    ctx.calls.clear()
    routing.after_pods(ctx, traffic.router("Replicas").objects("digits", "team", fixed_spec(), 0))
    assert ("keep", "trafficsplits", ()) in ctx.calls
    assert not [call for call in ctx.calls if call[0] == "ensure"]


def test_its_kind_is_granted_by_the_generated_rbac():
    generated = rbacgen.generated((*kinds.ALL, TRAFFIC_SPLIT))
    role = next(d for d in yaml.safe_load_all(generated[rbacgen.CLUSTER_ROLE]) if d["kind"] == "ClusterRole")
    [rule] = [r for r in role["rules"] if r["apiGroups"] == [TRAFFIC_SPLIT.group]]
    assert rule == {
        "apiGroups": ["split.example.com"],
        "resources": ["trafficsplits"],
        "verbs": list(TRAFFIC_SPLIT.verbs),
    }
    assert "trafficsplits" in generated[rbacgen.CHART_RULES]
