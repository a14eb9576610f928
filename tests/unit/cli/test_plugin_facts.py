"""The facts kubectl slipway writes out so that it runs without pydantic (the single-file plugin) are the
operator's own: phases, the steering annotations, canary step weights, durations."""

from __future__ import annotations

import argparse
from typing import Any, get_args

import pytest

from slipway.artifact.model import ArtifactPhase
from slipway.cli import args, refs, render, view
from slipway.inference import model as inference_model
from slipway.inference.model import DeploymentPhase, Rollout
from slipway.inference.rollout import base
from slipway.inference.rollout.canary import step_weights
from slipway.models import base as models_base
from slipway.models.base import parse_duration
from slipway.training.model import TrainingPhase


def test_each_kinds_phases_are_its_status_models():
    assert refs.TRAINING_RUN.phases == get_args(TrainingPhase)
    assert refs.MODEL_ARTIFACT.phases == get_args(ArtifactPhase)
    assert refs.INFERENCE_DEPLOYMENT.phases == get_args(DeploymentPhase)


def test_the_steering_annotations_are_the_operators():
    assert view.ACTIONS == {
        "promote": base.PROMOTE_ANNOTATION,
        "abort": base.ABORT_ANNOTATION,
        "retry": base.RETRY_ANNOTATION,
    }


def test_the_default_canary_weights_are_the_models():
    assert render.DEFAULT_STEP_WEIGHTS == inference_model.DEFAULT_STEP_WEIGHTS
    assert render.DEFAULT_MAX_WEIGHT == inference_model.DEFAULT_MAX_WEIGHT


@pytest.mark.parametrize(
    "rollout",
    [
        {},
        {"steps": [{"weight": 25, "pause": "5s"}, {"weight": 50}]},
        {"steps": [{"weight": 10}]},
        {"stepWeight": 10},
        {"stepWeight": 10, "maxWeight": 40},
        {"stepWeight": 30, "maxWeight": 80},
        {"stepWeight": 50},  # one step: the default max
        {"stepWeight": 25, "maxWeight": 100},
    ],
)
def test_step_weights_read_from_the_dict_as_the_operator_reads_the_model(rollout: dict[str, Any]):
    assert render.step_weights(rollout) == step_weights(Rollout.model_validate(rollout))
    assert render.steps_of({"rollout": rollout}) == len(step_weights(Rollout.model_validate(rollout)))


def test_an_unreadable_rollout_has_no_step_count():
    assert render.steps_of({"rollout": {"steps": [{"pause": "5s"}]}}) is None
    assert render.steps_of({"rollout": {"stepWeight": "ten"}}) is None


@pytest.mark.parametrize("text", ["5m", "30s", "1h30m", "250ms", "1.5h", "2m30s", "0s"])
def test_durations_are_read_as_the_crds_read_them(text: str):
    assert args.DURATION_PATTERN == models_base.DURATION_PATTERN
    assert args.duration(text) == pytest.approx(parse_duration(text).total_seconds())


@pytest.mark.parametrize("text", ["soon", "5 m", "m5", "1d", "", "-5s"])
def test_a_bad_duration_is_refused_by_both(text: str):
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        args.duration(text)
    with pytest.raises(ValueError):
        parse_duration(text)
