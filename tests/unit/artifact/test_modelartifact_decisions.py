"""The decisions of a ModelArtifact's lifecycle between its I/O steps, without a cluster (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from slipway.artifact import state as states
from slipway.artifact.gates import GateOutcome


def job(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "digits-validate"},
        "status": {"conditions": [{"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions]},
    }


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (None, ("Registering", "WaitingForSource", "does not exist (yet)")),
        ({"status": {"phase": "Running"}}, ("Registering", "WaitingForSource", "waiting for TrainingRun r")),
        ({"status": {"phase": "Succeeded"}}, ("Registering", "WaitingForSource", "to succeed")),  # no run id yet
        ({"status": {"phase": "Failed"}}, ("Failed", "TrainingRunFailed", "nothing to register")),
    ],
)
def test_trainingrun_source_waits_or_fails_with_a_reason(run: dict[str, Any] | None, expected: tuple[str, ...]) -> None:
    state = states.trainingrun_source(run, "team-a", "r")
    assert isinstance(state, states.ArtifactState)
    ready = next(c for c in state.conditions if c.type == "Ready")
    assert (state.phase, ready.reason) == expected[:2] and expected[2] in ready.message


def test_trainingrun_source_is_its_mlflow_run_once_it_succeeded() -> None:
    run = {"status": {"phase": "Succeeded", "mlflow": {"runId": "abc"}}}
    assert states.trainingrun_source(run, "team-a", "r") == "abc"


def test_job_state_running_failed_and_done() -> None:
    running = states.job_state("validate", job(), "validating version 3")
    assert running is not None and running.phase == "Validating"
    failed = states.job_state("quantize", job(("Failed", "BackoffLimitExceeded", "3 pods failed")), "q")
    assert failed is not None and failed.phase == "Failed"
    message = next(c for c in failed.conditions if c.type == "Stalled").message
    assert "BackoffLimitExceeded: 3 pods failed" in message and "logs" in message
    assert states.job_state("validate", job(("Complete", "", "")), "v") is None


@pytest.mark.parametrize(
    ("uri_tag", "digest_tag"),
    [("slipway.dev/quantize-uri", "slipway.dev/quantize-digest"), ("slipway.quantize.uri", "slipway.quantize.digest")],
    ids=["tags", "tags-as-earlier-versions-named-them"],
)
def test_quantized_output_needs_the_uri_tag_and_carries_digest_and_size(uri_tag: str, digest_tag: str) -> None:
    missing = states.quantized_output("run1", {}, "3", "int8-dynamic")
    assert isinstance(missing, states.ArtifactState) and missing.phase == "Failed"
    message = next(c for c in missing.conditions if c.type == "Stalled").message
    assert "without setting tag slipway.dev/quantize-uri on MLflow run run1" in message
    uri, tags = states.quantized_output(  # type: ignore[misc]
        "run1", {uri_tag: "runs:/run1/q", digest_tag: "ab"}, "3", "int8-dynamic"
    )
    assert uri == "runs:/run1/q"
    assert tags == {
        "slipway.dev/parent-version": "3",
        "slipway.dev/quantization-method": "int8-dynamic",
        "slipway.dev/digest": "ab",
    }


def test_a_quantizer_output_outside_its_run_is_refused_naming_the_tag_the_run_and_what_was_expected() -> None:
    state = states.foreign_output("run1", "models:/team-b-llm@production", "mlflow-artifacts:/4/run1/artifacts")
    assert state.phase == "Failed"
    stalled = next(c for c in state.conditions if c.type == "Stalled")
    assert stalled.status == "True" and stalled.reason == "SourceNotAllowed"
    assert stalled.message.startswith("MLflow tag slipway.dev/quantize-uri of the quantize run run1 is "
                                      "'models:/team-b-llm@production', outside that run's own artifacts")  # fmt: skip
    assert "runs:/run1/<path> or mlflow-artifacts:/4/run1/artifacts/<path>" in stalled.message
    assert "nothing was registered" in stalled.message
    quantized = next(c for c in state.conditions if c.type == "Quantized")
    assert quantized.status == "False" and quantized.reason == "SourceNotAllowed"
    leaky = states.foreign_output("run1", "https://u:s3cr3t@host/m", "")
    assert "s3cr3t" not in str(leaky.conditions) and "set the tag to runs:/run1/<path>;" in str(leaky.conditions)


def test_a_decision_recorded_on_the_version_is_read_back_as_it_was() -> None:
    outcomes = [GateOutcome("accuracy", 0.93, ">= 0.9", None, True, "ok"),
                GateOutcome("latencyP95Seconds", 0.7, "<= 0.5", None, False, "too slow")]  # fmt: skip
    tags = states.decision_tags(outcomes)
    assert tags[states.DECISION_TAG] == "rejected"
    assert states.recorded_outcomes(tags) == outcomes
    assert states.recorded_outcomes({states.GATES_TAG: tags[states.GATES_TAG]}) is None  # no decision yet


@pytest.mark.parametrize(
    ("held", "move", "kept"),
    [
        ({"candidate": None, "production": None}, ["candidate", "production"], []),
        ({"candidate": "2", "production": "7"}, ["candidate"], ["production"]),
        ({"candidate": "5", "production": "5"}, ["candidate", "production"], []),
    ],
    ids=["unset", "newer-kept", "same-version"],
)
def test_aliases_never_move_back_to_an_older_version(
    held: dict[str, str | None], move: list[str], kept: list[str]
) -> None:
    assert states.aliases_to_move(["candidate", "production"], held, "5") == (move, kept)


def test_recorded_aliases_and_metrics() -> None:
    assert states.recorded_aliases({}) is None
    assert states.recorded_aliases({states.ALIASES_TAG: "-"}) == []
    assert states.recorded_aliases({states.ALIASES_TAG: "candidate,production"}) == ["candidate", "production"]
    assert states.metric_values({"slipway.dev/metric-accuracy": "0.93", "other": "x"}) == ({"accuracy": 0.93}, {})


def test_metric_tags_as_earlier_versions_named_them_are_read_and_the_new_name_wins() -> None:
    """A baseline validated by an earlier Slipway carries ``slipway.metric.<name>``: still its values."""
    tags = {"slipway.metric.accuracy": "0.91", "slipway.metric.loss": "0.3", "slipway.dev/metric-loss": "0.2"}
    assert states.metric_values(tags) == ({"accuracy": 0.91, "loss": 0.2}, {})
    _, refused = states.metric_values({"slipway.metric.accuracy": "nan"})
    assert refused == {"accuracy": "its MLflow tag slipway.metric.accuracy is 'nan', NaN (not a number), not finite"}


def test_digest_fields() -> None:
    hexdigest = "ab12" * 16
    assert states.digest_fields(hexdigest, "1024") == {"digest": f"sha256:{hexdigest}", "size_bytes": 1024}
    assert states.digest_fields(f"sha256:{hexdigest}", None) == {"digest": f"sha256:{hexdigest}"}
    assert states.digest_fields(None, 2048.0) == {"size_bytes": 2048}  # a metric
    assert states.digest_fields(None, "n/a") == {}
    # What a workload writes badly is left out of status, never an error and never unbounded.
    assert states.digest_fields("ab12", float("nan")) == {}
    assert states.digest_fields("x" * 5000, "9" * 5000) == {}
    assert states.digest_fields("sha256:" + "AB12" * 16, -1.0) == {}


def test_a_malformed_decision_tag_is_an_error_naming_the_tag() -> None:
    tags = {states.DECISION_TAG: "passed", states.GATES_TAG: "{not json"}
    with pytest.raises(states.MalformedTag) as raised:
        states.recorded_outcomes(tags)
    assert states.GATES_TAG in str(raised.value) and "delete the tag" in str(raised.value)
    with pytest.raises(states.MalformedTag):
        states.recorded_outcomes({**tags, states.GATES_TAG: '[{"metric": "a", "value": "x", "passed": true}]'})


def test_recorded_metrics_are_bounded_and_keep_the_gates() -> None:
    from slipway.artifact.model import Gate

    values = {f"m{i:05d}": float(i) for i in range(100_000)} | {"zeta": 1.0}
    keys = states.recorded_metrics(values, [Gate(metric="zeta", min=0.5), Gate(metric="absent", min=1)])
    assert len(keys) == states.MAX_RECORDED_METRICS and keys[0] == "zeta" and keys[1] == "m00000"


def test_decided_at_generation() -> None:
    body = {"metadata": {"generation": 1}, "status": {"phase": "Rejected", "observedGeneration": 1}}
    assert states.decided_at_generation(body)
    assert not states.decided_at_generation({**body, "status": {"phase": "Validating", "observedGeneration": 1}})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("nan", "'nan', NaN (not a number), not finite"),
        ("NaN", "'NaN', NaN (not a number), not finite"),
        ("inf", "'inf', Infinity, not finite"),
        ("-Infinity", "'-Infinity', -Infinity, not finite"),
        ("1e999", "'1e999', Infinity, not finite"),
        ("1.7976931348623157e+308", "'1.7976931348623157e+308', Infinity, not finite"),
        ("high", "'high', not a number"),
    ],
)
def test_a_metric_tag_that_is_not_a_finite_number_is_refused_not_parsed(text: str, why: str) -> None:
    tags = {"slipway.dev/metric-accuracy": text, "slipway.dev/metric-loss": "0.25"}
    values, refused = states.metric_values(tags)
    assert values == {"loss": 0.25}
    assert refused == {"accuracy": f"its MLflow tag slipway.dev/metric-accuracy is {why}"}


def test_non_finite_metrics_are_not_recorded_as_tags() -> None:
    from slipway.artifact.model import Gate

    values = {"accuracy": float("nan"), "loss": float("inf"), "f1": 0.5}
    assert states.recorded_metrics(values, [Gate(metric="accuracy", min=0.5)]) == ["f1"]


@pytest.mark.parametrize(
    ("digest_tag", "size_tag"),
    [("slipway.dev/model-digest", "slipway.dev/model-size-bytes"), ("slipway.model.digest", "slipway.model.sizeBytes")],
    ids=["tags", "tags-as-earlier-versions-named-them"],
)
def test_a_runs_model_carries_what_its_trainer_recorded(digest_tag: str, size_tag: str) -> None:
    from slipway.artifact.source import SourceReader
    from slipway.mlflow import Run
    from slipway.mlflow.sources import Found
    from slipway.tenancy import Policy

    class Runs:
        def run_model(self, run: Run, path: str) -> Found:
            return Found(f"runs:/{run.run_id}/{path}", run.run_id)

    run = Run("r1", "1", "train", "FINISHED", "", tags={digest_tag: "sha256:" + "a" * 64, size_tag: "1234"})
    source = SourceReader(Runs(), Policy("team-a", None)).run_source(run, "model", "spec.source.mlflowRun")  # type: ignore[arg-type]
    assert source == states.Source("runs:/r1/model", "r1", "sha256:" + "a" * 64, "1234")
