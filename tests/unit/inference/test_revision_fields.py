"""Every field of an InferenceDeployment's spec is sorted, once, into the revision (a change starts
a canary) or outside it (slipway.inference.revision): a new field sorted nowhere fails here, naming
it; and each sorted field moves the revision exactly when it is sorted into it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from slipway.inference.model import InferenceDeploymentSpec, Rollout
from slipway.inference.revision import IN_REVISION, OUTSIDE_REVISION, revision

SORTED = IN_REVISION | OUTSIDE_REVISION
WHERE = "operator/slipway/inference/revision.py"


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field holds (itself, optional, or in a list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models(arg)]


def _unsorted(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Paths of fields sorted nowhere. A sorted path covers the fields under it; a field is walked
    into only when some of its fields are sorted one by one."""
    for name, info in model.model_fields.items():
        path = prefix + (info.alias or name)
        if path in SORTED:
            continue
        if any(p.startswith(f"{path}.") for p in SORTED):
            for inner in _models(info.annotation):
                yield from _unsorted(inner, f"{path}.")
        else:
            yield path


def _exists(model: type[BaseModel], path: str) -> bool:
    head, _, rest = path.partition(".")
    for name, info in model.model_fields.items():
        if (info.alias or name) == head:
            return not rest or any(_exists(inner, rest) for inner in _models(info.annotation))
    return False


def test_every_spec_field_is_sorted_into_the_revision_or_out_of_it():
    missing = [
        f"spec.{path}: sort it into IN_REVISION (a change starts a canary) or OUTSIDE_REVISION in {WHERE}"
        for path in _unsorted(InferenceDeploymentSpec)
    ]
    assert not missing, "\n".join(missing)


def test_each_field_is_sorted_once_and_names_a_field():
    assert not IN_REVISION & OUTSIDE_REVISION
    assert [p for p in SORTED if any(p.startswith(f"{q}.") for q in SORTED)] == []  # no path under another
    assert [p for p in SORTED if not _exists(InferenceDeploymentSpec, p)] == []


def test_a_new_field_sorted_nowhere_is_named():
    class GrownRollout(Rollout):
        canary_header: str | None = None

    class Grown(InferenceDeploymentSpec):
        rollout: GrownRollout = GrownRollout()
        warm_up_seconds: int = 0

    assert set(_unsorted(Grown)) == {"rollout.canaryHeader", "warmUpSeconds"}


BASE: dict[str, Any] = {
    "model": {"name": "digits", "alias": "candidate"},
    "image": "server:1",
    "rollout": {"analysis": {"metrics": [{"name": "errorRate", "max": 0.05}]}},
}
# One change of each sorted field, as a value at its path.
CHANGES: dict[str, Any] = {
    "model": {"name": "other", "alias": "candidate"},
    "image": "server:2",
    "command": ["serve"],
    "args": ["--workers=2"],
    "port": 9000,
    "resources": {"gpus": 1},
    "env": [{"name": "A", "value": "1"}],
    "probes": {"startup": {"failureThreshold": 10}},
    "modelLoad": {},
    "podTemplate": {"labels": {"a": "b"}},
    "rollout.analysis.preset": "vllm",
    "replicas": 3,
    "autoscaling": {"maxReplicas": 4},
    "traffic": {"mode": "GatewayAPI", "parentRefs": [{"name": "public"}]},
    "drain": {"delaySeconds": 9},
    "rollout.steps": [{"weight": 10}],
    "rollout.stepWeight": 10,
    "rollout.maxWeight": 60,
    "rollout.interval": "1m",
    "rollout.progressDeadlineSeconds": 900,
    "rollout.paused": True,
    "rollout.onFailure": "Pause",
    "rollout.maxSurgeReplicas": 2,
    "rollout.maxUnavailableReplicas": 1,
    "rollout.scaleDownDelaySeconds": 0,
    "rollout.bake": {"duration": "5m"},
    "rollout.promoteAlias": "prod",
    "rollout.analysis.prometheus": {"address": "http://prometheus.monitoring:9090"},
    "rollout.analysis.interval": "1m",
    "rollout.analysis.failureLimit": 5,
    "rollout.analysis.warmup": "45s",
    "rollout.analysis.noData": "fail",
    "rollout.analysis.gateway": "istio",
    "rollout.analysis.metrics": [{"name": "errorRate", "max": 0.1}],
}


def _changed(path: str, value: Any) -> InferenceDeploymentSpec:
    body = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = body
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return InferenceDeploymentSpec.model_validate(body)


def test_every_sorted_field_has_a_change_below():
    assert set(CHANGES) == SORTED


@pytest.mark.parametrize("path", sorted(CHANGES))
def test_a_change_moves_the_revision_exactly_when_the_field_is_in_it(path: str):
    before = revision(InferenceDeploymentSpec.model_validate(BASE), "3", "models:/digits/3", None)
    after = revision(_changed(path, CHANGES[path]), "3", "models:/digits/3", None)
    assert (after != before) == (path in IN_REVISION), path
