"""Shared fixtures of the integration tests: a real MLflow tracking server for the session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# MLflow sends no events: in tests the operator looks at aliases and training progress every 2 s.
os.environ.setdefault("SLIPWAY_ALIAS_POLL_SECONDS", "2")
os.environ.setdefault("SLIPWAY_PROGRESS_POLL_SECONDS", "2")

from localkube.mlflow_server import MlflowServer, start_mlflow
from slipway.mlflow import MlflowClient


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """``mlflow server`` with SQLite and proxied artifacts, started once per test session."""
    server = start_mlflow(tmp_path_factory.mktemp("mlflow"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mlflow_client(mlflow_server: MlflowServer) -> Iterator[MlflowClient]:
    with MlflowClient(mlflow_server.url) as client:
        yield client


# --------------------------------------------------------------------------- the operator on the local cluster


@pytest.fixture
def operator(cluster, slipway_crds, namespace, monkeypatch):
    """A factory for the Slipway operator running in-process (kopf) against the local cluster,
    watching the test's namespace, with the cluster's MLflow and Prometheus; stopped after the test."""
    from slipway_testing import OperatorProcess

    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    running: list[OperatorProcess] = []

    def start(mlflow_url: str | None = None, kubeconfig=None) -> OperatorProcess:
        op = OperatorProcess(cluster, namespace, mlflow_url, kubeconfig)
        op.start()
        running.append(op)
        return op

    yield start
    for op in running:
        op.stop()
