"""The ``slipway.dev/rollback`` tag read with a whitelist: only its known fields, each bounded, the
first of each kept; only the deployment it names honours it; and what it holds reaches status,
conditions and metric labels only as bounded text, however long the tag is (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from slipway import metrics
from slipway.inference import traffic
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.rollout.base import Desired, Observed, RegistryView, Track
from slipway.inference.rollout.planner import plan
from slipway.inference.rollout.rollbacktag import MAX_TEXT, RollbackTag, owned_tag, parse_tag, render

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
V1 = Desired("1", "models:/m/1", "m", "rev1")
V2 = Desired("2", "models:/m/2", "m", "rev2")
ME = "team-a/digits"
HUGE = 99_014  # the length of the tag that once became a 189,062-character message
# A condition message of a refusal read back from a tag: its words, the names in it, and the tag.
MESSAGE_BOUND = 2 * MAX_TEXT


def spec() -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "m", "alias": "candidate"}, "image": "i",
        "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
        "rollout": {"steps": [{"weight": 50}], "interval": "30s", "promoteAlias": "production"},
    })  # fmt: skip


ROUTER = traffic.router("Replicas")  # spec()'s traffic mode


def hostile(length: int = HUGE) -> str:
    """A tag naming ME whose every field is stuffed, with unknown fields, to ``length`` characters."""
    head = f"deployment={ME}, reason=AnalysisFailed, revision=r1, time=2026-01-01T00:00:00Z, value=0.5, "
    stuffed = head + "metric=" + "m" * 40_000 + ", note=" + "n" * 40_000 + ", "
    return (stuffed + "x=" + "y" * length)[:length]


def test_the_known_fields_are_kept_and_unknown_ones_dropped() -> None:
    tag = parse_tag("deployment=team-a/digits, owner=root, reason=Aborted, extra=1, revision=abc1234567, "
                    "time=2026-02-03T04:05:06Z, metric=errorRate, value=0.25, tag=deployment=other/x")  # fmt: skip
    assert tag == RollbackTag(ME, "Aborted", "abc1234567", "2026-02-03T04:05:06Z", "errorRate", 0.25)
    assert tag.text() == ("deployment=team-a/digits, reason=Aborted, revision=abc1234567, "
                          "time=2026-02-03T04:05:06Z, metric=errorRate, value=0.25")  # fmt: skip


def test_a_99014_character_tag_gives_a_bounded_record_and_message() -> None:
    value = hostile()
    assert len(value) == HUGE
    tag = parse_tag(value)
    assert tag == RollbackTag(ME, "AnalysisFailed", "r1", "2026-01-01T00:00:00Z", None, 0.5)  # metric: too long
    view = RegistryView(value, V1)
    obs = Observed(spec(), V2, None, None, None, {}, {}, NOW, registry=view, deployment=ME, router=ROUTER)
    refused = plan(obs)
    record = refused.status["lastRollback"]
    messages = [c.message for c in refused.conditions]
    print(f"tag {len(value)} chars -> lastRollback.tag {len(record['tag'])}, longest record field "
          f"{max(len(str(v)) for v in record.values())}, condition messages {[len(m) for m in messages]} "
          f"(bound {MESSAGE_BOUND})")  # fmt: skip
    assert refused.phase == "RolledBack" and len(record["tag"]) <= MAX_TEXT
    assert all(len(str(v)) <= MAX_TEXT for v in record.values())
    assert max(len(m) for m in messages) <= MESSAGE_BOUND
    # The next pass refuses from status.lastRollback: the same bounded words.
    later = plan(Observed(spec(), V2, None, track(V1), None, {"phase": "RolledBack", **refused.status}, {}, NOW,
                          deployment=ME, router=ROUTER))  # fmt: skip
    assert later.phase == "RolledBack" and max(len(c.message) for c in later.conditions) <= MESSAGE_BOUND


def track(d: Desired) -> Track:
    return Track(d.version, d.uri, 2, 2, 2, True, pods=2, revision=d.revision, model=d.model, available=2)


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [("deployment", "a/b", "A/b"), ("deployment", "a" * 63 + "/" + "b" * 253, "a" * 64 + "/b"),
     ("deployment", "a/" + "b" * 253, "a/" + "b" * 254), ("deployment", "a/b.c", "a/b/c"),
     ("reason", "BakeFailed", "bakefailed"), ("reason", "PromotionAborted", "RolledBack"),
     ("revision", "r" * 64, "r" * 65), ("revision", "a.b_c-d", "a b"),
     ("time", "2026-01-01T00:00:00+02:00", "yesterday"), ("time", "2026-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00"),
     ("metric", "m" * 63, "m" * 64), ("metric", "ns:rate/x", "a;b"),
     ("value", "1e-07", "nan"), ("value", "-3", "1" * 33), ("value", "0.5", "inf")],
)  # fmt: skip
def test_each_field_is_kept_within_its_bound_and_dropped_whole_beyond_it(field: str, good: str, bad: str) -> None:
    assert getattr(parse_tag(f"{field}={good}"), field) is not None
    assert getattr(parse_tag(f"{field}={bad}"), field) is None


def test_times_are_kept_as_status_writes_them() -> None:
    assert parse_tag("time=2026-01-01T02:00:00.5+02:00").time == "2026-01-01T00:00:00Z"


def test_the_first_of_each_field_wins_so_a_metric_name_cannot_rename_the_deployment() -> None:
    # A tenant's custom metric named to look like a field: the writer puts the deployment first.
    record = {"reason": "AnalysisFailed", "time": "2026-01-01T00:00:00Z", "metric": "x, deployment=b/c"}
    assert parse_tag(render(ME, record)).deployment == ME
    assert owned_tag(render(ME, record), "b/c") is None and owned_tag(render(ME, record), ME) is not None


@pytest.mark.parametrize("value", [None, "", "reason=Aborted", "deployment=team-b/digits, reason=Aborted"])
def test_only_the_deployment_a_tag_names_honours_it(value: str | None) -> None:
    assert owned_tag(value, ME) is None
    assert owned_tag("deployment=team-a/digits", "") is None  # an Observed that names no deployment


def test_the_longest_rendered_tag_is_max_text() -> None:
    widest = RollbackTag("a" * 63 + "/" + "b" * 253, "PromotionAborted", "r" * 64, "2026-01-01T00:00:00Z",
                         "m" * 63, -1.2345678901234567e-300)  # fmt: skip
    assert len(widest.text()) <= MAX_TEXT
    assert MAX_TEXT == 605  # docs/concepts/security.md gives the bound


def older_status(**big: Any) -> dict[str, Any]:
    """status.lastRollback as an earlier release wrote it from a tag: the tag's text copied whole."""
    record = {"reason": "AnalysisFailed", "modelName": "m", "modelVersion": "2", "revision": "rev2",
              "time": "2026-01-01T00:00:00Z", "tag": "reason=AnalysisFailed", **big}  # fmt: skip
    return {"phase": "RolledBack", "stable": {"revision": "rev1", "modelVersion": "1"}, "lastRollback": record}


def test_a_record_an_earlier_release_copied_whole_is_clipped_in_messages_and_metric_labels() -> None:
    status = older_status(tag="t" * HUGE, reason="r" * HUGE, metric="m" * HUGE, value="v" * HUGE)
    refused = plan(Observed(spec(), V2, None, track(V1), None, status, {}, NOW, deployment=ME, router=ROUTER))
    longest = max(len(c.message) for c in refused.conditions)
    labels = [labels for _, labels, _ in metrics.object_series("InferenceDeployment", "team-a", "digits", status)]
    widest = max(len(label) for row in labels for label in row)
    print(f"status.lastRollback of {HUGE}-character fields -> condition message {longest}, widest label {widest}")
    assert refused.phase == "RolledBack" and longest <= MESSAGE_BOUND and widest <= 64
