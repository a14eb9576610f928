"""Which MLflow models a namespace may use (pure)."""

from __future__ import annotations

import pytest

from slipway.tenancy import ALLOWED_MODELS, allowed_patterns, refusal


def namespace(value: str | None) -> dict:
    return {"metadata": {"name": "team-a", "annotations": {} if value is None else {ALLOWED_MODELS: value}}}


@pytest.mark.parametrize(
    ("annotation", "required", "model", "allowed"),
    [
        (None, False, "anything", True),  # single-tenant default: no annotation, no rule
        (None, True, "anything", False),  # multi-tenant mode: nothing without an allow-list
        ("team-a-*, shared", False, "team-a-fraud", True),
        ("team-a-*, shared", False, "shared", True),
        ("team-a-*, shared", False, "team-b-model", False),
        ("team-a-*", True, "team-a-x", True),
        ("", False, "team-a-x", False),  # an empty list allows nothing
        ("Team-A-*", False, "team-a-x", False),  # case matters, as in MLflow
    ],
)
def test_allow_list(annotation, required, model, allowed):
    assert (refusal("team-a", namespace(annotation), [model], required) is None) is allowed


def test_the_refusal_names_the_model_the_rule_and_who_can_change_it():
    message = refusal("team-a", namespace("team-a-*"), ["team-b-model"], False)
    assert message is not None
    assert "'team-b-model'" in message and "team-a allows team-a-*" in message and "cluster admin" in message
    required = refusal("team-a", namespace(None), ["m"], True)
    assert required is not None and "--require-model-allowlist" in required


def test_patterns_are_trimmed():
    assert allowed_patterns(namespace(" a-* , b ,")) == ["a-*", "b"]
    assert allowed_patterns(None) is None
