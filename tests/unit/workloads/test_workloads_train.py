"""The training workload's pure parts: the failure switch, the classifier's state, labels and step, flags."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slipway.workloads import classifier, train
from slipway.workloads.common import ConfigError, digits_split


def test_failure_switch_trips_once_at_its_step(tmp_path: Path) -> None:
    switch = train.FailureSwitch(at_step=3, exit_code=42, marker_dir=tmp_path)
    assert [switch.trips(step) for step in (1, 2, 3)] == [False, False, True]
    # The restarted attempt passes the same step: the marker remembers the first failure.
    assert train.FailureSwitch(at_step=3, exit_code=42, marker_dir=tmp_path).trips(3) is False


def test_failure_switch_off_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SLIPWAY_FAIL_AT_STEP", raising=False)
    switch = train.FailureSwitch.from_env(tmp_path)
    assert switch.at_step is None and not any(switch.trips(s) for s in range(1, 10))


def test_failure_switch_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLIPWAY_FAIL_AT_STEP", "4")
    monkeypatch.setenv("SLIPWAY_FAIL_EXIT_CODE", "3")
    assert train.FailureSwitch.from_env(tmp_path) == train.FailureSwitch(4, 3, tmp_path)


def test_training_state_round_trips_through_a_plain_checkpoint() -> None:
    state = classifier.TrainingState(scaler="s", classifier="c", step=7)
    payload = state.to_checkpoint()
    assert payload == {"scaler": "s", "classifier": "c", "step": 7}
    assert classifier.TrainingState.from_checkpoint(payload) == state
    with pytest.raises(ValueError):
        classifier.TrainingState.from_checkpoint({"weights": []})


def test_bad_model_trains_on_shuffled_labels() -> None:
    data = digits_split()
    assert classifier.training_labels(data, bad_model=False, seed=0) is data.train_y
    shuffled = classifier.training_labels(data, bad_model=True, seed=0)
    assert sorted(shuffled.tolist()) == sorted(data.train_y.tolist())
    assert (shuffled == data.train_y).mean() < 0.2


def test_a_step_continues_the_count_and_reports_metrics() -> None:
    data = digits_split()
    args = train.parse_args(["--hidden-units", "8"])
    state = classifier.new_state(args, data)
    features = state.scaler.transform(data.train_x)
    metrics = classifier.train_step(state, features, data.train_y)
    assert state.step == 1 and metrics["step"] == 1.0
    assert set(metrics) == {"loss", "accuracy", "step"}
    assert 0 <= metrics["accuracy"] <= 1 and np.isfinite(metrics["loss"])


def test_flags_fall_back_to_env_and_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLIPWAY_STEPS", "12")
    monkeypatch.setenv("SLIPWAY_CHECKPOINT_EVERY", "4")
    args = train.parse_args([])
    assert (args.steps, args.checkpoint_every) == (12, 4)
    assert train.parse_args(["--steps", "3"]).steps == 3
    with pytest.raises(ConfigError, match="--keep-checkpoints must be at least 1"):
        train.parse_args(["--keep-checkpoints", "0"])
