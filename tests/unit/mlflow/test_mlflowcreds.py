"""A namespace's pods get the MLflow credentials its admin named on the Namespace, never the
operator's; in multi-tenant mode a namespace without that annotation gives its pods none."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from slipway import mlflowcreds
from slipway.artifact import state as states
from slipway.config import OperatorConfig
from slipway.mlflow import MlflowError
from slipway.mlflowcreds import MLFLOW_CREDENTIALS, named_secret, workload_secret
from slipway.podspec import with_credentials
from slipway.status.conditions import Cond
from slipway.training import build as trainingrun
from slipway.training.model import TrainingRunSpec

OPERATORS = "slipway-mlflow-credentials"  # the setting's default, also the chart's operator Secret


def namespace(**annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": "t2", "annotations": annotations}}


def test_the_secret_the_admin_named_wins_in_either_mode():
    ns = namespace(**{MLFLOW_CREDENTIALS: "t2-mlflow"})
    assert workload_secret(ns, OPERATORS, multi_tenant=True) == "t2-mlflow"
    assert workload_secret(ns, OPERATORS, multi_tenant=False) == "t2-mlflow"


def test_multi_tenant_without_the_annotation_gives_no_credentials():
    assert workload_secret(namespace(), OPERATORS, multi_tenant=True) is None
    assert workload_secret(None, OPERATORS, multi_tenant=True) is None


def test_single_team_without_the_annotation_keeps_the_setting():
    assert workload_secret(namespace(), OPERATORS, multi_tenant=False) == OPERATORS
    assert workload_secret(namespace(), "", multi_tenant=False) is None


@pytest.mark.parametrize("value", ["", "  ", "Team2", "../x", "a/b", "x" * 254, "-a", "a_b"])
def test_a_value_that_is_no_secret_name_names_none(value: str):
    assert named_secret(namespace(**{MLFLOW_CREDENTIALS: value})) is None
    assert workload_secret(namespace(**{MLFLOW_CREDENTIALS: value}), OPERATORS, multi_tenant=True) is None


def test_a_dotted_secret_name_is_one():
    assert named_secret(namespace(**{MLFLOW_CREDENTIALS: " team.mlflow-1 "})) == "team.mlflow-1"


def context(ns: dict[str, Any] | None, multi_tenant: bool) -> Any:
    config = OperatorConfig(mlflow_url="http://mlflow:5000", prometheus_url=None, require_model_allowlist=multi_tenant)
    cache = SimpleNamespace(
        get=lambda plural, scope, name: ns if (plural, scope, name) == ("namespaces", "", "t2") else None
    )
    return SimpleNamespace(cache=cache, config=config, namespace="t2")


def pod_env_from(secret: str | None) -> list[dict[str, Any]]:
    spec = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "i"})
    job = with_credentials(trainingrun.job("r", "t2", spec, "http://mlflow:5000"), secret)
    return job["spec"]["template"]["spec"]["containers"][0].get("envFrom", [])


def test_a_pod_of_t2_reads_t2s_secret_and_never_the_operators():
    ctx = context(namespace(**{MLFLOW_CREDENTIALS: "t2-mlflow"}), multi_tenant=True)
    assert pod_env_from(mlflowcreds.of_pods(ctx)) == [{"secretRef": {"name": "t2-mlflow", "optional": True}}]


def test_a_pod_of_an_unnamed_namespace_in_multi_tenant_mode_reads_no_secret():
    assert pod_env_from(mlflowcreds.of_pods(context(namespace(), multi_tenant=True))) == []
    assert pod_env_from(mlflowcreds.of_pods(context(None, multi_tenant=True))) == []


def test_the_missing_credentials_message_names_the_annotation_and_the_fix():
    text = mlflowcreds.missing("t2")
    assert MLFLOW_CREDENTIALS in text and "t2" in text and "MLFLOW_TRACKING_USERNAME" in text


def test_mlflows_403_is_shown_naming_the_field_and_the_fix():
    with pytest.raises(MlflowError) as refused, mlflowcreds.refusals_named("spec.source.mlflowRun.runId"):
        raise MlflowError(
            "MLflow GET runs/get: refused (check MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD)",
            status=403,
            error_code="PERMISSION_DENIED",
        )
    text = str(refused.value)
    assert "MLflow GET runs/get: refused; name a source" in text and "check MLFLOW" not in text
    assert text.startswith("spec.source.mlflowRun.runId: MLflow refused Slipway's MLflow identity")
    assert "grants Slipway's MLflow user READ" in text and text.endswith("[PERMISSION_DENIED] (HTTP 403)")
    assert refused.value.status == 403


@pytest.mark.parametrize("status", [401, 404, 500, None])
def test_other_mlflow_failures_pass_unchanged(status: int | None):
    error = MlflowError("MLflow GET runs/get: refused", status=status)
    with pytest.raises(MlflowError) as raised, mlflowcreds.refusals_named("spec.source.uri"):
        raise error
    assert raised.value is error


def failed_state() -> states.ArtifactState:
    return states.step_failed("validate", "the validate Job v failed (BackoffLimitExceeded: ); see its pods' logs")


def test_a_failed_workload_of_a_namespace_without_credentials_says_what_is_missing():
    state = mlflowcreds.noted(context(namespace(), multi_tenant=True), failed_state())
    stalled = next(c for c in state.conditions if c.type == "Stalled")
    assert stalled.message.endswith(mlflowcreds.missing("t2")) and stalled.message.startswith("the validate Job")
    assert next(c for c in state.conditions if c.type == "Ready").message == stalled.message


@pytest.mark.parametrize(("annotations", "multi_tenant"), [({MLFLOW_CREDENTIALS: "t2-mlflow"}, True), ({}, False)])
def test_no_note_where_the_pods_had_credentials_to_use(annotations: dict[str, str], multi_tenant: bool):
    state = failed_state()
    assert mlflowcreds.noted(context(namespace(**annotations), multi_tenant), state) is state


def test_no_note_before_a_workload_failed_or_for_a_failure_no_pod_caused():
    ctx = context(namespace(), multi_tenant=True)
    running = states.ArtifactState("Validating", [Cond("Stalled", "False", "Validating", "validating")])
    assert mlflowcreds.noted(ctx, running) is running
    sizing = states.ArtifactState("Failed", [Cond("Stalled", "True", "InsufficientGPUMemory", "no node fits")])
    assert mlflowcreds.noted(ctx, sizing).conditions == sizing.conditions
