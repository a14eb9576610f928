"""Which MLflow models a namespace may use (pure)."""

from __future__ import annotations

import pytest

from slipway.tenancy import (
    ALLOWED_GATEWAYS,
    ALLOWED_MODELS,
    ALLOWED_PRIORITY_CLASSES,
    ALLOWED_RUNTIME_CLASSES,
    NotAllowed,
    Policy,
    UriTarget,
    Use,
    allowed_patterns,
    inside_run,
    refusal,
    uri_target,
)


def namespace(value: str | None) -> dict:
    return {"metadata": {"name": "team-a", "annotations": {} if value is None else {ALLOWED_MODELS: value}}}


@pytest.mark.parametrize(
    ("annotation", "required", "model", "allowed"),
    [
        (None, False, "anything", True),  # single-tenant default: no annotation, no rule
        (None, True, "anything", False),  # multi-tenant mode: nothing without an allow-list
        ("team-a-*, shared", False, "team-a-fraud", True),
        ("team-a-*, shared", False, "shared", True),
        ("team-a-*, shared", False, "team-b-model", False),
        ("team-a-*", True, "team-a-x", True),
        ("", False, "team-a-x", False),  # an empty list allows nothing
        ("Team-A-*", False, "team-a-x", False),  # case matters, as in MLflow
    ],
)
def test_allow_list(annotation, required, model, allowed):
    assert (refusal("team-a", namespace(annotation), [model], required) is None) is allowed


def test_the_refusal_names_the_model_the_rule_and_who_can_change_it():
    message = refusal("team-a", namespace("team-a-*"), ["team-b-model"], False)
    assert message is not None
    assert "'team-b-model'" in message and "team-a allows team-a-*" in message and "cluster admin" in message
    required = refusal("team-a", namespace(None), ["m"], True)
    assert required is not None and "--require-model-allowlist" in required


def test_patterns_are_trimmed():
    assert allowed_patterns(namespace(" a-* , b ,")) == ["a-*", "b"]
    assert allowed_patterns(None) is None


def policy(value: str | None, required: bool = False) -> Policy:
    return Policy.of("t2", namespace(value), required)


def test_experiments_are_checked_like_models_and_the_refusal_names_the_field():
    refused = policy("t2-*").refusal([Use("spec.model.name", "model", "t2-a"),
                                      Use("spec.mlflow.experiment", "experiment", "acme")])  # fmt: skip
    assert refused is not None and refused.reason == "ExperimentNotAllowed"
    assert str(refused).startswith("spec.mlflow.experiment: MLflow experiment 'acme' is not allowed here")
    assert policy(None).refusal([Use("f", "experiment", "acme")]) is None  # single-team mode
    assert not policy(None).active and policy(None, required=True).active and policy("").active


@pytest.mark.parametrize(
    ("uri", "target"),
    [
        ("models:/acme/3", UriTarget(model="acme")),
        ("models:/acme@production", UriTarget(model="acme")),
        ("models:/acme/3/sub/dir", UriTarget(model="acme")),
        ("runs:/abc123/model", UriTarget(run_id="abc123")),
        ("runs://abc123/model", UriTarget(run_id="abc123")),
        ("mlflow-artifacts:/7/abc/artifacts/model", UriTarget(experiment_id="7")),
        ("mlflow-artifacts://mlflow.mlflow.svc:5000/7/abc/artifacts", UriTarget(experiment_id="7")),
        ("models:/m-0123abcd", UriTarget(logged_model="m-0123abcd")),  # its experiment is MLflow's to tell
    ],
)
def test_a_uri_reaches_a_model_a_run_or_an_experiment(uri, target):
    assert uri_target(uri, "spec.source.uri") == target


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("s3://bucket/model", "'s3' URIs are not allowed"),
        ("gs://bucket/model", "'gs' URIs are not allowed"),
        ("file:///etc/passwd", "'file' URIs are not allowed"),
        ("/var/models/m", "'a local path' URIs are not allowed"),
        ("https://example.com/model.onnx", "'https' URIs are not allowed"),
        ("models:/m-0%32%33", "percent-encoded"),  # read as m-023, a logged model MLflow may read otherwise
        ("runs:/abc/model/../../other", "climbs out"),
        ("mlflow-artifacts:/7/../8/abc", "climbs out"),
        ("mlflow-artifacts:/models/abc", "not under an experiment"),
    ],
)
def test_a_uri_whose_owner_cannot_be_told_is_refused_naming_the_field(uri, words):
    with pytest.raises(NotAllowed) as refused:
        uri_target(uri, "spec.source.uri")
    assert str(refused.value).startswith("spec.source.uri: ") and words in str(refused.value)
    assert refused.value.reason == "SourceNotAllowed"


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("runs:/abc/%2e%2e/%2e%2e/def/artifacts/model", "climbs out"),  # read as run abc, served as def
        ("runs:/abc/%2E%2E/def/artifacts/model", "climbs out"),
        ("runs:/abc/%252e%252e/def/artifacts/model", "climbs out"),  # decoded twice
        ("runs:/abc/%25252e%25252e/def", "climbs out"),  # three times
        ("runs:/abc/model/..%2f..%2fdef", "climbs out"),
        ("runs:/abc/%2e./def", "climbs out"),
        ("mlflow-artifacts:/7/%2e%2e/8/abc/artifacts", "climbs out"),
        ("models:/mine/1/%2e%2e/%2e%2e/theirs/1", "climbs out"),
        ("runs:/abc/model\\..\\..\\def", "backslash"),
        ("runs:/abc/model%5c..%5cdef", "backslash"),
        ("runs:/abc/./model", "'.' segment"),
        ("runs:/abc/%2e/model", "'.' segment"),
        ("runs:/abc//model", "empty segment"),
        ("runs:/abc/%2f/model", "empty segment"),
        ("runs:/abc/model%00.onnx", "control character"),
        ("runs:/abc/model%0a", "control character"),
        ("runs:/abc/m%" + "25" * 9 + "2e", "percent-encoded more than"),  # %2525...2e, 9 times over
        ("runs:/ab%63/model", "percent-encoded"),  # read as run ab%63, MLflow may read abc
        ("models:/mine%40production/1", "percent-encoded"),
    ],
)
def test_a_uri_that_reads_otherwise_decoded_is_refused(uri, words):
    with pytest.raises(NotAllowed) as refused:
        uri_target(uri, "spec.source.uri")
    assert str(refused.value).startswith("spec.source.uri: ") and words in str(refused.value)
    assert refused.value.reason == "SourceNotAllowed"


@pytest.mark.parametrize(
    ("uri", "inside"),
    [
        ("runs:/r1/model-int8", True),
        ("runs://r1/model-int8/", True),
        ("mlflow-artifacts:/4/r1/artifacts/model-int8", True),
        ("mlflow-artifacts:/4/r1/artifacts", True),
        ("runs:/r2/model", False),  # another run
        ("RUNS:/r1/model", False),
        ("models:/team-b-llm@production", False),
        ("models:/mine/1", False),
        ("s3://bucket/4/r1/artifacts/model", False),
        ("mlflow-artifacts:/4/r1/artifacts-x/model", False),  # a sibling, not under the root
        ("mlflow-artifacts:/4/r2/artifacts/model", False),
        ("mlflow-artifacts:/4/r1/artifacts/../../r2/artifacts/model", False),
        ("mlflow-artifacts:/4/r1/artifacts/%2e%2e/%2e%2e/r2/artifacts/model", False),
        ("runs:/r1/%2e%2e/%2e%2e/r2/artifacts/model", False),
        ("runs:/r1/model%2fx", False),  # own outputs need no encoding
    ],
)
def test_a_quantizers_output_must_be_inside_its_own_run(uri, inside):
    assert inside_run(uri, "r1", "mlflow-artifacts:/4/r1/artifacts/") is inside


def test_a_run_without_an_artifact_location_has_only_its_runs_uris():
    assert inside_run("runs:/r1/m", "r1", "") and not inside_run("mlflow-artifacts:/4/r1/artifacts/m", "r1", "")


def admin(**annotations: str) -> dict:
    return {"metadata": {"name": "t2", "annotations": annotations}}


def test_priority_classes_the_admin_allows():
    open_ns = Policy.of("t2", admin(), False)
    assert open_ns.priority_class(None, "f", "slipway-inference") == "slipway-inference"  # no annotation: any
    assert open_ns.priority_class("system-cluster-critical", "f", "d") == "system-cluster-critical"
    narrow = Policy.of("t2", admin(**{ALLOWED_PRIORITY_CLASSES: "team-*"}), False)
    assert narrow.priority_class(None, "f", "slipway-inference") == ""  # the preempting default is not theirs
    assert narrow.priority_class("team-low", "f", "slipway-inference") == "team-low"
    with pytest.raises(NotAllowed) as refused:
        narrow.priority_class("system-node-critical", "spec.podTemplate.priorityClassName", "d")
    assert refused.value.reason == "PriorityClassNotAllowed"
    assert str(refused.value).startswith("spec.podTemplate.priorityClassName: PriorityClass 'system-node-critical'")


def test_runtime_classes_the_admin_allows():
    field = "spec.podTemplate.runtimeClassName"
    Policy.of("t2", admin(), False).check_runtime_class("kata", field)  # single-team, no annotation: any
    for policy in (
        Policy.of("t2", admin(), True),
        Policy.of("t2", admin(**{ALLOWED_RUNTIME_CLASSES: "nvidia*"}), True),
    ):
        policy.check_runtime_class(None, field)  # none named: always
        with pytest.raises(NotAllowed) as refused:
            policy.check_runtime_class("privileged-vm", field)
        assert refused.value.reason == "RuntimeClassNotAllowed"
        assert str(refused.value).startswith(f"{field}: RuntimeClass 'privileged-vm' is not allowed in namespace t2")
        assert ALLOWED_RUNTIME_CLASSES in str(refused.value)
    Policy.of("t2", admin(**{ALLOWED_RUNTIME_CLASSES: "nvidia*"}), True).check_runtime_class("nvidia-cdi", field)


def test_gateways_of_other_namespaces_need_the_admin():
    own = Policy.of("t2", admin(), False)
    own.check_gateways([("t2", "web")], "spec.traffic.parentRefs")  # its own namespace: always
    with pytest.raises(NotAllowed) as refused:
        own.check_gateways([("t2", "web"), ("infra", "public")], "spec.traffic.parentRefs")
    assert refused.value.reason == "GatewayNotAllowed"
    assert str(refused.value).startswith("spec.traffic.parentRefs[1]: Gateway infra/public is in another namespace")
    Policy.of("t2", admin(), False, ["infra/public"]).check_gateways([("infra", "public")], "f")  # operator flag
    Policy.of("t2", admin(**{ALLOWED_GATEWAYS: "infra/*"}), False).check_gateways([("infra", "x")], "f")
    with pytest.raises(NotAllowed):
        Policy.of("t2", admin(**{ALLOWED_GATEWAYS: "infra/*"}), False).check_gateways([("kube-system", "x")], "f")


def test_in_multi_tenant_mode_a_namespace_without_the_annotation_may_name_only_the_operators_default_class():
    shared = Policy.of("t2", admin(), True)
    assert shared.priority_class(None, "f", "slipway-inference") == "slipway-inference"
    assert shared.priority_class("slipway-training", "spec.priorityClassName", "slipway-training") == "slipway-training"
    for asked in ("system-cluster-critical", "team-b-high", "slipway-inference"):
        with pytest.raises(NotAllowed) as refused:
            shared.priority_class(asked, "spec.priorityClassName", "slipway-training")
        assert refused.value.reason == "PriorityClassNotAllowed"
        assert str(refused.value) == (
            f"spec.priorityClassName: PriorityClass {asked!r} is not allowed in namespace t2 (it has no "
            "slipway.dev/allowed-priority-classes annotation and the operator runs with --require-model-allowlist: "
            "only the operator's default, slipway-training); name an allowed class or none, or a cluster admin adds "
            "it to the annotation"
        )
    with pytest.raises(NotAllowed):  # an operator without a default: none
        shared.priority_class("slipway-training", "f", "")
    # The admin's annotation decides, in either mode.
    allowed = Policy.of("t2", admin(**{ALLOWED_PRIORITY_CLASSES: "team-*"}), True)
    assert allowed.priority_class("team-high", "f", "slipway-inference") == "team-high"


def test_route_hostnames_are_the_admins_to_allow_in_multi_tenant_mode():
    single = Policy.of("t2", admin(), False)
    single.check_hostnames(["anything.example.com", "*.example.org"], "spec.traffic.hostnames")  # single team: any
    shared = Policy.of("t2", admin(), True)
    with pytest.raises(NotAllowed) as refused:
        shared.check_hostnames(["api.team-b.example.com"], "spec.traffic.hostnames")
    assert refused.value.reason == "HostnameNotAllowed"
    assert str(refused.value).startswith(
        "spec.traffic.hostnames[0]: hostname api.team-b.example.com is not allowed in namespace t2 (it has no "
        "slipway.dev/allowed-hostnames annotation and the operator runs with --require-model-allowlist)"
    )
    shared.check_hostnames([], "spec.traffic.hostnames")  # no hostname: nothing to allow
    mine = Policy.of("t2", admin(**{"slipway.dev/allowed-hostnames": "*.team-a.example.com, team-a.example.com"}), True)
    mine.check_hostnames(["team-a.example.com", "api.team-a.example.com", "*.team-a.example.com"], "f")
    for foreign in ("api.team-b.example.com", "*.example.com", "team-a.example.com.evil.org"):
        with pytest.raises(NotAllowed) as refused:
            mine.check_hostnames(["team-a.example.com", foreign], "spec.traffic.hostnames")
        assert str(refused.value).startswith(f"spec.traffic.hostnames[1]: hostname {foreign} is not allowed")
        assert "its slipway.dev/allowed-hostnames annotation allows *.team-a.example.com, team-a.example.com" in str(
            refused.value
        )
