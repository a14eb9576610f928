"""An InferenceDeployment with no stable of its own and no status (re-created from Git, restored
without status): a version MLflow records as rolled back is refused as status.lastRollback refuses
it, unless slipway.dev/retry; what the promote alias names is served first; an alias move MLflow
already has is not made again (pure, and the alias check with a stand-in client)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from slipway.inference import traffic
from slipway.inference.adopt import drop_moves_made
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.base import Desired, Observed, Plan, RegistryView, Track
from slipway.inference.rollout.planner import plan
from slipway.inference.rollout.records import ROLLBACK_TAG, new_rollback, rollback_record, rollback_tag
from slipway.inference.rollout.restore import record_from_tag
from slipway.inference.rollout.rollbacktag import RollbackTag, parse_tag
from slipway.mlflow import MlflowUnavailable
from slipway.mlflow.registry import ModelVersion

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")
RETRY = {"slipway.dev/retry": "true"}
ME = "ns/d"  # the deployment under test, as its tags name it
TAG = f"deployment={ME}, reason=ProgressDeadlineExceeded, revision=old-rev2, time=2025-12-31T10:00:00Z"


def spec(**rollout: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "m", "alias": "candidate"}, "image": "i",
        "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
        "rollout": {"steps": [{"weight": 50}], "interval": "30s", "promoteAlias": "production", **rollout},
    })  # fmt: skip


ROUTER = traffic.router("Replicas")  # spec()'s traffic mode


def track(d: Desired, ready: int = 2) -> Track:
    return Track(d.version, d.uri, 2, ready, 2, True, pods=2, revision=d.revision, model=d.model, available=ready)


def fresh(view: RegistryView | None, annotations: dict[str, str] | None = None, **kw: Any) -> Observed:
    """A re-created object's first pass: no stable Deployment, no status."""
    status = kw.get("status") or {}
    return Observed(
        spec(), V2, None, None, None, status, annotations or {}, NOW, registry=view, deployment=ME, router=ROUTER
    )


def next_pass(first: Plan, stable: Track | None, annotations: dict[str, str] | None = None) -> Observed:
    """The pass after ``first`` was written: its status, the stable it made (nothing read from MLflow)."""
    status = {"phase": first.phase, **first.status}
    if stable is not None:
        status["stable"] = {"revision": stable.revision, "modelVersion": stable.version}
    return Observed(spec(), V2, None, stable, None, status, annotations or {}, NOW, deployment=ME, router=ROUTER)


def test_the_tag_is_read_back_as_the_rollback_wrote_it() -> None:
    record = rollback_record(V2, "AnalysisFailed", NOW, "errorRate", 0.3)
    tag = rollback_tag(V2, record, ME)["value"]
    assert parse_tag(tag) == RollbackTag(ME, "AnalysisFailed", "rev2", "2026-01-01T12:00:00Z", "errorRate", 0.3)
    back = record_from_tag(V2, parse_tag(tag), fresh(None))
    assert {k: back[k] for k in ("reason", "metric", "value", "time", "revision", "modelVersion")} == {
        "reason": "AnalysisFailed", "metric": "errorRate", "value": 0.3, "time": "2026-01-01T12:00:00Z",
        "revision": "rev2", "modelVersion": "2"}  # fmt: skip
    assert back["tag"] == tag


@pytest.mark.parametrize("rest", ["", "garbage", "reason=, value=nan", "value=inf, metric=", "reason=Made up"])
def test_a_tag_naming_this_deployment_written_by_hand_still_refuses(rest: str) -> None:
    refused = plan(fresh(RegistryView(f"deployment={ME}, {rest}", None)))
    back = refused.status["lastRollback"]
    assert refused.phase == "RolledBack" and back["reason"] == "RolledBack" and back["time"]
    assert back["revision"] == "rev2" and "value" not in back and back["tag"] == f"deployment={ME}"


@pytest.mark.parametrize("tag", ["reason=Aborted, revision=r, time=2025-12-31T10:00:00Z",  # before tags named one
                                 "deployment=other/d, reason=Aborted", "deployment=ns/d2, reason=Aborted",
                                 "deployment=NS/D, reason=Aborted", "reason=Aborted, deployment=",
                                 "metric=x, deployment=other/d, deployment=ns/d"])  # fmt: skip
def test_a_tag_naming_another_deployment_or_none_is_not_honoured(tag: str) -> None:
    served = plan(fresh(RegistryView(tag, V1)))  # production served first, no refusal
    assert (served.phase, served.stable, "lastRollback" in served.status) == ("Progressing", V1, False)
    alone = plan(fresh(RegistryView(tag, None)))  # nothing else: the version is served
    assert (alone.phase, alone.stable) == ("Progressing", V2)
    beside = plan(Observed(spec(), V2, None, track(V1), None, {}, {}, NOW, registry=RegistryView(tag, None),
                           deployment=ME, router=ROUTER))  # fmt: skip
    assert beside.canary == V2 and beside.phase != "RolledBack"


def test_a_rolled_back_version_is_refused_and_production_served() -> None:
    first = plan(fresh(RegistryView(TAG, V1)))
    assert (first.phase, first.stable, first.canary, first.registry) == ("RolledBack", V1, None, [])
    ready = next(c for c in first.conditions if c.type == "Ready")
    assert ready.reason == "RolledBack" and ready.status == "False"
    for words in (
        "m version 2 (revision rev2) was rolled back (ProgressDeadlineExceeded",
        ROLLBACK_TAG,
        "m version 1 (revision rev1), which MLflow alias production names",
        "slipway.dev/retry=true",
    ):
        assert words in ready.message, ready.message
    record = first.status["lastRollback"]
    assert (record["revision"], record["reason"], record["tag"]) == ("rev2", "ProgressDeadlineExceeded", TAG)
    assert first.durable and new_rollback({}, first) is None  # on record first; counted when it happened
    # The next passes have a stable of their own: status.lastRollback refuses, MLflow is not asked.
    later = plan(next_pass(first, track(V1)))
    assert (later.phase, later.canary, later.stable, later.registry) == ("RolledBack", None, None, [])
    assert ROLLBACK_TAG in next(c for c in later.conditions if c.type == "Ready").message


def test_with_nothing_else_to_serve_nothing_is_served() -> None:
    first = plan(fresh(RegistryView(TAG, None)))
    assert (first.phase, first.stable, first.canary) == ("RolledBack", None, None)
    assert "nothing else is served" in next(c for c in first.conditions if c.type == "Ready").message


def test_retry_serves_production_then_canaries_the_version() -> None:
    first = plan(fresh(RegistryView(TAG, V1), RETRY))
    assert (first.phase, first.stable, first.canary) == ("Progressing", V1, None)
    assert first.consumed_annotation == "slipway.dev/retry" and first.durable
    assert first.status["lastRollback"]["retried"] is True
    later = plan(next_pass(first, track(V1)))
    assert later.canary == V2 and later.phase != "RolledBack" and later.stable is None


def test_retry_with_nothing_else_to_serve_goes_to_the_stable_track() -> None:
    first = plan(fresh(RegistryView(TAG, None), RETRY))
    assert (first.phase, first.stable, first.consumed_annotation) == ("Progressing", V2, "slipway.dev/retry")


def test_a_retry_on_record_is_not_refused_again_by_the_tag() -> None:
    status = {"lastRollback": {"revision": "rev2", "reason": "Aborted", "retried": True, "time": "t"}}
    again = plan(fresh(RegistryView(TAG, None), status=status))
    assert (again.phase, again.stable) == ("Progressing", V2)


def test_production_is_served_before_a_canary_of_another_version() -> None:
    first = plan(fresh(RegistryView(None, V1)))
    assert (first.phase, first.stable, first.canary, first.registry) == ("Progressing", V1, None, [])
    assert next(c for c in first.conditions if c.type == "Progressing").reason == "RestoringStable"
    later = plan(next_pass(first, track(V1)))
    assert later.canary == V2 and later.stable is None  # a canary against what production serves


@pytest.mark.parametrize("view", [RegistryView(None, None), None])
def test_what_production_serves_or_a_new_object_goes_to_the_stable_track(view: RegistryView | None) -> None:
    first = plan(fresh(view))
    assert (first.phase, first.stable, first.canary, first.registry) == ("Progressing", V2, None, [])


def test_a_stable_on_record_comes_back_first_whatever_mlflow_says() -> None:
    status = {"stable": {"revision": "rev1", "modelVersion": "1", "modelName": "m", "uri": "models:/m/1"}}
    first = plan(fresh(RegistryView(TAG, None), status=status))
    assert first.stable == V1 and "lastRollback" not in first.status


def test_a_stable_left_behind_that_status_does_not_record_starts_no_canary_of_a_tagged_version() -> None:
    view = RegistryView(TAG, None)
    obs = Observed(spec(), V2, None, track(V1), None, {}, {}, NOW, registry=view, deployment=ME, router=ROUTER)
    refused = plan(obs)
    assert (refused.phase, refused.canary, refused.stable) == ("RolledBack", None, None)
    assert refused.status["lastRollback"]["tag"] == TAG
    assert (
        "stable serves m version 1 (revision rev1)" in next(c for c in refused.conditions if c.type == "Ready").message
    )
    # Retried, or no tag: a canary as for any other version.
    for asked, view in ((RETRY, RegistryView(TAG, None)), ({}, RegistryView(None, None))):
        obs = Observed(spec(), V2, None, track(V1), None, {}, asked, NOW, registry=view, deployment=ME, router=ROUTER)
        canaried = plan(obs)
        assert canaried.canary == V2 and canaried.phase != "RolledBack"


class Registry:
    """A stand-in MLflow for the alias read: ``aliases`` (alias -> version), or unreachable."""

    def __init__(self, aliases: dict[str, str] | None) -> None:
        self.aliases, self.reads = aliases, 0

    def get_version_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        self.reads += 1
        if self.aliases is None:
            raise MlflowUnavailable("down")
        found = self.aliases.get(alias)
        return ModelVersion(name, found, f"models:/{name}/{found}") if found else None


def settled_plan() -> Plan:
    """The first revision settled: it would move production to it."""
    obs = Observed(spec(), V2, None, track(V2), None, {"phase": "Progressing"}, {}, NOW, router=ROUTER)
    return plan(obs)


@pytest.mark.parametrize(
    ("aliases", "status", "moves", "reads"),
    [({"production": "2"}, {"phase": "Progressing"}, 0, 1),  # already there: not moved again
     ({"production": "1"}, {"phase": "Progressing"}, 1, 1),
     ({}, {"phase": "Progressing"}, 1, 1),
     (None, {"phase": "Progressing"}, 1, 1),  # MLflow down: kept, pending
     ({"production": "2"}, {"phase": "Promoting"}, 1, 0)],  # a promotion moves it as decided, unread
)  # fmt: skip
def test_an_alias_move_mlflow_already_has_is_not_made_again(aliases, status, moves, reads) -> None:
    decision = settled_plan()
    assert [u["alias"] for u in decision.registry] == ["production"]
    client = Registry(aliases)
    drop_moves_made(client, status, decision)  # type: ignore[arg-type]
    assert (len(decision.registry), client.reads) == (moves, reads)
