"""A ModelArtifact's versions are keyed on the work it asks for (namespace, name, spec, resolved
source), not only on its uid: the same YAML applied again (a new uid, no status) finds what its
predecessor registered; versions registered before work keys are still found by uid (pure)."""

from __future__ import annotations

from typing import Any

from slipway.mlflow.filters import model_version_filter
from slipway.mlflow.records import ROLE_TAG, UID_TAG, WORK_TAG, Records, work_key
from slipway.mlflow.registry import ModelVersion

SPEC = {"model": {"name": "digits"}, "source": {"mlflowRun": {"runId": "r1"}}, "aliases": ["candidate"]}
URI = "runs:/r1/model"


def test_the_work_key_is_the_same_for_the_same_yaml_and_differs_for_other_work() -> None:
    key = work_key("team-a", "digits-v1", SPEC, URI)
    assert key == work_key("team-a", "digits-v1", dict(reversed(list(SPEC.items()))), URI)
    others = [
        work_key("team-b", "digits-v1", SPEC, URI),  # another namespace: never another team's versions
        work_key("team-a", "digits-v2", SPEC, URI),
        work_key("team-a", "digits-v1", {**SPEC, "aliases": ["candidate", "production"]}, URI),
        work_key("team-a", "digits-v1", SPEC, "runs:/r2/model"),  # the same name now resolves elsewhere
    ]
    assert key not in others and len(set(others)) == len(others)


class Registry(Records):
    """Records over an in-memory list of versions (search by the tag equalities of the filter)."""

    def __init__(self, versions: list[ModelVersion]) -> None:  # no HTTP client: nothing else is called
        self.versions = versions
        self.searches: list[str] = []

    def search_model_versions(self, filter: str, order_by: Any = ()) -> list[ModelVersion]:
        self.searches.append(filter)
        return [v for v in self.versions if filter in matching(v)]


def matching(v: ModelVersion) -> set[str]:
    """The filters (as Records writes them) a version answers: by its work key or by its uid, in its role."""
    role = v.tags[ROLE_TAG]
    return {model_version_filter(v.name, {tag: v.tags[tag], ROLE_TAG: role}) for tag in (WORK_TAG, UID_TAG)
            if tag in v.tags}  # fmt: skip


def version(number: str, **tags: str) -> ModelVersion:
    return ModelVersion.from_json({"name": "digits", "version": number, "source": URI,
                                   "tags": [{"key": k, "value": v} for k, v in tags.items()]})  # fmt: skip


def test_a_version_is_found_by_its_work_key_whatever_uid_registered_it() -> None:
    key = work_key("team-a", "digits-v1", SPEC, URI)
    before = version("1", **{UID_TAG: "uid-old", ROLE_TAG: "source", WORK_TAG: key})
    records = Registry([before])
    found = records.version_of("digits", "uid-new", "source", key)
    assert found is not None and found.version == "1"
    assert records.version_of("digits", "uid-new", "source", work_key("team-a", "digits-v1", SPEC, "x")) is None
    assert records.version_of("digits", "uid-new", "quantized", key) is None


def test_a_version_registered_before_work_keys_is_found_by_its_uid() -> None:
    earlier = version("3", **{UID_TAG: "uid-1", ROLE_TAG: "source"})
    records = Registry([earlier])
    found = records.version_of("digits", "uid-1", "source", work_key("team-a", "digits-v1", SPEC, URI))
    assert found is not None and found.version == "3"
    assert len(records.searches) == 2  # the work key first, then the uid
