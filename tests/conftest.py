"""Shared pytest configuration. The local cluster fixtures (cluster, kube_api, namespace) come from
the plugin localkube.pytest_plugin, loaded for tests/ and e2e/tests/ by pyproject.toml's addopts."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def slipway_crds(cluster) -> list[str]:
    """Slipway's CRDs installed from crds/ and Established."""
    from localkube.kube import Kube
    from slipway_testing import install_crds

    return install_crds(Kube(cluster.kubeconfig))


@pytest.fixture
def mlflow(cluster):
    """A client of the cluster's MLflow server."""
    from slipway.mlflow import MlflowClient

    with MlflowClient(cluster.mlflow_url) as client:
        yield client
