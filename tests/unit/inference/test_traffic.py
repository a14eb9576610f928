"""Traffic routers behind one interface (slipway.inference.traffic): the planner is handed the router
of spec.traffic.mode with what a pass observes and never asks which one it is; each router names the
objects that carry a split, by kind.
And analysis values behind one interface (slipway.inference.analysis.Provider): Prometheus is one."""

from __future__ import annotations

import ast
import typing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slipway import kinds
from slipway.inference import traffic
from slipway.inference.analysis import Measurement, judge
from slipway.inference.model import AnalysisMetric, InferenceDeploymentSpec, Traffic
from slipway.inference.rollout.base import Desired, Observed, Track
from slipway.inference.rollout.planner import plan
from slipway.inference.traffic import Objects, Sizing
from slipway.kinds import Kind
from slipway.tenancy import NotAllowed, Policy

OPERATOR = Path(__file__).resolve().parents[3] / "operator" / "slipway"
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")


def spec(**traffic_fields: object) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "m", "alias": "candidate"}, "image": "i", "replicas": 6,
        "autoscaling": {"minReplicas": 6, "maxReplicas": 6},
        "rollout": {"steps": [{"weight": 33}, {"weight": 66}], "maxSurgeReplicas": 2},
        **({"traffic": traffic_fields} if traffic_fields else {}),
    })  # fmt: skip


def test_the_crds_traffic_modes_are_the_router_table():
    modes = typing.get_args(Traffic.model_fields["mode"].annotation)
    assert set(modes) == set(traffic.ROUTERS)
    assert all(router.mode == mode for mode, router in traffic.ROUTERS.items())


def test_no_module_outside_the_routers_and_the_api_names_a_traffic_mode():
    # The planner and the handler go through the interface: a new router touches no other module.
    named = []
    for path in OPERATOR.rglob("*.py"):
        relative = path.relative_to(OPERATOR).as_posix()
        if relative.startswith(("inference/traffic/", "models/", "crdgen", "kinds")) or relative.endswith("/model.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in traffic.ROUTERS:
                named.append(f"{relative}:{node.lineno} {node.value!r}")
    assert named == []


def test_the_planner_looks_up_no_router():
    # It is handed one (Observed.router): it imports the router's types, never the table.
    found = []
    for path in (OPERATOR / "inference" / "rollout").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "slipway.inference":
                found += [f"{path.name}: {a.name}" for a in node.names if a.name == "traffic"]
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("slipway.inference.traffic"):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name not in {"Router", "Sizing"}]
    assert found == []


@pytest.mark.parametrize("mode", sorted(traffic.ROUTERS))
@pytest.mark.parametrize("held_out", [False, True])
def test_each_router_names_objects_of_its_own_kinds_only(mode: str, held_out: bool):
    router = traffic.router(mode)
    s = spec(mode=mode, parentRefs=[{"name": "gw"}]) if mode != "Replicas" else spec()
    objects = router.objects("digits", "team", s, 25, held_out)
    assert set(objects) <= set(router.kinds) and all(objects.values())
    for kind, bodies in objects.items():
        assert all(body["kind"] == kind.kind and body["apiVersion"] == kind.api_version for body in bodies)


def test_every_routed_kind_is_a_cached_child_of_the_deployment():
    # What the child rule lets a deployment write, the cache holds by its own index, and RBAC grants.
    for kind in traffic.routed_kinds():
        assert kind in kinds.CHILDREN and "InferenceDeployment" in kind.parents and kind.indexes, kind.kind
        assert {"create", "delete"} <= set(kind.verbs), kind.kind
        assert kind.rule is not None and (kind.rule.create_only or "update" in kind.verbs), kind.kind
    assert {kinds.SERVICE, kinds.HTTPROUTE} <= set(traffic.routed_kinds())


class Recording:
    """A router the planner has never heard of: 3 canary pods at any step, carrying 42%."""

    mode = "Recording"
    kinds: tuple[Kind, ...] = ()
    weights_apart_from_pods = False

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[int, ...]]] = []

    def check(self, spec, namespace, tenancy) -> None:
        return None

    def split(self, weight: int, total: int, max_surge: int) -> Sizing:
        self.asked.append(("split", (weight, total, max_surge)))
        return Sizing(3, 42, "", total - 3)

    def carried(self, sizing: Sizing, weight: int, canary_ready: int, stable_ready: int) -> int:
        self.asked.append(("carried", (weight, canary_ready, stable_ready)))
        return 42

    def objects(self, name, namespace, spec, canary_weight, held_out=False) -> Objects:
        return {}


def test_the_planner_takes_the_split_and_the_weight_from_the_router_it_is_handed():
    recording = Recording()
    stable = Track("1", V1.uri, 6, 6, 6, True, 6, revision=V1.revision, model="m", available=6)
    canary = Track("2", V2.uri, 3, 1, 3, True, 3, revision=V2.revision, model="m", available=1)
    status = {"phase": "Progressing", "canary": {"revision": V2.revision}, "currentStep": 0}
    p = plan(Observed(spec(), V2, None, stable, canary, status, {}, datetime(2026, 1, 1, tzinfo=UTC), router=recording))
    assert ("split", (33, 6, 2)) in recording.asked and ("carried", (33, 1, 6)) in recording.asked
    assert p.canary_replicas == 3 and p.weight == 42 and p.route_weight == 42 and p.requested_weight == 33


def test_replicas_routes_through_one_service_over_both_tracks():
    objects = traffic.router("Replicas").objects("digits", "team", spec(), 33)
    [service] = objects[kinds.SERVICE]
    assert service["metadata"]["name"] == "digits" and "slipway.dev/track" not in service["spec"]["selector"]
    assert set(objects) == {kinds.SERVICE}
    assert traffic.router("Replicas").carried(Sizing(2, 33, "", 4), 33, 1, 4) == 20  # its share of ready pods


def test_gateway_api_routes_exact_weights_between_track_services():
    s = spec(mode="GatewayAPI", parentRefs=[{"name": "gw"}])
    objects = traffic.router("GatewayAPI").objects("digits", "team", s, 25)
    services = objects[kinds.SERVICE]
    assert sorted(svc["metadata"]["name"] for svc in services) == ["digits", "digits-canary", "digits-stable"]
    [route] = objects[kinds.HTTPROUTE]
    weights = {b["name"]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}
    assert weights == {"digits-stable": 75, "digits-canary": 25}
    # Ready canary pods keep the share they can carry while the rest of the step's start.
    assert traffic.router("GatewayAPI").carried(Sizing(3, 25, "", 7), 25, 1, 7) == 12


def test_gateway_api_refuses_a_gateway_the_namespace_may_not_use():
    s = spec(mode="GatewayAPI", parentRefs=[{"name": "shared", "namespace": "infra"}])
    team = Policy("team", None)
    with pytest.raises(NotAllowed, match=r"spec.traffic.parentRefs\[0\]"):
        traffic.router("GatewayAPI").check(s, "team", team)
    traffic.router("GatewayAPI").check(s, "team", Policy("team", None, gateways=("infra/shared",)))
    traffic.router("Replicas").check(spec(), "team", team)  # nothing to refuse


# -- where analysis values come from --------------------------------------------------------------


class Table:
    """An analysis provider that is not Prometheus: values from a table (metric, track) -> value."""

    def __init__(self, values: dict[tuple[str, str], float | None], down: str | None = None) -> None:
        self.values, self.down = values, down
        self.unavailable: str | None = None
        self.asked: list[tuple[str, str]] = []

    def measure(self, metric: AnalysisMetric, track: str) -> Measurement:
        if self.unavailable:  # found down: not asked again
            return Measurement(metric.name, error=self.unavailable)
        self.asked.append((metric.name, track))
        if self.down:
            self.unavailable = self.down
            return Measurement(metric.name, error=self.unavailable)
        return Measurement(metric.name, value=self.values.get((metric.name, track)))


def test_any_provider_feeds_the_same_judgement():
    metrics = [AnalysisMetric(name="errorRate", max=0.05),
               AnalysisMetric(name="latencyP95Seconds", max_relative_to_stable=1.5),
               AnalysisMetric(name="ttftP95Seconds", max=1.0, dry_run=True)]  # fmt: skip
    values = {("errorRate", "canary"): 0.01, ("latencyP95Seconds", "canary"): 0.4,
              ("latencyP95Seconds", "stable"): 0.2, ("ttftP95Seconds", "canary"): 3.0}  # fmt: skip
    deciding, dry = Table(values), Table(values)
    outcome = judge(metrics, deciding, dry, "inconclusive", "2026-01-01T00:00:00Z")
    assert [r.result for r in outcome.results] == ["Passed", "Failed", "Failed"]
    assert outcome.verdict == "Failed" and outcome.metric == "latencyP95Seconds"  # the dry-run one never decides
    assert deciding.asked == [("errorRate", "canary"), ("latencyP95Seconds", "canary"), ("latencyP95Seconds", "stable")]
    assert dry.asked == [("ttftP95Seconds", "canary")]
    # A bake judges the stable's pods alone: no comparison asked.
    baked = Table(values)
    judge(metrics[:1], baked, Table(values), "inconclusive", "2026-01-01T00:00:00Z", subject="stable")
    assert baked.asked == [("errorRate", "stable")]


def test_a_provider_found_down_holds_the_analysis_and_the_dry_run_metrics_are_not_asked():
    metrics = [AnalysisMetric(name="errorRate", max=0.05), AnalysisMetric(name="ttftP95Seconds", max=1, dry_run=True)]
    dry = Table({})
    outcome = judge(metrics, Table({}, down="refused"), dry, "fail", "2026-01-01T00:00:00Z")
    assert outcome.verdict == "Inconclusive" and outcome.source_unavailable  # never promoted, never rolled back
    assert dry.asked == [] and dry.unavailable == "refused"
