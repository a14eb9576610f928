"""A Job whose pods the API server refuses (FailedCreate) makes its owner Stalled with its words."""

from __future__ import annotations

from slipway.status.jobs import should_have_pods, without_pods
from slipway.status.pods import FAILED_CREATE_RECHECK_SECONDS, NO_PODS_RECHECK_SECONDS
from slipway.training.model import TrainingRunSpec
from slipway.training.state import training_state

SPEC = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "img"})
JOB = {"metadata": {"name": "r-train"}, "spec": {}, "status": {}}
REFUSED = 'pods "r-train-x" is forbidden: violates PodSecurity "restricted:latest": privileged'


def stalled(state):
    return next(c for c in state.conditions if c.type == "Stalled")


def test_refused_pods_are_stalled_with_the_api_servers_reason_and_looked_at_again():
    state = training_state(SPEC, JOB, [], create_failure=REFUSED)
    cond = stalled(state)
    assert (state.phase, cond.status, cond.reason) == ("Pending", "True", "FailedCreate")
    assert REFUSED in cond.message and "spec.podTemplate" in cond.message
    assert state.recheck_seconds == FAILED_CREATE_RECHECK_SECONDS


def test_a_job_without_pods_and_without_refusal_is_starting_and_looked_at_soon():
    state = training_state(SPEC, JOB, [])
    assert (stalled(state).status, state.recheck_seconds) == ("False", NO_PODS_RECHECK_SECONDS)
    assert next(c for c in state.conditions if c.type == "Reconciling").reason == "Starting"


def test_only_a_job_that_should_have_pods_is_asked_about_them():
    assert should_have_pods(JOB) and without_pods(JOB)
    assert not should_have_pods({**JOB, "spec": {"suspend": True}})
    done = {**JOB, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert not should_have_pods(done) and not without_pods(done)
    assert not without_pods({**JOB, "status": {"active": 1}})
    assert not without_pods({**JOB, "status": {"failed": 1}})  # its pods ran: their own reasons tell


def test_a_step_job_whose_pods_are_refused_stalls_its_modelartifact():
    from slipway.artifact.state import job_state

    state = job_state("validate", {"metadata": {"name": "a-validate"}}, "validating", create_failure=REFUSED)
    assert state is not None and state.phase == "Validating"
    cond = next(c for c in state.conditions if c.type == "Stalled")
    assert (cond.status, cond.reason) == ("True", "FailedCreate")
    assert "validate Job a-validate" in cond.message and REFUSED in cond.message
