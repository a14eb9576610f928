"""ModelArtifact: step Jobs and the phase/conditions of each lifecycle stage."""

from __future__ import annotations

from slipway.artifact import build
from slipway.artifact import state as states
from slipway.artifact.gates import GateOutcome


def conds(state: states.ArtifactState) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in state.conditions}


def test_step_job_defaults_to_slipways_program():
    job = build.step_job(
        "digits",
        "ns",
        "quantize",
        image="img",
        command=None,
        args=None,
        env={"SLIPWAY_QUANTIZATION_METHOD": "int8-dynamic"},
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert job["metadata"]["name"] == "digits-quantize"
    assert container["command"] == ["python", "-m", "slipway.workloads.quantize"]
    assert {"name": "SLIPWAY_QUANTIZATION_METHOD", "value": "int8-dynamic"} in container["env"]
    assert job["metadata"]["labels"]["slipway.dev/step"] == "quantize"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_user_evaluator_replaces_command():
    job = build.step_job("d", "ns", "validate", image="me/eval:1", command=["eval"], args=["--fast"], env={})
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["command"], container["args"]) == ("me/eval:1", ["eval"], ["--fast"])


def test_stages_mark_what_is_done():
    assert conds(states.waiting_for_source("w"))["Registered"] == ("False", "WaitingForSource")
    q = conds(states.quantizing("q"))
    assert q["Registered"] == ("True", "Done")
    assert q["Quantized"] == ("False", "Quantizing")
    assert q["Reconciling"] == ("True", "Quantizing")
    v = conds(states.validating("v"))
    assert v["Quantized"] == ("True", "Done")
    assert v["Validated"] == ("False", "Validating")


def test_failed_step_is_stalled():
    state = states.step_failed("quantize", "the quantize Job failed")
    assert state.phase == "Failed"
    assert conds(state)["Stalled"] == ("True", "QuantizationFailed")


def test_decision_passed_is_ready_and_names_aliases():
    ok = GateOutcome("accuracy", 0.95, ">= 0.9", None, True, "meets")
    state = states.decided([ok], ["candidate"], "4")
    assert state.phase == "Validated"
    assert conds(state)["Ready"] == ("True", "Validated")
    ready = next(c for c in state.conditions if c.type == "Ready")
    assert "aliases candidate point at version 4" in ready.message


def test_decision_rejected_names_gate_value_and_threshold():
    bad = GateOutcome("accuracy", 0.12, ">= 0.9", None, False, "accuracy 0.12 is below the minimum 0.9")
    state = states.decided([bad], [], "4")
    assert state.phase == "Rejected"
    stalled = next(c for c in state.conditions if c.type == "Stalled")
    assert stalled.reason == "GateFailed"
    assert "gate accuracy failed: accuracy 0.12 is below the minimum 0.9 (threshold >= 0.9)" in stalled.message
    assert stalled.message.endswith("no alias moved")


def test_a_step_that_cannot_reach_mlflow_or_is_evicted_does_not_count_against_its_backoff():
    job = build.step_job("d", "ns", "quantize", image="i", command=None, args=None, env={})
    rules = job["spec"]["podFailurePolicy"]["rules"]
    by_action = [(r["action"], (r.get("onExitCodes") or {}).get("values"), r.get("onPodConditions")) for r in rules]
    assert by_action == [
        ("Ignore", None, [{"type": "DisruptionTarget"}]),
        ("Ignore", [75], None),  # MLflow unavailable, after the workload's own retries
        ("FailJob", [2], None),  # bad configuration: no retry can fix it
    ]
    assert all(r["onExitCodes"]["containerName"] == "quantize" for r in rules if "onExitCodes" in r)
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it
