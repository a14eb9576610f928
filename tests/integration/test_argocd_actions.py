"""Argo CD resource actions: InferenceDeployment's promote, abort, retry, pause and resume, TrainingRun's
suspend and resume, as manifests/argocd/argocd-cm.yaml ships them.

They run as Argo CD's API server runs them, in the small Go program e2e/health (`make health-tool`):
the Lua in gopher-lua with the libraries Argo CD opens, the returned object encoded by the JSON
library Argo CD uses, and the JSON merge patch Argo CD sends computed by the library it uses. Each
InferenceDeployment action is held to `kubectl slipway`: in every state, the action's patch is the
patch the plugin sends (its resourceVersion aside), refused where the plugin refuses, and disabled in
discovery exactly where the plugin patches nothing."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from slipway.cli import main
from slipway.cli.args import OK, REFUSED
from slipway.training.model import TrainingRunSpec
from slipway_testing import deployment, training_run

ROOT = Path(__file__).resolve().parents[2]
HEALTH_TOOL = ROOT / ".cache" / "health" / "health"  # make health-tool (a prerequisite of make test)
ARGOCD = ROOT / "manifests" / "argocd"
CONFIG_MAP = ARGOCD / "argocd-cm.yaml"
ACTIONS = {
    "InferenceDeployment": ["promote", "abort", "retry", "pause", "resume"],
    "TrainingRun": ["suspend", "resume"],
}
PREFIX = "resource.customizations.actions.slipway.dev_"


def run_actions(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each object: `offered` (discovery: action -> {disabled}) and `ran` (action -> the merge
    patch Argo CD sends, None when nothing changes, or the error it reports)."""
    done = subprocess.run(
        [str(HEALTH_TOOL), "actions", str(CONFIG_MAP)],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def enabled(result: dict[str, Any]) -> set[str]:
    return {name for name, action in result["offered"].items() if not action["disabled"]}


def test_the_argocd_config_map_carries_the_actions_of_each_kind():
    data = yaml.safe_load(CONFIG_MAP.read_text())["data"]
    assert {key for key in data if key.startswith("resource.customizations.actions.")} == {
        PREFIX + kind for kind in ACTIONS
    }
    for kind, names in ACTIONS.items():
        shipped = yaml.safe_load(data[PREFIX + kind])
        scripts = ARGOCD / "actions" / kind
        assert set(shipped) == {"discovery.lua", "definitions"}  # no mergeBuiltinActions: there are none
        assert shipped["discovery.lua"] == (scripts / "discovery.lua").read_text()
        assert [(d["name"], d["action.lua"]) for d in shipped["definitions"]] == [
            (name, (scripts / name / "action.lua").read_text()) for name in names
        ]


# -- InferenceDeployment ------------------------------------------------------------------------------

CANARY = {"revision": "bbb222", "modelName": "digits", "modelVersion": "4", "weight": 25}
STABLE = {"revision": "aaa111", "modelName": "digits", "modelVersion": "2", "weight": 75}
ROLLBACK = {
    "reason": "AnalysisFailed",
    "metric": "errorRate",
    "value": 0.3,
    "modelName": "digits",
    "modelVersion": "4",
    "revision": "bbb222",
    "time": "2025-01-01T00:00:00Z",
}


def idep(
    phase: str | None,
    canary: bool = False,
    rollback: dict[str, Any] | None = None,
    paused: bool = False,
    annotation: str | None = None,
) -> dict[str, Any]:
    """The InferenceDeployment `digits` in a phase: a canary in flight or none, a rollback on record,
    spec.rollout.paused, an action's annotation already set."""
    body = deployment("digits")
    body["metadata"].update(namespace="ns", generation=2, resourceVersion="41", uid="u-1")
    if paused:
        body["spec"]["rollout"]["paused"] = True
    if annotation is not None:
        body["metadata"]["annotations"] = {f"slipway.dev/{annotation}": "true", "team": "a"}
    if phase is None:
        return body
    status: dict[str, Any] = {
        "phase": phase,
        "observedGeneration": 2,
        "stable": STABLE,
        "canary": CANARY if canary else {"weight": 0},
        "analysis": [],
        "conditions": [],
    }
    if rollback is not None:
        status["lastRollback"] = rollback
    body["status"] = status
    return body


IDEP_STATES = {
    "new": (idep(None), {"pause"}),
    "progressing before the canary exists": (idep("Progressing"), {"pause"}),
    "progressing": (idep("Progressing", canary=True), {"promote", "abort", "pause"}),
    "analyzing": (idep("Analyzing", canary=True), {"promote", "abort", "pause"}),
    "paused": (idep("Paused", canary=True, paused=True), {"promote", "abort", "resume"}),
    "paused, then resumed, not yet seen": (idep("Paused", canary=True), {"promote", "abort", "pause"}),
    "promoting": (idep("Promoting", canary=True), {"abort", "pause"}),
    "baking": (idep("Baking"), {"abort", "pause"}),
    "promoted": (idep("Promoted"), {"pause"}),
    "promoted and paused": (idep("Promoted", paused=True), {"resume"}),
    "rolled back": (idep("RolledBack", rollback=ROLLBACK), {"retry", "pause"}),
    "rolled back, retried": (idep("RolledBack", rollback={**ROLLBACK, "retried": True}), {"pause"}),
    "rolled back earlier, analyzing another": (
        idep("Analyzing", canary=True, rollback=ROLLBACK),
        {"promote", "abort", "pause"},
    ),
    "failed": (idep("Failed"), {"pause"}),
    "promote requested": (idep("Analyzing", canary=True, annotation="promote"), {"abort", "pause"}),
    "abort requested": (idep("Promoting", canary=True, annotation="abort"), {"pause"}),
    "retry requested": (idep("RolledBack", rollback=ROLLBACK, annotation="retry"), {"pause"}),
}


@pytest.fixture(scope="module")
def idep_results() -> dict[str, dict[str, Any]]:
    names = list(IDEP_STATES)
    return dict(zip(names, run_actions([IDEP_STATES[n][0] for n in names]), strict=True))


@pytest.mark.parametrize("state", list(IDEP_STATES))
def test_discovery_offers_the_actions_each_state_allows(state, idep_results):
    result = idep_results[state]
    assert set(result["offered"]) == set(ACTIONS["InferenceDeployment"])
    assert enabled(result) == IDEP_STATES[state][1]


# kubectl as `kubectl slipway` runs it, answering for one object: a GET prints $OBJECT, a patch's body
# (its last argument) is added to $PATCHES, anything else (config view) prints nothing.
FAKE_KUBECTL = """#!/bin/sh
for last; do :; done
case " $* " in
  *" get --raw "*) cat "$OBJECT" ;;
  *" patch "*) printf '%s\\n' "$last" >> "$PATCHES" ;;
esac
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """``plugin(action, obj)``: the exit code of `kubectl slipway ACTION digits -n ns` on ``obj`` and
    the patch it sent, without the resourceVersion it carries for optimistic concurrency (Argo CD's
    merge patch has none)."""
    kubectl = tmp_path / "bin" / "kubectl"
    kubectl.parent.mkdir()
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    monkeypatch.setenv("PATH", f"{kubectl.parent}{os.pathsep}{os.environ['PATH']}")

    def run(action: str, obj: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        (tmp_path / "object.json").write_text(json.dumps(obj))
        patches = tmp_path / "patches"
        patches.unlink(missing_ok=True)
        monkeypatch.setenv("OBJECT", str(tmp_path / "object.json"))
        monkeypatch.setenv("PATCHES", str(patches))
        argv = [action, "digits", "-n", "ns", "--kubeconfig", str(kubeconfig)]
        code = main.run(argv, io.StringIO(), io.StringIO())
        if not patches.exists():
            return code, None
        (sent,) = [json.loads(line) for line in patches.read_text().splitlines()]
        assert sent["metadata"].pop("resourceVersion") == obj["metadata"]["resourceVersion"]
        if not sent["metadata"]:
            del sent["metadata"]
        return code, sent

    return run


@pytest.mark.parametrize("action", ACTIONS["InferenceDeployment"])
@pytest.mark.parametrize("state", list(IDEP_STATES))
def test_each_action_does_what_the_kubectl_plugin_does(state, action, idep_results, plugin):
    obj = IDEP_STATES[state][0]
    code, patch = plugin(action, obj)
    offered, ran = idep_results[state]["offered"][action], idep_results[state]["ran"][action]
    assert ran.get("patch") == patch  # the same change, or none
    assert offered["disabled"] == (patch is None)  # offered exactly where it changes something
    if code == REFUSED:
        assert ran["error"].startswith("InferenceDeployment ns/digits")
    else:
        assert code == OK and "error" not in ran


def test_the_actions_in_one_table():
    """Each action's patch in the state it applies to, spelled out."""
    states = ["analyzing", "promoting", "rolled back", "analyzing", "paused"]
    results = run_actions([IDEP_STATES[s][0] for s in states])
    patches = [
        r["ran"][a]["patch"] for r, a in zip(results, ["promote", "abort", "retry", "pause", "resume"], strict=True)
    ]
    assert patches == [
        {"metadata": {"annotations": {"slipway.dev/promote": "true"}}},
        {"metadata": {"annotations": {"slipway.dev/abort": "true"}}},
        {"metadata": {"annotations": {"slipway.dev/retry": "true"}}},
        {"spec": {"rollout": {"paused": True}}},
        {"spec": {"rollout": {"paused": False}}},
    ]


@pytest.mark.parametrize(
    ("state", "action", "message"),
    [
        ("promoted", "promote", "has no canary in flight to promote (phase Promoted)"),
        ("baking", "promote", "has no canary in flight to promote (phase Baking)"),
        ("promoted", "abort", "has no canary in flight, promotion or bake to abort (phase Promoted)"),
        ("new", "abort", "(phase not set yet)"),
        ("promoted", "retry", "nothing was rolled back, so there is nothing to retry"),
        ("rolled back, retried", "retry", "the rollback of digits v4 was already retried"),
        ("rolled back earlier, analyzing another", "retry", "is Analyzing: its last rollback (digits v4) is not"),
    ],
)
def test_an_action_run_where_it_does_not_apply_is_refused_with_the_reason(state, action, message, idep_results):
    # Argo CD runs a disabled action when asked (`argocd app actions run`): the script refuses it.
    assert idep_results[state]["offered"][action]["disabled"]
    ran = idep_results[state]["ran"][action]
    assert ran["patch"] is None and message in ran["error"], ran


# -- TrainingRun --------------------------------------------------------------------------------------


def trainingrun(phase: str | None, suspend: bool = False) -> dict[str, Any]:
    # Empty objects as the API server keeps them: Lua's tables make an empty object an empty array,
    # which Argo CD (and the tool) mends before the patch, so the patch leaves it alone.
    body = training_run("digits", 200, suspend=suspend, resources={}, nodeSelector={})
    body["metadata"].update(namespace="ns", generation=1, resourceVersion="12")
    if phase is not None:
        body["status"] = {"phase": phase, "observedGeneration": 1, "startTime": "2025-01-01T00:00:00Z"}
    return body


RUN_STATES = {
    "new": (trainingrun(None), {"suspend"}, {"suspend": True}, None),
    "pending": (trainingrun("Pending"), {"suspend"}, {"suspend": True}, None),
    "running": (trainingrun("Running"), {"suspend"}, {"suspend": True}, None),
    "suspended": (trainingrun("Suspended", suspend=True), {"resume"}, None, {"suspend": False}),
    "suspend asked, not yet seen": (trainingrun("Running", suspend=True), {"resume"}, None, {"suspend": False}),
    "succeeded": (trainingrun("Succeeded"), set(), "refused", None),
    "failed": (trainingrun("Failed"), set(), "refused", None),
}


def merged(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with a JSON merge patch (RFC 7386) applied, as the API server applies Argo CD's."""
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("state", list(RUN_STATES))
def test_a_training_run_is_suspended_and_resumed_by_spec_suspend(state):
    obj, offered, suspend_patch, resume_patch = RUN_STATES[state]
    (result,) = run_actions([obj])
    assert enabled(result) == offered
    for action, expected in (("suspend", suspend_patch), ("resume", resume_patch)):
        ran = result["ran"][action]
        if expected == "refused":
            assert ran["patch"] is None and f"has finished ({obj['status']['phase']})" in ran["error"]
            continue
        assert "error" not in ran and ran["patch"] == (None if expected is None else {"spec": expected})
        if expected is not None:
            # The field the operator reads: the spec after the patch, through the CRD's model.
            assert TrainingRunSpec.model_validate(merged(obj, ran["patch"])["spec"]).suspend is expected["suspend"]
