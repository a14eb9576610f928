"""A ModelArtifact pass's decision: from the spec, the status and what the pass has read, its next
move, a read, a write or the status it settles on (pure, no cluster, no MLflow)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from slipway.artifact import state as states
from slipway.artifact.decide import DIGEST_REQUEUE_SECONDS, EMPTY_SOURCE_RECHECK_SECONDS, decide
from slipway.artifact.decisions import (
    CreateJob,
    Decision,
    EnsureModel,
    MoveAliases,
    ReadAliases,
    ReadCost,
    ReadFiles,
    ReadGateInputs,
    ReadRun,
    ReadSource,
    ReadVersion,
    RecordGates,
    Register,
    Settle,
    StartStep,
)
from slipway.artifact.gates import Baseline
from slipway.artifact.model import ModelArtifactSpec
from slipway.artifact.observed import (
    QUANTIZE,
    QUANTIZED,
    SOURCE,
    VALIDATE,
    CostSeen,
    FilesRead,
    NoFiles,
    Observed,
    StepSeen,
)
from slipway.mlflow import FileTree, Metric, ModelVersion, RegisteredModel, Run
from slipway.prices import Prices
from slipway.status.pods import FAILED_CREATE_RECHECK_SECONDS, NO_PODS_RECHECK_SECONDS

NS, NAME, MODEL = "team", "digits", "digits"
NOW = datetime(2026, 1, 2, tzinfo=UTC)
SOURCE_URI = "runs:/r1/model"
DIGEST = "a" * 64
TREE = FileTree(5, 1234, f"sha256:{DIGEST}")
QUANTIZED_URI = "runs:/q1/model"

QUANTIZING = {"quantization": {"method": "int8-dynamic"}}
VALIDATING = {"validation": {"gates": [{"metric": "accuracy", "min": 0.9}]}}
AGAINST_PRODUCTION = {
    "validation": {
        "gates": [
            {"metric": "accuracy", "min": 0.9},
            {"metric": "accuracy", "maxRelativeDrop": 0.02, "baseline": "production"},
            {"metric": "latencyP95Seconds", "max": 0.5, "baseline": "3"},
        ]
    }
}


def spec(*parts: dict[str, Any], **fields: Any) -> ModelArtifactSpec:
    body: dict[str, Any] = {"model": {"name": MODEL}, "source": {"mlflowRun": {"runId": "r1"}}}
    for part in parts:
        body |= part
    return ModelArtifactSpec.model_validate(body | fields)


def version(number: str, **tags: str) -> ModelVersion:
    return ModelVersion(MODEL, number, SOURCE_URI, "r1", tags=dict(tags))


def gates_recorded(passed: bool, aliases: str | None = None) -> dict[str, str]:
    """The tags an earlier pass left on a version it decided (and, with ``aliases``, moved them)."""
    gate = {"metric": "accuracy", "value": 0.95 if passed else 0.5, "threshold": ">= 0.9", "passed": passed}
    tags = {states.GATES_TAG: json.dumps([gate]), states.DECISION_TAG: "passed" if passed else "rejected"}
    return tags | ({states.ALIASES_TAG: aliases} if aliases is not None else {})


def job(state: str) -> dict[str, Any]:
    status = {
        "running": {"active": 1, "ready": 1},
        "starting": {"active": 1},
        "podless": {},
        "complete": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
        "failed": {
            "failed": 3,
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "3 failed"}
            ],
        },
    }[state]
    meta = {"name": f"{NAME}-step", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return {"metadata": meta, "spec": {}, "status": status}


def step(
    state: str | None,
    refused: str | None = None,
    finished: Run | None = None,
    stuck: tuple[str, str] | None = None,
    **run: Any,
) -> StepSeen:
    """A step whose MLflow run is made and whose Job is in ``state`` (None: no Job yet)."""
    made = Run(
        run.pop("run_id", "q1"), "1", "step", "RUNNING", run.pop("artifact_uri", "mlflow-artifacts:/1/q1/artifacts")
    )
    return StepSeen(made, job(state) if state else None, refused, stuck, finished)


def finished(run_id: str = "q1", tags: dict[str, str] | None = None, **metrics: float) -> Run:
    values = {key: Metric(key, value) for key, value in metrics.items()}
    return Run(
        run_id, "1", "step", "FINISHED", f"mlflow-artifacts:/1/{run_id}/artifacts", metrics=values, tags=tags or {}
    )


def seen(**kw: Any) -> Observed:
    """What a pass has read: by default spec.source resolved to an MLflow run's model, and the
    registered model found."""
    kw.setdefault("source", states.Source(SOURCE_URI, "r1"))
    kw.setdefault("model", RegisteredModel(MODEL))
    return Observed(NS, NAME, "http://mlflow:5000", "slipway/workload:1", kw.pop("tenancy", False), **kw)


def registered(*, versions: dict[str, ModelVersion | None] | None = None, **kw: Any) -> Observed:
    """The source registered as version 4 (found, or made by an earlier move)."""
    return seen(versions={SOURCE: version("4"), **(versions or {})}, **kw)


QUANTIZE_OUTPUT = {states.QUANTIZE_URI_TAG: QUANTIZED_URI}
MADE = registered(
    versions={QUANTIZED: None}, steps={QUANTIZE: step("complete", finished=finished(tags=QUANTIZE_OUTPUT))}
)
VALIDATED_RUN = {VALIDATE: step("complete", finished=finished("v1", accuracy=0.95))}
GATE_INPUTS: dict[str, Any] = {"prices": Prices(), "baselines": {}}
DECIDED = {"recorded": True, "held": {"candidate": None}, "moved": ["candidate"]}
UNPRICED = CostSeen(Prices(), NOW)


def summary(decision: Decision) -> tuple[Any, ...]:
    """The decision in a few words: its move and what it names."""
    match decision:
        case Settle(state=state):
            ready = next(c for c in state.conditions if c.type == "Ready")
            return ("Settle", state.phase, ready.reason, decision.recheck)
        case ReadSource(run_id=run_id):
            return ("ReadSource", run_id)
        case ReadVersion(role=role) | Register(role=role):
            return (type(decision).__name__, role)
        case ReadFiles(role=role, uri=uri):
            return ("ReadFiles", role, uri)
        case StartStep(step=name) | CreateJob(step=name) | ReadRun(step=name):
            return (type(decision).__name__, name)
        case ReadGateInputs(refs=refs):
            return ("ReadGateInputs", *refs)
        case RecordGates(tags=tags):
            return ("RecordGates", tags[states.DECISION_TAG])
        case ReadAliases(aliases=aliases):
            return ("ReadAliases", *aliases)
        case MoveAliases(move=move, kept=kept):
            return ("MoveAliases", tuple(move), tuple(kept))
        case ReadCost(counted=counted):
            return ("ReadCost", *(o.passed for o in counted))
    return (type(decision).__name__,)


def trainingrun(phase: str, run_id: str | None = None) -> dict[str, Any]:
    return {"status": {"phase": phase, **({"mlflow": {"runId": run_id}} if run_id else {})}}


FROM_TRAINING = {"source": {"trainingRunRef": {"name": "train"}}}
FROM_URI = {"source": {"uri": "mlflow-artifacts:/1/r1/artifacts/model"}}

# (what the pass has read, the spec's parts, the next move)
CASES = [
    # -- the source ------------------------------------------------------------------------------
    ("trainingrun-missing", [FROM_TRAINING], seen(source=None), ("Settle", "Registering", "WaitingForSource", None)),
    (
        "trainingrun-running",
        [FROM_TRAINING],
        seen(source=None, training_run=trainingrun("Running")),
        ("Settle", "Registering", "WaitingForSource", None),
    ),
    (
        "trainingrun-succeeded-without-run-yet",
        [FROM_TRAINING],
        seen(source=None, training_run=trainingrun("Succeeded")),
        ("Settle", "Registering", "WaitingForSource", None),
    ),
    (
        "trainingrun-failed",
        [FROM_TRAINING],
        seen(source=None, training_run=trainingrun("Failed")),
        ("Settle", "Failed", "TrainingRunFailed", None),
    ),
    (
        "trainingrun-succeeded",
        [FROM_TRAINING],
        seen(source=None, training_run=trainingrun("Succeeded", "r9")),
        ("ReadSource", "r9"),
    ),
    ("mlflow-run", [], seen(source=None), ("ReadSource", None)),
    ("uri", [FROM_URI], seen(source=None), ("ReadSource", None)),
    (
        "uri-without-files",
        [FROM_URI],
        seen(source=NoFiles("spec.source.uri", "'mlflow-artifacts:/1/r1/artifacts/model'")),
        ("Settle", "Registering", "EmptySource", EMPTY_SOURCE_RECHECK_SECONDS),
    ),
    (
        "logged-model-unknown",
        [FROM_URI],
        seen(source=NoFiles("spec.source.uri", "LoggedModel m-1, which MLflow does not have", "ModelNotFound")),
        ("Settle", "Registering", "ModelNotFound", EMPTY_SOURCE_RECHECK_SECONDS),
    ),
    ("model-first", [], seen(model=None), ("EnsureModel",)),
    # -- registering the source: looked up, its files read, then registered ----------------------
    ("source-version-looked-up", [], seen(), ("ReadVersion", SOURCE)),
    ("files-to-read", [], seen(versions={SOURCE: None}), ("ReadFiles", SOURCE, SOURCE_URI)),
    (
        "files-half-read",
        [],
        seen(versions={SOURCE: None}, files={SOURCE: FilesRead(progress="digesting 3/10 files")}),
        ("Settle", "Registering", "Digesting", DIGEST_REQUEUE_SECONDS),
    ),
    (
        "files-changed-while-read",
        [],
        seen(versions={SOURCE: None}, files={SOURCE: FilesRead(changed="file a is 3 bytes")}),
        ("Settle", "Registering", "Digesting", DIGEST_REQUEUE_SECONDS),
    ),
    (
        "too-many-files",
        [],
        seen(versions={SOURCE: None}, files={SOURCE: FilesRead(too_many=("files", 10000))}),
        ("Settle", "Registering", "TooManyFiles", None),
    ),
    (
        "files-gone",
        [],
        seen(versions={SOURCE: None}, files={SOURCE: FilesRead(tree=FileTree(0, 0, None))}),
        ("Settle", "Registering", "EmptySource", EMPTY_SOURCE_RECHECK_SECONDS),
    ),
    ("files-read", [], seen(versions={SOURCE: None}, files={SOURCE: FilesRead(tree=TREE)}), ("Register", SOURCE)),
    (
        "uri-mlflow-does-not-serve",
        [],
        seen(versions={SOURCE: None}, files={SOURCE: FilesRead(unsupported=True)}),
        ("Register", SOURCE),
    ),
    # -- quantizing ------------------------------------------------------------------------------
    ("source-found-quantized-looked-up", [QUANTIZING], registered(), ("ReadVersion", QUANTIZED)),
    ("quantize-run-first", [QUANTIZING], registered(versions={QUANTIZED: None}), ("StartStep", QUANTIZE)),
    (
        "quantize-job-to-create",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step(None)}),
        ("CreateJob", QUANTIZE),
    ),
    (
        "quantize-job-running",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step("running")}),
        ("Settle", "Quantizing", "Quantizing", None),
    ),
    (
        "quantize-job-without-pods-yet",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step("podless")}),
        ("Settle", "Quantizing", "Quantizing", NO_PODS_RECHECK_SECONDS),
    ),
    (
        "quantize-pod-starting",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step("starting")}),
        ("Settle", "Quantizing", "Quantizing", NO_PODS_RECHECK_SECONDS),
    ),
    (
        "quantize-pod-of-a-root-image",
        [QUANTIZING],
        registered(
            versions={QUANTIZED: None},
            steps={QUANTIZE: step("starting", stuck=("CreateContainerConfigError", "pod q-x: runAsNonRoot ..."))},
        ),
        ("Settle", "Quantizing", "CreateContainerConfigError", FAILED_CREATE_RECHECK_SECONDS),
    ),
    (
        "validate-pod-not-pulled",
        [VALIDATING],
        registered(steps={QUANTIZE: step("complete"), VALIDATE: step("starting", stuck=("ImagePullBackOff", "x"))}),
        ("Settle", "Validating", "ImagePullBackOff", FAILED_CREATE_RECHECK_SECONDS),
    ),
    (
        "quantize-pods-refused",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step("podless", refused="exceeded quota")}),
        ("Settle", "Quantizing", "FailedCreate", FAILED_CREATE_RECHECK_SECONDS),
    ),
    (
        "quantize-job-failed",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step("failed")}),
        ("Settle", "Failed", "QuantizationFailed", None),
    ),
    (
        "quantize-job-complete",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step("complete")}),
        ("ReadRun", QUANTIZE),
    ),
    (
        "quantizer-named-no-output",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps={QUANTIZE: step("complete", finished=finished())}),
        ("Settle", "Failed", "QuantizationFailed", None),
    ),
    (
        "quantizer-output-elsewhere-refused",
        [QUANTIZING],
        registered(
            versions={QUANTIZED: None},
            steps={QUANTIZE: step("complete", finished=finished(tags={states.QUANTIZE_URI_TAG: "s3://b/q"}))},
            tenancy=True,
        ),
        ("Settle", "Failed", "SourceNotAllowed", None),
    ),
    (
        "quantizer-output-elsewhere-single-team",
        [QUANTIZING],
        registered(
            versions={QUANTIZED: None},
            steps={QUANTIZE: step("complete", finished=finished(tags={states.QUANTIZE_URI_TAG: "s3://b/q"}))},
        ),
        ("ReadFiles", QUANTIZED, "s3://b/q"),
    ),
    ("quantizer-output-to-read", [QUANTIZING], MADE, ("ReadFiles", QUANTIZED, QUANTIZED_URI)),
    (
        "quantized-files-half-read",
        [QUANTIZING],
        registered(
            versions={QUANTIZED: None},
            steps=MADE.steps,
            files={QUANTIZED: FilesRead(progress="listing the files")},
        ),
        ("Settle", "Quantizing", "Digesting", DIGEST_REQUEUE_SECONDS),
    ),
    (
        "quantized-too-many-files",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps=MADE.steps, files={QUANTIZED: FilesRead(too_many=("files", 9))}),
        ("Settle", "Quantizing", "TooManyFiles", None),
    ),
    (
        "quantized-output-registered",
        [QUANTIZING],
        registered(versions={QUANTIZED: None}, steps=MADE.steps, files={QUANTIZED: FilesRead(tree=TREE)}),
        ("Register", QUANTIZED),
    ),
    (
        "quantized-version-found-no-step",
        [QUANTIZING, VALIDATING],
        registered(versions={QUANTIZED: version("5")}),
        ("StartStep", VALIDATE),
    ),
    # -- validating and the gates ----------------------------------------------------------------
    ("validate-run-first", [VALIDATING], registered(), ("StartStep", VALIDATE)),
    ("validate-job-to-create", [VALIDATING], registered(steps={VALIDATE: step(None)}), ("CreateJob", VALIDATE)),
    (
        "validate-job-running",
        [VALIDATING],
        registered(steps={VALIDATE: step("running")}),
        ("Settle", "Validating", "Validating", None),
    ),
    (
        "validate-job-failed",
        [VALIDATING],
        registered(steps={VALIDATE: step("failed")}),
        ("Settle", "Failed", "ValidationFailed", None),
    ),
    (
        "gate-inputs-to-read",
        [AGAINST_PRODUCTION],
        registered(steps=VALIDATED_RUN),
        ("ReadGateInputs", "3", "production"),
    ),
    ("gates-pass", [VALIDATING], registered(steps=VALIDATED_RUN, **GATE_INPUTS), ("RecordGates", "passed")),
    (
        "gate-fails",
        [VALIDATING],
        registered(steps={VALIDATE: step("complete", finished=finished("v1", accuracy=0.5))}, **GATE_INPUTS),
        ("RecordGates", "rejected"),
    ),
    (
        "nan-gate-fails",
        [VALIDATING],
        registered(steps={VALIDATE: step("complete", finished=finished("v1", accuracy=float("nan")))}, **GATE_INPUTS),
        ("RecordGates", "rejected"),
    ),
    (
        "metric-not-reported",
        [VALIDATING],
        registered(steps={VALIDATE: step("complete", finished=finished("v1"))}, **GATE_INPUTS),
        ("RecordGates", "rejected"),
    ),
    ("no-validation-passes", [], registered(), ("RecordGates", "passed")),
    # -- the aliases: moved once, after the gates passed -----------------------------------------
    (
        "passed-aliases-to-read",
        [VALIDATING],
        registered(steps=VALIDATED_RUN, recorded=True, **GATE_INPUTS),
        ("ReadAliases", "candidate"),
    ),
    (
        "aliases-move",
        [VALIDATING],
        registered(steps=VALIDATED_RUN, recorded=True, held={"candidate": "2"}, **GATE_INPUTS),
        ("MoveAliases", ("candidate",), ()),
    ),
    (
        "alias-on-a-newer-version-stays",
        [VALIDATING],
        registered(steps=VALIDATED_RUN, recorded=True, held={"candidate": "7"}, **GATE_INPUTS),
        ("MoveAliases", (), ("candidate",)),
    ),
    (
        "aliases-moved-cost-next",
        [VALIDATING],
        registered(steps=VALIDATED_RUN, **DECIDED, **GATE_INPUTS),
        ("ReadCost", True),
    ),
    (
        "rejected-no-alias-read",
        [VALIDATING],
        registered(
            steps={VALIDATE: step("complete", finished=finished("v1", accuracy=0.5))}, recorded=True, **GATE_INPUTS
        ),
        ("ReadCost", False),
    ),
    # -- what an earlier pass recorded on the version (a restart carries on) ---------------------
    (
        "decided-before-aliases-next",
        [VALIDATING],
        registered(versions={SOURCE: version("4", **gates_recorded(True))}),
        ("ReadAliases", "candidate"),
    ),
    (
        "decided-and-moved-before",
        [VALIDATING],
        registered(versions={SOURCE: version("4", **gates_recorded(True, "candidate"))}),
        ("ReadCost", True),
    ),
    (
        "rejected-before",
        [VALIDATING],
        registered(versions={SOURCE: version("4", **gates_recorded(False))}),
        ("ReadCost", False),
    ),
    (
        "rejected-before-settles",
        [VALIDATING],
        registered(versions={SOURCE: version("4", **gates_recorded(False))}, cost=UNPRICED),
        ("Settle", "Rejected", "GateFailed", None),
    ),
    (
        "validated-settles",
        [VALIDATING],
        registered(versions={SOURCE: version("4", **gates_recorded(True, "candidate"))}, cost=UNPRICED),
        ("Settle", "Validated", "Validated", None),
    ),
]


@pytest.mark.parametrize(("name", "parts", "observed", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_next_move(name: str, parts: list[dict[str, Any]], observed: Observed, expected: tuple[Any, ...]) -> None:
    assert summary(decide(spec(*parts), {}, observed)) == expected


# -- what the moves carry ---------------------------------------------------------------------------


def test_a_version_is_registered_with_its_owner_its_files_and_its_work_key() -> None:
    read = seen(versions={SOURCE: None}, files={SOURCE: FilesRead(tree=TREE)})
    decision = decide(spec(), {}, read)
    assert isinstance(decision, Register) and decision.skipped is None
    assert decision.tags == {
        states.OWNER_TAG: "team/digits",
        states.SOURCE_SIZE_TAG: "1234",
        states.SOURCE_FILES_TAG: "5",
        states.SOURCE_DIGEST_TAG: f"sha256:{DIGEST}",
    }
    lookup = decide(spec(), {}, seen())
    assert isinstance(lookup, ReadVersion) and decision.work == lookup.work[0]  # registered under the key looked up


def test_files_past_the_digest_budget_are_registered_undigested_with_a_warning() -> None:
    read = seen(versions={SOURCE: None}, files={SOURCE: FilesRead(tree=FileTree(3, 10**12, None))})
    decision = decide(spec(), {}, read)
    assert isinstance(decision, Register) and states.SOURCE_DIGEST_TAG not in decision.tags
    assert decision.skipped is not None and "not digested" in decision.skipped and "3 files" in decision.skipped


def test_the_quantized_version_names_its_parent_and_method() -> None:
    read = registered(versions={QUANTIZED: None}, steps=MADE.steps, files={QUANTIZED: FilesRead(tree=TREE)})
    decision = decide(spec(QUANTIZING), {}, read)
    assert isinstance(decision, Register) and decision.source == states.Source(QUANTIZED_URI, "q1")
    assert decision.tags["slipway.dev/parent-version"] == "4"
    assert decision.tags["slipway.dev/quantization-method"] == "int8-dynamic"


def test_the_step_job_reports_to_its_own_run_and_runs_the_spec_image() -> None:
    read = registered(versions={QUANTIZED: None}, steps={QUANTIZE: step(None, run_id="run-q")})
    own = {"quantization": {"method": "fp16", "image": "me/quantizer:1", "command": ["q"]}}
    for parts, image in (([QUANTIZING], "slipway/workload:1"), ([own], "me/quantizer:1")):
        decision = decide(spec(*parts), {}, read)
        assert isinstance(decision, CreateJob)
        container = decision.job["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert container["image"] == image
        assert env["MLFLOW_RUN_ID"] == "run-q" and env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert env["SLIPWAY_MODEL_URI"] == "models:/digits/4"


def test_only_a_step_jobs_state_is_noted_for_missing_pod_credentials() -> None:
    failed = decide(spec(VALIDATING), {}, registered(steps={VALIDATE: step("failed")}))
    source_failed = decide(spec(FROM_TRAINING), {}, seen(source=None, training_run=trainingrun("Failed")))
    assert isinstance(failed, Settle) and failed.pods
    assert isinstance(source_failed, Settle) and not source_failed.pods


def test_gates_are_recorded_metrics_first_and_the_decision_last() -> None:
    run = finished("v1", accuracy=0.95, latencyP95Seconds=float("nan"), extra=3.0)
    decision = decide(spec(VALIDATING), {}, registered(steps={VALIDATE: step("complete", finished=run)}, **GATE_INPUTS))
    assert isinstance(decision, RecordGates) and decision.version == "4"
    assert list(decision.tags) == [
        "slipway.dev/metric-accuracy",
        "slipway.dev/metric-extra",  # a NaN is no metric tag (the gates' messages say it)
        states.GATES_TAG,
        states.DECISION_TAG,
    ]


def test_a_nan_never_passes_and_says_so() -> None:
    run = finished("v1", accuracy=float("nan"))
    decision = decide(spec(VALIDATING), {}, registered(steps={VALIDATE: step("complete", finished=run)}, **GATE_INPUTS))
    assert isinstance(decision, RecordGates)
    (gate,) = json.loads(decision.tags[states.GATES_TAG])
    assert gate["passed"] is False and "NaN" in gate["message"] and "value" not in gate


def test_a_relative_gate_compares_with_its_baseline() -> None:
    run = finished("v1", accuracy=0.95, latencyP95Seconds=0.2)
    baselines = {"production": Baseline("production", "2", {"accuracy": 0.99}), "3": Baseline("3", None, {})}
    read = registered(steps={VALIDATE: step("complete", finished=run)}, prices=Prices(), baselines=baselines)
    decision = decide(spec(AGAINST_PRODUCTION), {}, read)
    assert isinstance(decision, RecordGates) and decision.tags[states.DECISION_TAG] == "rejected"
    drop = json.loads(decision.tags[states.GATES_TAG])[1]
    assert drop["passed"] is False and drop["baselineValue"] == 0.99 and "dropped" in drop["message"]


def test_a_gates_tag_edited_in_mlflow_is_refused() -> None:
    edited = version("4", **{states.GATES_TAG: "not json", states.DECISION_TAG: "passed"})
    with pytest.raises(states.MalformedTag):
        decide(spec(VALIDATING), {}, registered(versions={SOURCE: edited}))


def test_aliases_never_move_back_to_an_older_version() -> None:
    read = registered(steps=VALIDATED_RUN, recorded=True, held={"candidate": "9", "staging": "2"}, **GATE_INPUTS)
    decision = decide(spec(VALIDATING, aliases=["candidate", "staging"]), {}, read)
    assert decision == MoveAliases("4", ["staging"], {"candidate": "9"}, {states.ALIASES_TAG: "staging"})
    kept_all = decide(spec(VALIDATING), {}, replace(read, held={"candidate": "9"}))
    assert isinstance(kept_all, MoveAliases) and kept_all.tags == {states.ALIASES_TAG: "-"}


def test_settled_status_fields() -> None:
    quantized = version("5", **{"slipway.dev/digest": DIGEST, states.SOURCE_DIGEST_TAG: f"sha256:{'e' * 64}"})
    read = registered(
        versions={SOURCE: version("4", **{states.SOURCE_SIZE_TAG: "999"}), QUANTIZED: quantized},
        source=states.Source(SOURCE_URI, "r1", digest="b" * 64),
        steps={VALIDATE: step("complete", finished=finished("v1", accuracy=0.95, sizeBytes=4096.0))},
        **GATE_INPUTS,
        **DECIDED,
        cost=UNPRICED,
    )
    decision = decide(spec(QUANTIZING, VALIDATING), {}, read)
    assert isinstance(decision, Settle) and decision.state.phase == "Validated" and decision.tags == {}
    assert decision.fields == {
        "model_version": "4",
        "uri": "models:/digits/5",
        "quantized_version": "5",
        "digest": f"sha256:{DIGEST}",  # the quantizer's, over the producer's
        "size_bytes": 999,  # the source's size, kept over the evaluator's sizeBytes
        "files_digest": f"sha256:{'e' * 64}",
        "gates": [
            {
                "metric": "accuracy",
                "threshold": ">= 0.9",
                "passed": True,
                "message": "accuracy 0.95 meets >= 0.9",
                "value": 0.95,
            }
        ],
        "cost": None,
    }
    ready = next(c for c in decision.state.conditions if c.type == "Ready")
    assert ready.message == "1 gates passed; aliases candidate point at version 5"


def test_status_links_the_candidate_version_and_the_run_it_came_from_in_the_mlflow_ui() -> None:
    ui = "https://ml.example.com"
    read = replace(registered(steps={VALIDATE: step("running")}), ui=ui)
    source = decide(spec(VALIDATING), {}, read)
    assert isinstance(source, Settle) and source.fields["mlflow"] == {
        "versionUrl": f"{ui}/#/models/digits/versions/4",
        "runUrl": f"{ui}/#/runs/r1",  # a run the pass did not read: the UI looks its experiment up
    }
    quantized = ModelVersion(MODEL, "5", QUANTIZED_URI, "q1", tags={})
    steps = {QUANTIZE: step("complete", run_id="q1"), VALIDATE: step("running", run_id="v1")}
    read = replace(registered(versions={QUANTIZED: quantized}, steps=steps), ui=ui)
    candidate = decide(spec(QUANTIZING, VALIDATING), {}, read)
    assert isinstance(candidate, Settle) and candidate.fields["mlflow"] == {
        "versionUrl": f"{ui}/#/models/digits/versions/5",
        "runUrl": f"{ui}/#/runs/q1",  # the quantize run: the same link whether this pass read the step or not
    }
    training_run = {"status": {"phase": "Succeeded", "mlflow": {"runId": "r1", "experimentId": "7"}}}
    trained = replace(registered(steps={VALIDATE: step("running")}), ui=ui, training_run=training_run)
    from_training = decide(spec(FROM_TRAINING, VALIDATING), {}, trained)
    assert isinstance(from_training, Settle)
    assert from_training.fields["mlflow"]["runUrl"] == f"{ui}/#/experiments/7/runs/r1"  # the TrainingRun's status
    assert "mlflow" not in decide(spec(VALIDATING), {}, registered(steps={VALIDATE: step("running")})).fields


def test_a_hold_carries_the_fields_known_so_far() -> None:
    read = registered(versions={SOURCE: version("4", **{states.SOURCE_DIGEST_TAG: f"sha256:{DIGEST}"})})
    decision = decide(spec(VALIDATING), {}, replace(read, steps={VALIDATE: step("running")}))
    assert isinstance(decision, Settle) and decision.state.phase == "Validating"
    assert decision.fields == {
        "model_version": "4",
        "uri": "models:/digits/4",
        "digest": f"sha256:{DIGEST}",
        "files_digest": f"sha256:{DIGEST}",
    }


def test_the_lineage_cost_is_tagged_where_mlflow_lacks_it() -> None:
    prices = Prices(currency="EUR", cpu_hour=0.04, memory_gib_hour=0.005)
    cost = CostSeen(prices, NOW, trainingrun("Succeeded") | {"status": {"cost": {"total": 1.5}}}, {VALIDATE: None})
    status = {"cost": {"validation": 0.25}}  # its Job is gone: what status recorded counts
    tagged = {"slipway.dev/cost-training": "1.5"}
    read = registered(versions={SOURCE: version("4", **gates_recorded(True, "candidate"), **tagged)}, cost=cost)
    decision = decide(spec(FROM_TRAINING, VALIDATING), status, read)
    assert isinstance(decision, Settle) and decision.version == "4"
    assert decision.fields["cost"] == {"currency": "EUR", "training": 1.5, "validation": 0.25, "total": 1.75}
    assert decision.tags == {
        "slipway.dev/cost-validation": "0.25",
        "slipway.dev/cost-lineage": "1.75",
        "slipway.dev/cost-currency": "EUR",
    }


# -- a whole lifecycle, each move carried out at once ---------------------------------------------


def walk(artifact: ModelArtifactSpec, read: Observed, accuracy: float) -> list[tuple[Any, ...]]:
    """The moves a pass makes when every read finds what it asks for and every Job completes."""
    moves = []
    for _ in range(40):
        decision = decide(artifact, {}, read)
        moves.append(summary(decision))
        match decision:
            case Settle():
                return moves
            case ReadSource():
                read.source = states.Source(SOURCE_URI, "r1")
            case EnsureModel():
                read.model = RegisteredModel(MODEL)
            case ReadVersion(role=role):
                read.versions[role] = None
            case ReadFiles(role=role):
                read.files[role] = FilesRead(tree=TREE)
            case Register(role=role):
                read.versions[role] = version(str(len(read.versions) + 3), **decision.tags)
            case StartStep(step=name):
                read.steps[name] = step(None)
            case CreateJob(step=name):
                read.steps[name] = replace(read.steps[name], job=job("complete"))
            case ReadRun(step=name):
                tags = QUANTIZE_OUTPUT if name == QUANTIZE else {}
                read.steps[name] = replace(read.steps[name], finished=finished(tags=tags, accuracy=accuracy))
            case ReadGateInputs():
                read.prices, read.baselines = Prices(), {}
            case RecordGates():
                read.recorded = True
            case ReadAliases(aliases=aliases):
                read.held = dict.fromkeys(aliases)
            case MoveAliases(move=move):
                read.moved = move
            case ReadCost():
                read.cost = UNPRICED
    raise AssertionError(f"no settled state after {moves}")


def test_a_whole_lifecycle_registers_quantizes_validates_then_moves_the_aliases() -> None:
    moves = walk(
        spec(FROM_TRAINING, QUANTIZING, VALIDATING),
        seen(source=None, model=None, training_run=trainingrun("Succeeded", "r1")),
        0.95,
    )
    assert moves == [
        ("ReadSource", "r1"),
        ("EnsureModel",),
        ("ReadVersion", SOURCE),
        ("ReadFiles", SOURCE, SOURCE_URI),
        ("Register", SOURCE),
        ("ReadVersion", QUANTIZED),
        ("StartStep", QUANTIZE),
        ("CreateJob", QUANTIZE),
        ("ReadRun", QUANTIZE),
        ("ReadFiles", QUANTIZED, QUANTIZED_URI),
        ("Register", QUANTIZED),
        ("StartStep", VALIDATE),
        ("CreateJob", VALIDATE),
        ("ReadRun", VALIDATE),
        ("ReadGateInputs",),
        ("RecordGates", "passed"),
        ("ReadAliases", "candidate"),
        ("MoveAliases", ("candidate",), ()),
        ("ReadCost", True),
        ("Settle", "Validated", "Validated", None),
    ]


def test_a_rejected_candidate_moves_no_alias() -> None:
    moves = walk(spec(VALIDATING), seen(source=None, model=None), 0.5)
    assert [m[0] for m in moves if m[0] in ("ReadAliases", "MoveAliases")] == []
    assert moves[-3:] == [("RecordGates", "rejected"), ("ReadCost", False), ("Settle", "Rejected", "GateFailed", None)]
