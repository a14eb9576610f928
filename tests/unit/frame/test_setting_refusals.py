"""A refusal that an operator setting caused (its default, or the value a cluster admin gave it)
names that setting, its flag or its variable, so that the fix is looked for where it is: never only
in the spec, which did not ask for it (pure)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slipway import settings
from slipway.artifact.state import too_many_files
from slipway.config import OperatorConfig
from slipway.inference import build
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.providers.prometheus import NO_PROMETHEUS
from slipway.inference.rollout.tracks import track_of
from slipway.mlflow.proof import unproven_named
from slipway.prometheus import address_refusal
from slipway.reconcile import MLFLOW_NOT_CONFIGURED
from slipway.status.conditions import Cond
from slipway.status.pods import missing_default_class
from slipway.tenancy import ALLOWED_MODELS, NotAllowed, Policy, refusal
from slipway.training.decide import asked_priority_class
from slipway.training.model import TrainingRunSpec
from slipway.training.state import training_state


def missing_class(name: str) -> str:
    """The API server's words for pods whose PriorityClass does not exist (its Priority admission)."""
    return f'pods "x-0" is forbidden: no PriorityClass with name {name} was found'


def stalled(conditions: list[Cond]) -> str:
    return next(c.message for c in conditions if c.type == "Stalled" and c.status == "True")


def stalled_training(default_class: str, refused: str) -> str:
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    job = {"spec": {"suspend": False}, "status": {"startTime": "2026-01-01T00:00:00Z"}}
    return stalled(
        training_state(spec, job, [], create_failure=refused, default_priority_class=default_class).conditions
    )


def refused_serving(default_class: str, refused: str) -> str:
    served = InferenceDeploymentSpec.model_validate({"model": {"name": "m", "alias": "a"}, "image": "img:1"})
    deployment = build.deployment("d", "ns", served, "stable", "1", "models:/m/1", None, 2)
    deployment["metadata"]["generation"] = 1
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": refused}
    deployment["status"] = {"observedGeneration": 1, "replicas": 0, "conditions": [failure]}
    track = track_of(deployment, None, default_class)
    assert track is not None and track.problem is not None
    return track.problem[1]


def namespace(annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": "team-a", "annotations": annotations or {}}}


def refused_gateway() -> str:
    with pytest.raises(NotAllowed) as raised:
        Policy.of("team-a", namespace(), False).check_gateways([("infra", "public")], "spec.traffic.parentRefs")
    return str(raised.value)


def refused_hostname() -> str:
    with pytest.raises(NotAllowed) as raised:
        Policy.of("team-a", namespace(), True).check_hostnames(["a.example.com"], "spec.traffic.hostnames")
    return str(raised.value)


CONFIG = OperatorConfig(prometheus_url="http://prometheus.monitoring:9090")

# setting -> a refusal that setting caused, as the operator words it
REFUSALS: list[tuple[str, Callable[[], str | None]]] = [
    ("max_digest_files", lambda: stalled(too_many_files("spec.source.uri", "files", 10_000).conditions)),
    ("training_priority_class", lambda: stalled_training("slipway-training", missing_class("slipway-training"))),
    ("inference_priority_class", lambda: refused_serving("slipway-inference", missing_class("slipway-inference"))),
    ("require_model_allowlist", lambda: refusal("team-a", namespace(), ["m"], True)),
    ("require_model_allowlist", refused_hostname),
    ("allowed_gateways", refused_gateway),
    ("allowed_prometheus_urls", lambda: address_refusal("http://thanos.obs:10902", CONFIG)),
    ("adopt_mlflow_names", lambda: unproven_named("model", "m", "ModelArtifact team-a/m")),
    ("mlflow_url", lambda: MLFLOW_NOT_CONFIGURED),
    ("prometheus_url", lambda: NO_PROMETHEUS),
]


def names(message: str, setting: str) -> bool:
    """Whether ``message`` names the setting by its flag or by one of its variables."""
    s = settings.BY_NAME[setting]
    return any(name in message for name in (s.flag, *s.env) if name)


@pytest.mark.parametrize(("setting", "message"), REFUSALS, ids=[s for s, _ in REFUSALS])
def test_a_refusal_a_setting_caused_names_the_setting(setting, message):
    said = message()
    assert said is not None and names(said, setting), said


def test_a_missing_default_priority_class_is_the_operators_setting_not_the_spec():
    said = stalled_training("slipway-training", missing_class("slipway-training"))
    assert "SLIPWAY_TRAINING_PRIORITY_CLASS" in said and "manifests/priorityclasses.yaml" in said
    assert "fix spec.podTemplate" not in said  # the spec never named that class
    serving = refused_serving("slipway-inference", missing_class("slipway-inference"))
    assert serving.startswith(missing_class("slipway-inference")) and "SLIPWAY_INFERENCE_PRIORITY_CLASS" in serving


@pytest.mark.parametrize(
    ("default_class", "refused"),
    [
        ("", missing_class("team-a-batch")),  # the spec named its class: the spec is to fix
        ("slipway-training", missing_class("team-a-batch")),  # another class than the default
        ("slipway-training", 'pods "x-0" is forbidden: exceeded quota: gpu'),  # not about a class
    ],
)
def test_other_refusals_still_point_at_the_spec_or_the_namespace(default_class, refused):
    assert missing_default_class(refused, default_class, "training_priority_class") is None
    said = stalled_training(default_class, refused)
    assert "fix spec.podTemplate (or the namespace's quota or policy)" in said
    assert "SLIPWAY_TRAINING_PRIORITY_CLASS" not in said
    assert not names(refused_serving(default_class, refused), "inference_priority_class")


@pytest.mark.parametrize(
    ("spec", "asked"),
    [
        ({}, None),
        ({"priorityClassName": "team-a-batch"}, "team-a-batch"),
        ({"podTemplate": {"priorityClassName": "team-a-low"}}, "team-a-low"),
    ],
)
def test_the_default_class_applies_only_when_the_spec_names_none(spec, asked):
    parsed = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i", **spec})
    assert asked_priority_class(parsed) == asked


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("max_digest_files", "--max-digest-files (SLIPWAY_MAX_DIGEST_FILES)"),
        ("training_priority_class", "SLIPWAY_TRAINING_PRIORITY_CLASS"),
        ("allowed_gateways", "--allowed-gateways (SLIPWAY_ALLOWED_GATEWAYS)"),
    ],
)
def test_a_setting_is_named_by_its_flag_and_its_variable(name, said):
    assert settings.named(name) == said


def test_the_namespace_annotation_alone_needs_no_setting():
    """A refusal the namespace's own annotation caused names the annotation, not a setting."""
    said = refusal("team-a", namespace({ALLOWED_MODELS: "team-a-*"}), ["team-b-model"], False)
    assert said is not None and "team-a allows team-a-*" in said
    assert not names(said, "require_model_allowlist")
