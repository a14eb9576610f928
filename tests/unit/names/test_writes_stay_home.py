"""Property: whatever a namespace editor writes (names, labels, annotations, env, pod templates, and
JSON forged into a child's annotations), every object Slipway would write for one of the three kinds
is one of that kind's children, in the parent's namespace, under its deterministic name; and
``children.check_child`` refuses anything else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from slipway.artifact import build as ma
from slipway.children import ForeignWrite, check_child, child_kinds
from slipway.inference import build as idep
from slipway.inference.model import InferenceDeploymentSpec
from slipway.training import build as tr
from slipway.training.model import TrainingRunSpec

DNS = st.from_regex(r"[a-z]([a-z0-9-]{0,30}[a-z0-9])?", fullmatch=True)
TEXT = st.text(max_size=80)
KEY = st.one_of(st.from_regex(r"[a-z0-9.-]{1,20}/[A-Za-z0-9_.-]{1,30}", fullmatch=True), TEXT)
STRINGS = st.dictionaries(KEY, TEXT, max_size=6)
LABELS = st.dictionaries(
    KEY, st.from_regex(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,40}[A-Za-z0-9])?", fullmatch=True), max_size=6
)
# Forged: any JSON, including whole objects of another kind aimed at another namespace.
FORGED_OBJECT = st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["batch/v1", "apps/v1", "v1", "rbac.authorization.k8s.io/v1"]),
    "kind": st.sampled_from(["Job", "Deployment", "Secret", "ClusterRoleBinding"]),
    "metadata": st.fixed_dictionaries({"name": DNS, "namespace": st.sampled_from(["kube-system", "t1", "default"])}),
    "spec": st.fixed_dictionaries({"template": st.fixed_dictionaries({
        "metadata": st.fixed_dictionaries({"labels": STRINGS}),
        "spec": st.fixed_dictionaries({"containers": st.just([{"name": "x", "image": "evil"}])}),
    })}),
})  # fmt: skip
FORGED = st.one_of(
    TEXT,
    FORGED_OBJECT.map(json.dumps),
    st.recursive(st.none() | TEXT, lambda c: st.lists(c) | st.dictionaries(TEXT, c)).map(json.dumps),
)  # noqa: E501


def pod_template(labels: dict[str, str], annotations: dict[str, str], env: dict[str, str]) -> dict[str, Any]:
    return {"labels": labels, "annotations": annotations,
            "env": [{"name": f"E{i}", "value": v} for i, v in enumerate(env.values())]}  # fmt: skip


def owner(kind: str, name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "slipway.dev/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": namespace}}


def home(parent: dict[str, Any], child: dict[str, Any], name: str) -> None:
    check_child(parent, child, name)  # raises ForeignWrite otherwise
    assert child["metadata"]["namespace"] == parent["metadata"]["namespace"]
    assert child_kinds()[parent["kind"]][child["kind"]] == child["apiVersion"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=DNS, namespace=DNS, labels=LABELS, annotations=STRINGS, env=STRINGS, forged=FORGED,
       gateway_ns=st.one_of(st.none(), DNS))  # fmt: skip
def test_inferencedeployment_children_stay_in_the_namespace(name, namespace, labels, annotations, env, forged,
                                                            gateway_ns):  # fmt: skip
    raw = {
        "model": {"name": "m", "alias": "candidate"},
        "image": "img",
        "podTemplate": pod_template(labels, annotations, env),
        "traffic": {"mode": "GatewayAPI", "parentRefs": [{"name": "web", "namespace": gateway_ns}]},
    }
    try:
        spec = InferenceDeploymentSpec.model_validate(raw)
    except ValidationError:
        assume(False)
    parent = owner("InferenceDeployment", name, namespace)
    for track in idep.TRACKS:
        body = idep.deployment(name, namespace, spec, track, "3", "models:/m/3", None, 1, "m", "img", "")
        home(parent, body, idep.deployment_name(name, track))
        assert body["spec"]["selector"]["matchLabels"] == idep.selector(name, track)
        home(parent, idep.service(name, namespace, spec, track), idep.track_service_name(name, track))
    home(parent, idep.service(name, namespace, spec), idep.service_name(name))
    home(parent, idep.hpa(name, namespace, spec), name)
    home(parent, idep.http_route(name, namespace, spec, 20), name)
    # The revert of a failed promotion, whatever an editor wrote into the stable's annotations and
    # labels (they are never read for it) and whatever pod template status kept.
    current = idep.deployment(name, namespace, spec, "stable", "3", "models:/m/3", None, 1, "m", "img", "")
    current["metadata"]["annotations"]["slipway.dev/previous-manifest"] = forged
    current["metadata"]["labels"].update(labels)
    served = {"revision": "r1", "modelVersion": "2", "modelName": "m", "uri": "models:/m/2",
              **idep.kept_for_revert(current)}  # fmt: skip
    previous = idep.previous_of(name, namespace, served)
    assert previous is not None
    home(parent, previous, idep.deployment_name(name, "stable"))
    assert previous["spec"]["selector"]["matchLabels"] == idep.selector(name, "stable")
    assert previous["spec"]["template"]["metadata"]["labels"][idep.TRACK_LABEL] == "stable"
    assert "slipway.dev/previous-manifest" not in previous["metadata"]["annotations"]
    assert previous["spec"]["template"]["spec"] == current["spec"]["template"]["spec"]


@settings(max_examples=100, deadline=None)
@given(name=DNS, namespace=DNS, labels=LABELS, annotations=STRINGS, env=STRINGS, nodes=st.integers(1, 4))
def test_trainingrun_and_modelartifact_children_stay_in_the_namespace(name, namespace, labels, annotations, env,
                                                                      nodes):  # fmt: skip
    raw = {"model": {"name": "m"}, "image": "img", "nodes": nodes, "checkpoint": {"size": "1Gi"},
           "podTemplate": pod_template(labels, annotations, env)}  # fmt: skip
    try:
        spec = TrainingRunSpec.model_validate(raw)
    except ValidationError:
        assume(False)
    parent = owner("TrainingRun", name, namespace)
    home(parent, tr.job(name, namespace, spec, None, ""), tr.job_name(name))
    pvc = tr.checkpoint_pvc(name, namespace, spec)
    assert pvc is not None
    home(parent, pvc, tr.pvc_name(name))
    service = tr.headless_service(name, namespace, spec)
    if nodes > 1:
        assert service is not None
        home(parent, service, tr.service_name(name))
    artifact = owner("ModelArtifact", name, namespace)
    for step in ("quantize", "validate"):
        job = ma.step_job(name, namespace, step, image="img", command=None, args=None, env=env)
        home(artifact, job, ma.job_name(name, step))


@pytest.mark.parametrize(
    ("child", "words"),
    [
        (
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "d", "namespace": "kube-system"}},
            "not a kind",
        ),
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "kube-system"}},
            "outside the namespace",
        ),
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "other", "namespace": "t2"}},
            "its child is named",
        ),
        (
            {"apiVersion": "apps/v1beta1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "t2"}},
            "not a kind",
        ),
        ({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "d", "namespace": "t2"}}, "not a kind"),
    ],
)
def test_anything_else_is_refused(child, words):
    with pytest.raises(ForeignWrite, match=words):
        check_child(owner("InferenceDeployment", "d", "t2"), child, "d")
