"""kubectl slipway: kinds and arguments, the lifecycle tree and its text, wait states, manual-control refusals."""

from __future__ import annotations

import io
from typing import Any

import pytest

from slipway.cli import main, refs, render, view
from slipway.cli.args import duration
from slipway.cli.refs import INFERENCE_DEPLOYMENT as IDEP
from slipway.cli.refs import MODEL_ARTIFACT as MA
from slipway.cli.refs import TRAINING_RUN as TR
from slipway.cli.tree import Node, lifecycle


def cond(type_: str, status: str, reason: str, message: str = "", generation: int = 1) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": generation}  # fmt: skip


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None, generation: int = 1):
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "generation": generation,
            "resourceVersion": "1"}, "spec": spec, "status": status or {}}  # fmt: skip


RUN = obj("TrainingRun", "digits", {"model": {"name": "digits"}},
          {"phase": "Succeeded", "artifactRef": {"name": "digits"}, "progress": {"step": 8, "totalSteps": 8},
           "conditions": [cond("Ready", "True", "Succeeded", "trained")]})  # fmt: skip
FROM_RUN = {"model": {"name": "digits"}, "source": {"trainingRunRef": {"name": "digits"}}}
ARTIFACT = obj("ModelArtifact", "digits", FROM_RUN,
               {"phase": "Validated", "modelVersion": "3", "quantizedVersion": "4",
                "gates": [{"metric": "accuracy", "value": 0.96, "threshold": ">= 0.9", "passed": True},
                          {"metric": "sizeBytes", "value": 9000, "threshold": "<= 10000", "passed": True}],
                "conditions": [cond("Ready", "True", "Validated")]})  # fmt: skip
REJECTED = obj("ModelArtifact", "shuffled", {"model": {"name": "digits"}, "source": {"uri": "s3://x"}},
               {"phase": "Rejected", "modelVersion": "5",
                "gates": [{"metric": "accuracy", "value": 0.1, "threshold": ">= 0.9", "passed": False,
                           "message": "accuracy 0.1 below 0.9"}],
                "conditions": [cond("Ready", "False", "GateFailed", "accuracy 0.1 below 0.9"),
                               cond("Stalled", "True", "GateFailed", "accuracy 0.1 below 0.9")]})  # fmt: skip
CANARY_STATUS = {
    "phase": "Analyzing",
    "stable": {"revision": "aaa111", "modelName": "digits", "modelVersion": "2", "replicas": 2, "readyReplicas": 2,
               "weight": 75},
    "canary": {"revision": "bbb222", "modelName": "digits", "modelVersion": "4", "replicas": 1, "readyReplicas": 1,
               "weight": 25, "requestedWeight": 25},
    "currentStep": 0,
    "analysis": [{"metric": "errorRate", "value": 0.0, "threshold": "<= 0.05", "result": "Passed", "time": "t"},
                 {"metric": "latencyP95Seconds", "value": None, "threshold": "<= 3 × stable", "result": "Inconclusive",
                  "message": "no data", "time": "t"}],
    "lastRollback": {"reason": "AnalysisFailed", "metric": "errorRate", "value": 0.3, "modelName": "digits",
                     "modelVersion": "1", "revision": "ccc333", "time": "2025-01-01T00:00:00Z"},
    "observedGeneration": 1,
    "conditions": [cond("Ready", "False", "Analyzing", "canary digits version 4 at step 1/2")],
}  # fmt: skip
STEPS = {"steps": [{"weight": 25, "pause": "5s"}, {"weight": 50, "pause": "5s"}]}
BY_REF = obj("InferenceDeployment", "digits", {"model": {"artifactRef": {"name": "digits"}}, "rollout": STEPS},
             CANARY_STATUS)  # fmt: skip
BY_ALIAS = obj("InferenceDeployment", "follow", {"model": {"name": "digits", "alias": "candidate"}},
               {"phase": "Promoted", "stable": {"revision": "ddd", "modelName": "digits", "modelVersion": "4",
                "replicas": 1, "readyReplicas": 1, "weight": 100}, "canary": {"weight": 0},
                "conditions": [cond("Ready", "True", "Promoted")]})  # fmt: skip
OTHER_MODEL = obj("InferenceDeployment", "other", {"model": {"name": "iris", "alias": "candidate"}},
                  {"phase": "Promoted",
                   "stable": {"revision": "eee", "modelName": "iris", "modelVersion": "4"}})  # fmt: skip
ALL = ([RUN], [ARTIFACT, REJECTED], [BY_REF, BY_ALIAS, OTHER_MODEL])


# -- kinds and references ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "words, kind, name",
    [
        (["idep/digits"], IDEP, "digits"),
        (["inferencedeployment/digits"], IDEP, "digits"),
        (["InferenceDeployments", "digits"], IDEP, "digits"),
        (["tr/run-1"], TR, "run-1"),
        (["trainingrun", "run-1"], TR, "run-1"),
        (["ma/digits"], MA, "digits"),
        (["modelartifacts.slipway.dev/digits"], MA, "digits"),
    ],
)
def test_references(words, kind, name):
    assert refs.parse_ref(words) == (kind, name)


@pytest.mark.parametrize(
    "words, message",
    [
        (["digits"], "expected KIND/NAME"),
        (["deploy/digits"], "unknown kind 'deploy'"),
        (["idep/"], "write KIND/NAME"),
        (["idep", "a", "b"], "expected KIND/NAME"),
        ([], "got nothing"),
    ],
)
def test_bad_references(words, message):
    with pytest.raises(refs.UsageError, match=message):
        refs.parse_ref(words)


def test_a_bare_name_is_the_default_kind():
    assert refs.parse_ref(["digits"], default=IDEP) == (IDEP, "digits")


@pytest.mark.parametrize(
    "kind, text, target",
    [(IDEP, "Ready", "Ready"), (IDEP, "condition=Ready", "Ready"), (IDEP, "promoted", "Promoted"),
     (MA, "Validated", "Validated"), (TR, "succeeded", "Succeeded")],
)  # fmt: skip
def test_wait_targets(kind, text, target):
    assert view.wait_target(kind, text) == target


def test_a_phase_of_another_kind_is_refused_naming_the_kind_and_its_phases():
    with pytest.raises(refs.UsageError, match="a TrainingRun waits for Ready or a phase: Pending, Running"):
        view.wait_target(TR, "Promoted")


# -- the command line before any connection -----------------------------------------------------------


def never_connect(*args: Any) -> Any:
    raise AssertionError("a usage error must not connect to a cluster")


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["get", "deploy/x"], 2, "unknown kind 'deploy'"),
        (["wait", "idep/x", "--for=Succeeded"], 2, "waits for Ready or a phase"),
        (["wait", "idep/x", "--timeout=soon"], 2, "invalid duration"),
        (["promote", "tr/x"], 2, "applies to an InferenceDeployment"),
        (["pause", "ma/x"], 2, "applies to an InferenceDeployment"),
        (["history", "tr/x"], 2, "applies to an InferenceDeployment"),
        (["list", "deploy"], 2, "unknown kind 'deploy'"),
        (["list", "-o", "table"], 2, "invalid choice"),
        (["get", "idep/x", "-o", "wide"], 2, "invalid choice"),
        (["completion", "fish"], 2, "invalid choice"),
        (["frobnicate"], 2, "invalid choice"),
        ([], 2, "required"),
    ],
)
def test_usage_errors_exit_2_without_connecting(argv, code, message, capsys):
    out, err = io.StringIO(), io.StringIO()
    assert main.run(argv, out, err, never_connect) == code
    assert message in err.getvalue() + capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, kubeconfig, context, namespace",
    [
        (["get", "idep/x"], None, None, None),
        (["--kubeconfig", "/k", "get", "idep/x", "-n", "team"], "/k", None, "team"),
        (["-n", "a", "--context", "c", "wait", "tr/x"], None, "c", "a"),
        (["wait", "tr/x", "--context=c", "--namespace=b", "--kubeconfig=/k"], "/k", "c", "b"),
    ],
)
def test_connection_flags_before_or_after_the_command(argv, kubeconfig, context, namespace):
    seen: list[tuple[Any, ...]] = []

    def connect(*args: Any) -> Any:
        seen.append(args)
        raise main.Failure("stop here")

    assert main.run(argv, io.StringIO(), io.StringIO(), connect) == 1
    assert seen == [(kubeconfig, context, namespace)]


@pytest.mark.parametrize("text, seconds", [("5m", 300), ("90s", 90), ("1h30m", 5400), ("45", 45), ("2.5", 2.5)])
def test_durations(text, seconds):
    assert duration(text) == seconds


def test_help_documents_every_exit_code(capsys):
    assert main.run(["--help"], io.StringIO(), io.StringIO()) == 0
    text = capsys.readouterr().out
    for code in range(6):
        assert f"\n  {code}  " in text
    commands = "get list history promote abort retry pause resume wait version completion"
    for command in commands.split():
        assert command in text
    assert main.run(["pause", "--help"], io.StringIO(), io.StringIO()) == 0
    assert "GitOps tool" in capsys.readouterr().out


# -- the lifecycle tree -------------------------------------------------------------------------------


def shape(nodes: list[Node]) -> list[Any]:
    return [
        (f"{n.kind.short}/{n.name}", shape(n.children)) if n.children else f"{n.kind.short}/{n.name}" for n in nodes
    ]


FULL = [("tr/digits", [("ma/digits", ["idep/digits", "idep/follow"])])]


@pytest.mark.parametrize(
    "kind, name, objects, tree",
    [
        (TR, "digits", ALL, FULL),
        (MA, "digits", ALL, FULL),
        (IDEP, "digits", ALL, FULL),
        (IDEP, "follow", ALL, FULL),  # by alias: serves version 4, the artifact's quantized version
        (MA, "shuffled", ALL, ["ma/shuffled"]),  # rejected: nobody serves it
        (IDEP, "other", ALL, ["idep/other"]),  # serves another model's version 4: not this artifact's
        # The TrainingRun is gone: shown as not found above its artifact; an artifact of no run is a root;
        # a run's artifact is found from its status.artifactRef alone too.
        (IDEP, "digits", ([], [ARTIFACT], [BY_REF]), [("tr/digits", [("ma/digits", ["idep/digits"])])]),
        (MA, "shuffled", ([RUN], [REJECTED], []), ["ma/shuffled"]),
        (MA, "digits", ([RUN], [{**ARTIFACT, "spec": {"source": {"uri": "x"}, "model": {"name": "digits"}}}], []),
         [("tr/digits", ["ma/digits"])]),
        # The artifact a deployment names does not exist (yet): shown as not found, above it.
        (IDEP, "digits", ([], [], [BY_REF]), [("ma/digits", ["idep/digits"])]),
        (TR, "digits", ([RUN], [], []), [("tr/digits", ["ma/digits"])]),
    ],
)  # fmt: skip
def test_lifecycle_from_any_kind(kind, name, objects, tree):
    assert shape(lifecycle(kind, name, *objects)) == tree


def test_lifecycle_of_a_missing_object_is_a_key_error():
    with pytest.raises(KeyError):
        lifecycle(IDEP, "nope", *ALL)


def test_render_a_live_canary():
    text = render.render(lifecycle(IDEP, "digits", [RUN], [ARTIFACT], [BY_REF]))
    assert text == (
        "TrainingRun/digits  Succeeded\n"
        "│ Ready     True Succeeded: trained\n"
        "│ progress  step 8/8\n"
        "└─ ModelArtifact/digits  Validated\n"
        "   │ Ready     True Validated\n"
        "   │ versions  digits v3, quantized v4\n"
        "   │ gates     accuracy 0.96 (>= 0.9) passed\n"
        "   │           sizeBytes 9000 (<= 10000) passed\n"
        "   └─ InferenceDeployment/digits  Analyzing\n"
        "        Ready         False Analyzing: canary digits version 4 at step 1/2\n"
        "        model         artifactRef digits\n"
        "        stable        digits v2  revision aaa111  2/2 ready  weight 75%\n"
        "        canary        digits v4  revision bbb222  1/1 ready  weight 25% (requested 25%)  step 1 of 2\n"
        "        analysis      errorRate 0 (<= 0.05) Passed\n"
        "                      latencyP95Seconds - (<= 3 × stable) Inconclusive: no data\n"
        "        lastRollback  AnalysisFailed errorRate=0.3  digits v1  revision ccc333  at 2025-01-01T00:00:00Z\n"
    )


def with_status(base: dict[str, Any], generation: int = 1, **status: Any) -> dict[str, Any]:
    return {**base, "metadata": {**base["metadata"], "generation": generation}, "status": {**base["status"], **status}}


@pytest.mark.parametrize(
    "deployment, present, absent",
    [
        (with_status(BY_REF, phase="Paused", conditions=[cond("Ready", "False", "Paused", "paused at step 1/2")]),
         ["InferenceDeployment/digits  Paused", "step 1 of 2", "Ready         False Paused: paused at step 1/2"], []),
        ({**BY_REF, "spec": {**BY_REF["spec"], "rollout": {**STEPS, "paused": True}}},
         ["paused        spec.rollout.paused is true"], []),
        # Promoted: no canary track, no step.
        (with_status(BY_REF, phase="Promoted", canary={"weight": 0}, currentStep=None, analysis=None),
         ["canary        none"], ["step 1 of", "analysis"]),
        # Default steps (20, 50) when the spec lists none; third of a stepWeight rollout.
        ({**BY_REF, "spec": {"model": {"artifactRef": {"name": "digits"}}}}, ["step 1 of 2"], []),
        ({**with_status(BY_REF, currentStep=2), "spec": {"model": {"artifactRef": {"name": "digits"}},
          "rollout": {"stepWeight": 10, "maxWeight": 40}}}, ["step 3 of 4"], []),
        (with_status(BY_REF, phase="RolledBack", conditions=[cond("Ready", "False", "AnalysisFailed", "rolled back"),
                                                             cond("Stalled", "True", "AnalysisFailed", "x")],
                     lastRollback={**CANARY_STATUS["lastRollback"], "retried": True}),
         ["[Stalled: a person must act]", "(retried)"], ["step 1 of"]),
        (with_status(BY_REF, generation=2), ["[status of generation 1; the spec is at 2]"], []),
        (with_status(BY_REF, pendingRegistryUpdates=[{"action": "SetTag"}]), ["1 MLflow update(s) pending"], []),
        ({**BY_REF, "status": {}}, ["Ready   Unknown (no status yet)", "stable  none"], []),
    ],
)  # fmt: skip
def test_render_deployment_details(deployment, present, absent):
    text = render.render(lifecycle(IDEP, "digits", [RUN], [ARTIFACT], [deployment]))
    for part in present:
        assert part in text, text
    for part in absent:
        assert part not in text, text


def test_render_a_failed_gate_and_a_missing_object():
    text = render.render(lifecycle(MA, "shuffled", *ALL))
    assert "gates     accuracy 0.1 (>= 0.9) FAILED: accuracy 0.1 below 0.9" in text
    text = render.render(lifecycle(IDEP, "digits", [], [], [BY_REF]))
    assert text.startswith("ModelArtifact/digits  (not found)\n└─ InferenceDeployment/digits  Analyzing\n")


# -- wait ---------------------------------------------------------------------------------------------


def idep_at(generation: int, *conditions: dict[str, Any], phase: str = "Analyzing", observed: int = 1):
    return obj("InferenceDeployment", "d", {}, {"phase": phase, "observedGeneration": observed,
               "conditions": list(conditions)}, generation)  # fmt: skip


@pytest.mark.parametrize(
    "o, target, done, stalled",
    [
        (idep_at(1, cond("Ready", "True", "Promoted"), phase="Promoted"), "Ready", True, None),
        (idep_at(1, cond("Ready", "True", "Promoted"), phase="Promoted"), "Promoted", True, None),
        # The previous generation's Ready and phase do not count for the new spec.
        (idep_at(2, cond("Ready", "True", "Promoted"), phase="Promoted"), "Ready", False, None),
        (idep_at(2, cond("Ready", "True", "Promoted"), phase="Promoted"), "Promoted", False, None),
        (idep_at(1, cond("Ready", "False", "Analyzing")), "Ready", False, None),
        (idep_at(1, cond("Stalled", "True", "InvalidSpec", "spec.x: wrong")), "Ready", False,
         "InvalidSpec: spec.x: wrong"),
        (idep_at(1, cond("Stalled", "True", "AnalysisFailed", "rolled back"), phase="RolledBack"), "Promoted", False,
         "AnalysisFailed: rolled back"),
        # Waiting for the phase it went to: done, not stalled.
        (idep_at(1, cond("Stalled", "True", "Aborted", "x"), phase="RolledBack"), "RolledBack", True,
         "Aborted: x"),
        # Stalled at an older generation: the new spec may fix it; keep waiting.
        (idep_at(2, cond("Stalled", "True", "InvalidSpec", "old", generation=1), observed=1), "Ready", False, None),
        (idep_at(1, cond("Stalled", "False", "Analyzing")), "Ready", False, None),
    ],
)  # fmt: skip
def test_wait_states(o, target, done, stalled):
    state = view.wait_state(o, target)
    assert (state.done, state.stalled) == (done, stalled)


def test_wait_progress_changes_with_phase_reason_and_step_only():
    a = view.wait_state(with_status(BY_REF, currentStep=0), "Ready")
    b = view.wait_state(with_status(BY_REF, currentStep=0, canary={"readyReplicas": 0}), "Ready")
    c = view.wait_state(with_status(BY_REF, currentStep=1), "Ready")
    d = view.wait_state(with_status(BY_REF, phase="Paused"), "Ready")
    assert a.progress == b.progress and len({a.progress, c.progress, d.progress}) == 3
    assert a.line.startswith("Analyzing; Ready False Analyzing: canary digits version 4")


# -- manual control -----------------------------------------------------------------------------------


def deployment_in(phase: str, canary: bool = True, rollback: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "stable": CANARY_STATUS["stable"],
                              "canary": CANARY_STATUS["canary"] if canary else {"weight": 0}}  # fmt: skip
    if rollback is not None:
        status["lastRollback"] = rollback
    return obj("InferenceDeployment", "digits", {}, status)


ROLLBACK = CANARY_STATUS["lastRollback"]


@pytest.mark.parametrize(
    "action, o, refusal",
    [
        ("promote", deployment_in("Analyzing"), None),
        ("promote", deployment_in("Paused"), None),
        ("promote", deployment_in("Progressing"), None),
        ("promote", deployment_in("Progressing", canary=False),
         "has no canary in flight to promote (phase Progressing)"),
        ("promote", deployment_in("Promoting"), "is already Promoting digits v4"),
        ("promote", deployment_in("Promoted", canary=False), "it is Promoted, serving digits v2; a rollout starts"),
        ("promote", deployment_in("RolledBack", canary=False, rollback=ROLLBACK),
         "digits v1 was rolled back (AnalysisFailed); `kubectl slipway retry digits` rolls it out again"),
        ("abort", deployment_in("Analyzing"), None),
        ("abort", deployment_in("Paused"), None),
        ("abort", deployment_in("Promoting"), None),
        ("abort", deployment_in("Baking", canary=False), None),  # reverts the baking version
        ("promote", deployment_in("Baking", canary=False), "has no canary in flight to promote (phase Baking)"),
        ("abort", deployment_in("Promoted", canary=False), "has no canary to abort"),
        ("abort", deployment_in("RolledBack", canary=False, rollback=ROLLBACK), "has no canary to abort"),
        ("retry", deployment_in("RolledBack", canary=False, rollback=ROLLBACK), None),
        ("retry", deployment_in("Promoted", canary=False), "nothing was rolled back, so there is nothing to retry"),
        ("retry", deployment_in("Analyzing"), "nothing was rolled back"),
        ("retry", deployment_in("RolledBack", canary=False, rollback={**ROLLBACK, "retried": True}),
         "was already retried"),
        ("retry", deployment_in("Analyzing", rollback=ROLLBACK), "is Analyzing: its last rollback (digits v1) is not"),
    ],
)  # fmt: skip
def test_manual_actions_by_phase(action, o, refusal):
    got = view.action_refusal(action, o)
    if refusal is None:
        assert got is None
    else:
        assert got is not None and refusal in got and got.startswith("InferenceDeployment ns/digits")


@pytest.mark.parametrize(
    ("spent", "line"),
    [
        ({"summary": "1.23 USD", "total": 1.23, "gpuHours": 0.5, "wastedShare": 0.25,
          "attempts": [{"pod": "a"}, {"pod": "b"}]},
         "1.23 USD: 0.50 GPU-hours over 2 attempts, 25% on attempts that did not succeed"),
        ({"gpuHours": 1.0, "attempts": [{"pod": "a"}], "message": "no price configured: set the price file"},
         "1.00 GPU-hours over 1 attempt; no price configured: set the price file"),
        ({"summary": "3.00 EUR", "total": 3.0, "gpuHours": 1.0, "wastedShare": 0, "attempts": [{"pod": "a"}],
          "folded": {"count": 64}, "message": "missing from p.yaml: cpuHour (counted as 0)"},
         "3.00 EUR: 1.00 GPU-hours over 65 attempts, 0% on attempts that did not succeed "
         "(missing from p.yaml: cpuHour (counted as 0))"),
    ],
)  # fmt: skip
def test_a_runs_cost_in_one_line(spent, line):
    assert render.cost_line(spent) == line
    run = {**RUN, "status": {**RUN["status"], "cost": spent}}
    assert f"│ cost      {line}\n" in render.render(lifecycle(TR, "digits", [run], [], []))


def test_each_tracks_serving_cost_in_one_line():
    spent = {"currency": "USD", "perHour": 7.2, "per1kRequests": 0.1, "perMillionTokens": 25, "time": "T"}
    assert render.serving_cost_line(spent) == (
        "7.2 USD per hour, 0.1 USD per 1K requests, 25 USD per 1M tokens  (at T)")  # fmt: skip
    unpriced = {"message": "no price configured", "tokensPerPodSecond": 40}
    assert render.serving_cost_line(unpriced) == "no price configured"
    deployment = {**BY_REF, "status": {**BY_REF["status"], "stable": {**BY_REF["status"]["stable"], "cost": spent}}}
    text = render.render(lifecycle(IDEP, "digits", [], [], [deployment]))
    assert "stable cost   7.2 USD per hour, 0.1 USD per 1K requests" in text, text
