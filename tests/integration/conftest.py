"""Shared fixtures of the integration tests: a real MLflow tracking server for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
