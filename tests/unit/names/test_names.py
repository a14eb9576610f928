"""Hostile names: every name the API server accepts for a Slipway object gives children whose names
and label values Kubernetes accepts, distinct per parent and the same after a restart.

The rules are written here from the API conventions (k8s.io/apimachinery/pkg/util/validation),
independently of the builders' own.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from slipway.artifact import build as ma
from slipway.inference import build as idep
from slipway.inference.model import AnalysisMetric, InferenceDeploymentSpec
from slipway.inference.providers.prometheus_queries import resolve_query
from slipway.names import dns1035_name, dns1123_name, label_value
from slipway.training import build as tr
from slipway.training.model import TrainingRunSpec

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # IsDNS1123Label, at most 63
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # IsDNS1035Label, at most 63
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # at most 253
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # IsValidLabelValue, at most 63


def dns1123_label(value: str) -> bool:
    return len(value) <= 63 and DNS1123_LABEL.fullmatch(value) is not None


def dns1035_label(value: str) -> bool:
    return len(value) <= 63 and DNS1035_LABEL.fullmatch(value) is not None


def dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and DNS1123_SUBDOMAIN.fullmatch(value) is not None


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.fullmatch(value) is not None


LONG_PREFIX = "team-a-llama-3-1-8b-instruct-finetune-2024-06-01-x"  # 50 characters
NAMES = {
    "plain": "digits",
    "dots": "llama-3.1-8b",
    "digit-first": "7b-chat",
    "digits-and-dots": "1.2.3",
    "one-digit": "0",
    "63-chars": "m" * 63,
    "64-chars": "m" * 64,
    "56-chars-multi-node": "r" * 56,
    "differs-after-50-a": LONG_PREFIX + "-alpha",
    "differs-after-50-b": LONG_PREFIX + "-bravo",
    "253-chars": "a" * 253,
    "253-chars-dots": ".".join(["a" * 61, "b" * 61, "c" * 61, "7" * 67]),
    "dots-and-digits-long": "7." * 40 + "x",
}


def test_every_hostile_name_is_one_the_api_server_accepts():
    for name in NAMES.values():
        assert dns1123_subdomain(name), name
    assert len(NAMES["253-chars"]) == len(NAMES["253-chars-dots"]) == 253


def tr_spec(nodes: int) -> TrainingRunSpec:
    return TrainingRunSpec.model_validate(
        {"model": {"name": "digits"}, "image": "img:1", "nodes": nodes, "checkpoint": {"size": "1Gi"}}
    )


def idep_spec(gateway: bool) -> InferenceDeploymentSpec:
    body: dict[str, Any] = {"model": {"name": "digits", "alias": "candidate"}, "image": "srv:1"}
    if gateway:
        body["traffic"] = {"mode": "GatewayAPI", "parentRefs": [{"name": "web"}]}
    return InferenceDeploymentSpec.model_validate(body)


def children(name: str) -> list[dict[str, Any]]:
    """Every child Slipway makes for an object of this name, of each kind and mode."""
    link = "http://mlflow:5000"
    spec2, gateway = tr_spec(2), idep_spec(gateway=True)
    found = [
        tr.job(name, "ns", tr_spec(1), link),
        tr.job(name, "ns", spec2, link),
        tr.checkpoint_pvc(name, "ns", spec2),
        tr.headless_service(name, "ns", spec2),
        *(ma.step_job(name, "ns", step, image="i", command=None, args=None, env={}) for step in ma.DEFAULT_COMMANDS),
        *(idep.deployment(name, "ns", gateway, t, "12", "models:/m/12", None, None) for t in idep.TRACKS),
        idep.service(name, "ns", gateway),
        *(idep.service(name, "ns", gateway, t) for t in idep.TRACKS),
        idep.hpa(name, "ns", gateway),
        idep.http_route(name, "ns", gateway, 25),
    ]
    return [c for c in found if c is not None]


# What the API server requires of each kind's name (and what follows from it: a Job's name is
# the value of its pods' batch.kubernetes.io/job-name label; a Deployment's names its pods).
NAME_RULES = {
    "Job": dns1123_label,
    "Deployment": dns1123_label,
    "PersistentVolumeClaim": dns1123_subdomain,
    "Service": dns1035_label,
    "HorizontalPodAutoscaler": dns1123_subdomain,
    "HTTPRoute": dns1123_subdomain,
}


def label_values(child: dict[str, Any]) -> list[str]:
    spec = child.get("spec") or {}
    template = (spec.get("template") or {}).get("metadata") or {}
    selector = spec.get("selector") or {}
    selector = selector.get("matchLabels", selector)
    maps = [child["metadata"].get("labels") or {}, template.get("labels") or {}, selector]
    return [v for m in maps for v in m.values()]


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_every_child_name_is_valid_for_its_kind(name):
    for child in children(name):
        kind, child_name = child["kind"], child["metadata"]["name"]
        assert NAME_RULES[kind](child_name), f"{kind} {child_name!r} of {name!r}"


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_every_label_value_is_valid(name):
    for child in children(name):
        for value in label_values(child):
            assert valid_label_value(value), f"{child['kind']} {child['metadata']['name']}: {value!r}"


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_indexed_job_pods_get_valid_hostnames_and_master_addr(name):
    """The job controller names each pod's hostname <job>-<index> (a DNS-1123 label, checked when
    the Job is created) and sets its subdomain to the headless Service: MASTER_ADDR resolves to
    <job>-0.<service>, for any name and up to spec.nodes' maximum."""
    job = tr.job(name, "ns", tr_spec(2), "u")
    assert dns1123_label(f"{job['metadata']['name']}-{tr.MAX_NODES - 1}")
    pod = job["spec"]["template"]["spec"]
    service = tr.headless_service(name, "ns", tr_spec(2))
    assert service is not None
    assert pod["subdomain"] == service["metadata"]["name"]
    assert dns1123_label(pod["subdomain"])
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    host, subdomain = env["MASTER_ADDR"].split(".")
    assert (host, subdomain) == (f"{job['metadata']['name']}-0", service["metadata"]["name"])
    assert dns1123_label(host)
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()


def test_max_nodes_is_the_crd_bound():
    assert TrainingRunSpec.model_json_schema()["properties"]["nodes"]["maximum"] == tr.MAX_NODES


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_selectors_match_the_pods_they_select(name):
    spec = idep_spec(gateway=True)
    for track in idep.TRACKS:
        deployment = idep.deployment(name, "ns", spec, track, "12", "models:/m/12", None, None)
        template_labels = deployment["spec"]["template"]["metadata"]["labels"].items()
        assert deployment["spec"]["selector"]["matchLabels"].items() <= template_labels
        assert idep.service(name, "ns", spec, track)["spec"]["selector"].items() <= template_labels
        assert idep.service(name, "ns", spec)["spec"]["selector"].items() <= template_labels
    hpa = idep.hpa(name, "ns", spec)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment",
                                             "name": name}  # fmt: skip
    route = idep.http_route(name, "ns", spec, 25)
    backends = [b["name"] for b in route["spec"]["rules"][0]["backendRefs"]]
    assert backends == [idep.track_service_name(name, t) for t in idep.TRACKS]


CHILD_NAMES = {
    "trainingrun job": tr.job_name,
    "trainingrun pvc": tr.pvc_name,
    "trainingrun service": tr.service_name,
    "modelartifact job": lambda n: ma.job_name(n, "quantize"),
    "deployment": lambda n: idep.deployment_name(n, "stable"),
    "service": idep.service_name,
    "track service": lambda n: idep.track_service_name(n, "canary"),
    "label value": label_value,
}


@pytest.mark.parametrize("derive", CHILD_NAMES.values(), ids=CHILD_NAMES.keys())
def test_different_parents_never_share_a_child(derive):
    names = [*NAMES.values(), "llama-3-1-8b", "s-7b-chat", "s7b-chat", "1-2-3", "M" * 63]
    derived = [derive(n) for n in names]
    assert len(set(derived)) == len(names), derived


@pytest.mark.parametrize(
    ("derive", "name", "expected"),
    [
        # Valid names are kept: nothing changes for the objects that worked before.
        (tr.job_name, "digits", "digits-train"),
        (idep.service_name, "digits", "digits"),
        (idep.deployment_name, "7b-chat", "7b-chat-stable"),
        (label_value, "llama-3.1-8b", "llama-3.1-8b"),
        (label_value, "m" * 63, "m" * 63),
        # Pinned: a change of the derivation would orphan every child made before it.
        (idep.service_name, "llama-3.1-8b", "llama-3-1-8b-7b633509"),
        (idep.service_name, "7b-chat", "s-7b-chat-e14c5e17"),
        (tr.service_name, "7b-chat", "s-7b-chat-83ddbba1-workers"),
        (tr.job_name, "llama-3.1-8b", "llama-3-1-8b-4533a80f-train"),
        (label_value, "m" * 64, "m" * 54 + "-55d24d1e"),
    ],
)
def test_derivation_is_the_identity_when_valid_and_stable_otherwise(derive, name, expected):
    got = derive(name) if derive is not idep.deployment_name else derive(name, "stable")
    assert got == expected


def legacy_child_name(parent: str, suffix: str) -> str:
    """Slipway's child names before this derivation (63 characters, a hash past that)."""
    name = f"{parent}-{suffix}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{parent[: 63 - len(suffix) - 10].rstrip('-')}-{digest}-{suffix}"


@pytest.mark.parametrize("name", ["digits", "m" * 63, "d" * 60, LONG_PREFIX + "-alpha", "7b-chat"])
def test_children_that_were_valid_keep_their_names(name):
    """Deployments and ModelArtifact Jobs made before keep theirs: an upgrade adopts, never duplicates."""
    for track in idep.TRACKS:
        assert idep.deployment_name(name, track) == legacy_child_name(name, track)
    for step in ma.DEFAULT_COMMANDS:
        assert ma.job_name(name, step) == legacy_child_name(name, step)


@pytest.mark.parametrize(
    "value", ["", "x", "a_b.c-d", "-leading", "trailing.", "has space", "Ünïcode", "x" * 300, "_" * 70]
)
def test_label_value_of_anything_is_valid_and_idempotent(value):
    derived = label_value(value)
    assert valid_label_value(derived)
    assert label_value(derived) == derived


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_names_are_idempotent(name):
    assert dns1035_name(dns1035_name(name)) == dns1035_name(name)
    assert dns1123_name(dns1123_name(name, "x")) == dns1123_name(name, "x")


def test_a_suffix_too_long_for_any_name_is_a_programming_error():
    with pytest.raises(ValueError, match="no name of at most 63 characters"):
        dns1123_name("llama-3.1-8b", "s" * 60)


@pytest.mark.parametrize("name", [NAMES["dots"], NAMES["253-chars"]])
def test_pods_name_their_parent_in_full(name):
    job = tr.job(name, "ns", tr_spec(1), "u")
    assert tr.run_of_pod(job["spec"]["template"]["metadata"]) == name
    deployment = idep.deployment(name, "ns", idep_spec(False), "canary", "3", "models:/m/3", None, None)
    assert idep.deployment_of_pod(deployment["spec"]["template"]["metadata"]) == name


def test_pods_made_before_the_annotation_are_found_by_label():
    assert tr.run_of_pod({"labels": {tr.RUN_LABEL: "digits"}}) == "digits"
    assert idep.deployment_of_pod({"labels": {idep.DEPLOYMENT_LABEL: "digits"}, "annotations": {}}) == "digits"


@pytest.mark.parametrize("name", [NAMES["plain"], NAMES["253-chars"]])
def test_analysis_selects_the_label_value_the_pods_carry(name):
    pods = idep.deployment(name, "ns", idep_spec(False), "canary", "3", "models:/m/3", None, None)
    value = pods["spec"]["template"]["metadata"]["labels"][idep.DEPLOYMENT_LABEL]
    builtin = resolve_query(AnalysisMetric(name="errorRate", max=0.1), "slipway", "canary", "ns", name, "20s")
    assert f'slipway_dev_deployment="{value}"' in builtin
    own = AnalysisMetric(name="mine", max=1, query='up{slipway_dev_deployment="{{ deployment }}"}')
    confined = f'up{{slipway_dev_deployment="{value}", namespace="ns"}}'
    assert resolve_query(own, "slipway", "canary", "ns", name, "20s") == confined
