"""The models accept what users write and refuse the catalog of invalid specs, naming the field."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from catalog import load_invalid, load_valid
from slipway import crdgen
from slipway.artifact.model import ModelArtifactSpec
from slipway.inference.model import InferenceDeploymentSpec
from slipway.models.base import describe_errors, parse_duration, parse_quantity
from slipway.training.model import TrainingRunSpec

SPECS = {
    "TrainingRun": TrainingRunSpec,
    "ModelArtifact": ModelArtifactSpec,
    "InferenceDeployment": InferenceDeploymentSpec,
}
CRDS = {k.kind: crdgen.crd(k) for k in crdgen.KINDS}
INVALID = load_invalid()


def _schema(kind: str) -> dict[str, Any]:
    return CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _cel_messages(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        found |= {v["message"] for v in node.get("x-kubernetes-validations", [])}
        for value in node.values():
            found |= _cel_messages(value)
    elif isinstance(node, list):
        for value in node:
            found |= _cel_messages(value)
    return found


@pytest.mark.parametrize(("path", "obj"), load_valid(), ids=lambda v: getattr(v, "stem", ""))
def test_valid_examples_pass_models_and_schema(path, obj):
    SPECS[obj["kind"]].model_validate(obj["spec"])
    jsonschema.Draft4Validator(_schema(obj["kind"])).validate(obj)


def test_defaults_a_user_expects():
    tr = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    assert tr.nodes == 1
    assert tr.resources.gpu_resource_name == "nvidia.com/gpu"
    assert tr.failure_policy.max_restarts == 3
    assert tr.suspend is False
    ma = ModelArtifactSpec.model_validate({"model": {"name": "m"}, "source": {"uri": "runs:/abc/model"}})
    assert ma.aliases == ["candidate"]
    assert ma.quantization.method == "none"
    idep = InferenceDeploymentSpec.model_validate({"model": {"artifactRef": {"name": "a"}}, "image": "i"})
    assert idep.traffic.mode == "Replicas"
    assert idep.rollout.max_surge_replicas == 1
    assert idep.port == 8080


def test_catalog_is_large_and_covers_every_kind():
    kinds = {case.obj["kind"] for case in INVALID}
    assert len(INVALID) >= 25
    assert kinds == set(SPECS)


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_spec_refused_by_model_naming_the_field(case):
    with pytest.raises(ValidationError) as err:
        SPECS[case.obj["kind"]].model_validate(case.obj["spec"])
    lines = describe_errors(err.value.errors())
    assert any(line.startswith(case.field) for line in lines), lines
    if case.message:
        assert any(case.message in line for line in lines), lines


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_spec_refused_by_crd_schema(case):
    """Structural violations fail the generated schema; cross-field ones are CEL rules in it."""
    schema = _schema(case.obj["kind"])
    try:
        jsonschema.Draft4Validator(schema).validate(case.obj)
    except jsonschema.ValidationError:
        return
    cel = _cel_messages(schema)
    assert case.message and any(case.message in m for m in cel), (
        f"{case.id}: passes the schema and no CEL rule says {case.message!r}"
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("1.5s", 1.5)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text).total_seconds() == pytest.approx(seconds)


def test_parse_duration_refuses_nonsense():
    with pytest.raises(ValueError, match="soon"):
        parse_duration("soon")


@pytest.mark.parametrize(("text", "value"), [("500m", 0.5), ("16Gi", 16 * 2**30), ("2", 2), ("1k", 1000)])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == pytest.approx(value)


def test_quantity_accepts_numbers():
    tr = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", "resources": {"cpu": 4}})
    assert tr.resources.cpu == "4"
