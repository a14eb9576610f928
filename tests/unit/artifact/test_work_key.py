"""A ModelArtifact's versions are keyed on the work it asks for (namespace, name, spec, resolved
source), not only on its uid: the same YAML applied again (a new uid, no status) finds what its
predecessor registered; versions registered before work keys are still found by uid. The key hashes
what the user wrote, so a release that adds a defaulted field keeps every key; versions registered
under the earlier rule (defaults hashed) are found by that rule's key (pure)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from slipway.artifact.model import Gate, ModelArtifactSpec, Validation
from slipway.artifact.work import LEGACY_FIELDS, current_work_key, legacy_work_key, work_keys
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


# ---------------------------------------------- the key hashes what the user wrote, not the defaults

EVERY: dict[str, Any] = {  # every field of the schema the legacy key was computed with
    "model": {"name": "digits"},
    "source": {"mlflowRun": {"runId": "r1", "artifactPath": "model"}},
    "quantization": {"method": "int8-dynamic", "image": "q:1", "command": ["python", "q.py"], "args": ["--x"]},
    "validation": {
        "image": "v:1", "command": ["python", "v.py"], "args": ["--y"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        "gates": [{"metric": "accuracy", "min": 0.8, "max": 1.0},
                  {"metric": "accuracy", "maxRelativeDrop": 0.02, "baseline": "production",
                   "onMissingBaseline": "fail"},
                  {"metric": "costPerMillionPredictions", "maxRelativeToBaseline": 0.9, "baseline": "production"}],
    },
    "aliases": ["candidate", "production"],
}  # fmt: skip
SHORT: dict[str, Any] = {"model": {"name": "digits"}, "source": {"mlflowRun": {"runId": "r1"}},
                         "validation": {"gates": [{"metric": "accuracy", "min": 0.8}]}}  # fmt: skip
# SHORT with every default the CRD's schema or the model fills in, as the API server returns it
FILLED: dict[str, Any] = {**SHORT, "source": {"mlflowRun": {"runId": "r1", "artifactPath": "model"}},
                          "quantization": {"method": "none"}, "aliases": ["candidate"],
                          "validation": {"gates": [{"metric": "accuracy", "min": 0.8,
                                                    "onMissingBaseline": "pass"}]}}  # fmt: skip


# A later release, simulated: a defaulted field added at the top of the spec and one inside a gate.
class NewerGate(Gate):
    window: int = Field(default=1)


class NewerValidation(Validation):
    gates: list[NewerGate] = Field(default_factory=list)  # type: ignore[assignment]


class NewerSpec(ModelArtifactSpec):
    timeout_seconds: int = Field(default=600)
    validation: NewerValidation | None = None  # type: ignore[assignment]


def keys(model: type[ModelArtifactSpec], spec: dict[str, Any]) -> tuple[str, str | None]:
    parsed = model.model_validate(spec)
    return current_work_key("team-a", "digits-v1", parsed, URI), legacy_work_key("team-a", "digits-v1", parsed, URI)


def with_newer_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` as a later release's API server returns it: its new fields' defaults filled in."""
    validation = spec["validation"] | {"gates": [g | {"window": 1} for g in spec["validation"]["gates"]]}
    return {**spec, "timeoutSeconds": 600, "validation": validation}


def test_a_release_adding_a_defaulted_field_keeps_the_key_of_the_same_yaml() -> None:
    today = keys(ModelArtifactSpec, SHORT)
    assert keys(NewerSpec, SHORT) == today  # the new fields left out of the YAML
    assert keys(NewerSpec, with_newer_defaults(SHORT)) == today  # and filled in by the API server
    assert keys(NewerSpec, with_newer_defaults(FILLED)) == today
    assert keys(NewerSpec, EVERY) == keys(ModelArtifactSpec, EVERY)
    # A new field set to something else is other work, which no version of the earlier rule was for.
    other = keys(NewerSpec, {**SHORT, "timeoutSeconds": 30})
    assert other[0] != today[0] and other[1] is None
    gated = with_newer_defaults(SHORT)
    gated["validation"]["gates"][0]["window"] = 5
    assert keys(NewerSpec, gated)[0] != today[0] and keys(NewerSpec, gated)[1] is None


def test_a_default_written_or_left_out_is_the_same_work_and_other_values_are_not() -> None:
    assert keys(ModelArtifactSpec, FILLED) == keys(ModelArtifactSpec, SHORT)
    assert keys(ModelArtifactSpec, {**SHORT, "quantization": {}})[0] == keys(ModelArtifactSpec, SHORT)[0]
    changed = [
        {**SHORT, "quantization": {"method": "fp16"}},
        {**SHORT, "aliases": ["production"]},
        {**SHORT, "source": {"mlflowRun": {"runId": "r1", "artifactPath": "other"}}},
        {**SHORT, "validation": {"gates": [{"metric": "accuracy", "min": 0.8, "onMissingBaseline": "fail",
                                            "maxRelativeDrop": 0.1, "baseline": "production"}]}},
        {**SHORT, "validation": {}},  # the evaluator still runs, with no gate
        {key: value for key, value in SHORT.items() if key != "validation"},  # no evaluator at all
    ]  # fmt: skip
    found = {keys(ModelArtifactSpec, spec)[0] for spec in changed}
    assert len(found) == len(changed) and keys(ModelArtifactSpec, SHORT)[0] not in found


def test_the_legacy_key_is_the_one_versions_registered_before_carry() -> None:
    # The earlier rule, pinned: sha256 over the spec with its defaults (model_dump(exclude_none)). Values
    # computed with it; they must never change, or versions registered then are registered again.
    assert keys(ModelArtifactSpec, EVERY)[1] == "8a0593ecf4e912af0dde1a17e74f4fe5"
    assert keys(ModelArtifactSpec, {"model": {"name": "digits"}, "source": {"mlflowRun": {"runId": "r1"}}})[1] == (
        "1e98a4a94e64538621bc6273d1edd308"
    )
    parsed = ModelArtifactSpec.model_validate(EVERY)
    assert legacy_work_key("team-a", "digits-v1", parsed, URI) == work_key(
        "team-a", "digits-v1", parsed.model_dump(mode="json", by_alias=True, exclude_none=True), URI
    )
    assert keys(NewerSpec, with_newer_defaults(EVERY))[1] == "8a0593ecf4e912af0dde1a17e74f4fe5"  # and stays so
    assert set(LEGACY_FIELDS) == {"model", "source", "quantization", "validation", "aliases"}


def test_a_version_registered_under_the_legacy_key_is_adopted_not_registered_again() -> None:
    parsed = ModelArtifactSpec.model_validate(SHORT)
    current, legacy = work_keys("team-a", "digits-v1", parsed, URI)
    assert current != legacy
    earlier = version("4", **{UID_TAG: "uid-before-the-upgrade", ROLE_TAG: "source", WORK_TAG: legacy})
    records = Registry([earlier])
    found = records.version_of("digits", "uid-after", "source", work_keys("team-a", "digits-v1", parsed, URI))
    assert found is not None and found.version == "4"
    assert records.searches == [
        model_version_filter("digits", {WORK_TAG: key, ROLE_TAG: "source"}) for key in (current, legacy)
    ]
    # A version of the current rule is found by the first search; another spec finds neither.
    records = Registry([version("5", **{UID_TAG: "u", ROLE_TAG: "source", WORK_TAG: current}), earlier])
    assert records.version_of("digits", "uid-after", "source", [current, legacy]).version == "5"  # type: ignore[union-attr]
    assert len(records.searches) == 1
    other = work_keys("team-a", "digits-v1", ModelArtifactSpec.model_validate({**SHORT, "aliases": ["x"]}), URI)
    assert Registry([earlier]).version_of("digits", "uid-after", "source", other) is None
