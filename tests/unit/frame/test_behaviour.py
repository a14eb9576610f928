"""The registry of kinds and their behaviour, as the frame reads it: what each kind indexes, whom a
change wakes, which objects a moved alias marks, and a kind of the test's own registered beside the
three, which the frame serves without a change."""

from __future__ import annotations

from typing import Any

import pytest

from slipway import behaviour, kinds, watches
from slipway.artifact import register as artifact_register
from slipway.controller import Cache
from slipway.inference import register as inference_register
from slipway.models.base import StatusModel
from slipway.training import register as training_register

TR, MA, ID = training_register.REGISTRATION, artifact_register.REGISTRATION, inference_register.REGISTRATION


def body(registration: behaviour.Registration, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": registration.kind.api_version,
        "kind": registration.kind.kind,
        "metadata": {"namespace": "team", "name": name, "uid": f"uid-{name}", **meta},
        "spec": spec,
    }


def cache_of(*objects: tuple[behaviour.Registration, dict[str, Any]]) -> Cache:
    """A cache whose indexes hold ``objects`` under the keys the watches give them."""
    indexes: dict[str, dict[tuple[str, ...], list[dict[str, Any]]]] = {r.index: {} for r in behaviour.registered()}
    for registration, obj in objects:
        for key, kept in watches.own_keys(registration, obj).items():
            indexes[registration.index].setdefault(key, []).append(kept)
    return Cache(indexes)


def test_each_of_slipways_kinds_is_registered_by_its_package():
    assert {r.kind for r in behaviour.registered()} >= set(kinds.OWN)
    assert behaviour.of("inferencedeployments") is ID
    with pytest.raises(KeyError):
        behaviour.of("deployments")


RUN = body(TR, "train", {})
ARTIFACT = body(MA, "clf", {"source": {"trainingRunRef": {"name": "train"}}, "model": {"name": "digits"}})
FOLLOWER = body(ID, "serve", {"model": {"name": "digits", "alias": "production"}})
PINNED = body(ID, "pinned", {"model": {"artifactRef": {"name": "clf"}}})
OTHER_MODEL = body(ID, "other", {"model": {"name": "iris", "alias": "production"}})
SAME_NAME_RUN = body(MA, "same", {"source": {"trainingRunRef": {"name": "clf"}}})  # names a run "clf", not the artifact


def test_each_kind_indexes_what_its_spec_names_and_what_it_follows():
    assert ("ref", "TrainingRun", "team", "train") in watches.own_keys(MA, ARTIFACT)
    assert ("ref", "ModelArtifact", "team", "clf") in watches.own_keys(ID, PINNED)
    assert ("model", "team", "digits") in watches.own_keys(ID, FOLLOWER)
    assert not [k for k in watches.own_keys(TR, RUN) if k[0] in ("ref", "model")]


def test_a_change_wakes_the_objects_that_name_it_and_marks_the_followers_of_the_model_it_moves():
    cache = cache_of((TR, RUN), (MA, ARTIFACT), (MA, SAME_NAME_RUN), (ID, FOLLOWER), (ID, PINNED), (ID, OTHER_MODEL))
    assert watches.dependents(TR, RUN, cache) == [("modelartifacts", "team", "clf")]
    assert cache.marks == set()
    woken = watches.dependents(MA, ARTIFACT, cache)
    # the deployment pinned to it and the one following its model; not the artifact naming a run "clf"
    assert sorted(woken) == [("inferencedeployments", "team", "pinned"), ("inferencedeployments", "team", "serve")]
    assert cache.marks == {(("inferencedeployments", "team", "serve"), behaviour.ALIASES)}
    assert cache.take_mark(("inferencedeployments", "team", "serve"), behaviour.ALIASES)
    assert not cache.take_mark(("inferencedeployments", "team", "serve"), behaviour.ALIASES)  # taken once


def test_an_owned_object_wakes_its_owner():
    owner = {"apiVersion": TR.kind.api_version, "kind": "TrainingRun", "name": "train", "uid": "u", "controller": True}
    owned = {**ARTIFACT, "metadata": {**ARTIFACT["metadata"], "ownerReferences": [owner]}}
    assert ("trainingruns", "team", "train") in watches.dependents(MA, owned, cache_of((MA, owned)))


@pytest.mark.parametrize(
    ("namespace", "alias", "expected"),
    [
        ("team", "production", [("inferencedeployments", "team", "serve")]),
        (None, "production", [("inferencedeployments", "team", "serve")]),
        (None, "staging", []),
        ("elsewhere", None, []),
    ],
)
def test_followers_of_a_model_alias(namespace, alias, expected):
    cache = cache_of((ID, FOLLOWER), (ID, PINNED), (ID, OTHER_MODEL))
    assert behaviour.followers(cache, namespace, "digits", alias) == expected


class ToyStatus(StatusModel):
    pass


def test_a_kind_of_its_own_is_served_by_the_frame_as_registered():
    """A toy kind naming a ModelArtifact and following a model: one registration, no frame change."""
    toy_kind = kinds.Kind("Toy", "toys.example", "v1", "toys", indexes=("toys",))
    passes: list[str] = []
    toy = behaviour.Registration(
        toy_kind,
        ToyStatus,
        lambda ctx: passes.append(ctx.key[2]) or None,
        refers={"ModelArtifact": behaviour.spec_path("artifact")},
        follows=lambda b: ("digits", str((b.get("spec") or {}).get("alias") or "")),
    )
    behaviour.register(toy)
    try:
        mine = body(toy, "t", {"artifact": "clf", "alias": "production"})
        cache = cache_of((MA, ARTIFACT), (toy, mine), (ID, FOLLOWER))
        woken = watches.dependents(MA, ARTIFACT, cache)
        assert ("toys", "team", "t") in woken and ("inferencedeployments", "team", "serve") in woken
        assert ((("toys", "team", "t"), behaviour.ALIASES)) in cache.marks
        assert behaviour.followers(cache, None, "digits", "production") == [
            ("inferencedeployments", "team", "serve"), ("toys", "team", "t")
        ]  # fmt: skip
    finally:
        behaviour._REGISTERED.pop("toys")
