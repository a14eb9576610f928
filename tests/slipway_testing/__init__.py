"""Helpers for the operator's tests, by concern: the cluster (CRDs, objects, waiting on status), the
operator's processes, training, InferenceDeployments, the tenant of tests/security, Prometheus' parser.
Every name is re-exported here: tests import them from ``slipway_testing``."""

from __future__ import annotations

from localkube.kube import condition
from slipway_testing.cluster import (
    GROUP,
    ROOT,
    VERSION,
    WRITES,
    apply_object,
    assert_writes_only_in,
    custom,
    events_for,
    get_object,
    install_crds,
    install_priority_classes,
    patch_object,
    phase_in,
    read_or_none,
    report,
    wait_status,
)
from slipway_testing.inference import (
    ERRORS,
    IMAGE,
    PREEMPTING,
    SERVE,
    Versions,
    deployment,
    inference_deployment,
    patch_spec,
    pods_of,
    serving,
    status_of,
    wait_phase,
)
from slipway_testing.processes import OperatorProcess, OperatorReplica, TcpRelay, free_port
from slipway_testing.promql import PROMQL_ORACLE, promql_escapes, promql_parse, require_promql_oracle
from slipway_testing.tenants import create_as, stalled_with
from slipway_testing.training import TRAIN, model_artifact, train_run, training_run

__all__ = [
    "ERRORS",
    "GROUP",
    "IMAGE",
    "OperatorProcess",
    "OperatorReplica",
    "PREEMPTING",
    "PROMQL_ORACLE",
    "ROOT",
    "SERVE",
    "TRAIN",
    "TcpRelay",
    "VERSION",
    "Versions",
    "WRITES",
    "apply_object",
    "assert_writes_only_in",
    "condition",
    "create_as",
    "custom",
    "deployment",
    "events_for",
    "free_port",
    "get_object",
    "inference_deployment",
    "install_crds",
    "install_priority_classes",
    "model_artifact",
    "patch_object",
    "patch_spec",
    "phase_in",
    "pods_of",
    "promql_escapes",
    "promql_parse",
    "read_or_none",
    "report",
    "require_promql_oracle",
    "serving",
    "stalled_with",
    "status_of",
    "train_run",
    "training_run",
    "wait_phase",
    "wait_status",
]
