"""pytest fixtures for tests against the local cluster.

Load with ``pytest_plugins = ["localkube.pytest_plugin"]``.

- ``cluster`` (session): a :class:`~localkube.state.ClusterInfo` with
  ``kubeconfig``, ``apiserver_url``, ``mlflow_url``, ``prometheus_url`` and
  ``directory``. Reuses the cluster of ``make cluster-up`` (``.cluster/``, or
  ``$LOCALKUBE_DIR``) if it is healthy and has an API audit log (see
  :mod:`localkube.audit`); otherwise starts one for the session in a temporary
  directory (or ``$LOCALKUBE_TEST_DIR``) and stops it at the end.
- ``kube_api`` (session): a ``kubernetes.client.ApiClient`` for the admin.
- ``namespace`` (function): a fresh namespace whose ``default`` service account
  exists; deleted after the test.
"""

from __future__ import annotations

import os
import re
import secrets
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.cluster import ClusterConfig, down, up
from localkube.kube import api_client
from localkube.state import DEFAULT_DIR, ClusterInfo
from localkube.wait import wait_for


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    """The local cluster for this test session."""
    running = ClusterInfo.load(DEFAULT_DIR)
    reason = "no cluster is recorded there"
    if running is not None:
        reason = running.unhealthy_reason()
        if reason is None and running.audit_log is None:
            # Started by a launcher before the audit log: tests counting requests (localkube.audit) need it.
            reason = "it has no API audit log (started by an older localkube; restart it)"
        if reason is None:
            yield running
            return
        if not running.stopped and not os.environ.get("LOCALKUBE_REQUIRE_RUNNING"):
            warnings.warn(f"not reusing the cluster in {DEFAULT_DIR}: {reason}; starting one", stacklevel=1)
    if os.environ.get("LOCALKUBE_REQUIRE_RUNNING"):
        # Set by tests/suite.py: every worker uses the one cluster the suite started, never its own.
        pytest.fail(f"the local cluster in {DEFAULT_DIR} cannot be used: {reason}", pytrace=False)
    env_dir = os.environ.get("LOCALKUBE_TEST_DIR")
    directory = Path(env_dir).resolve() if env_dir else tmp_path_factory.mktemp("localkube")
    try:
        info = up(ClusterConfig(directory=directory))
    except FileNotFoundError as e:
        pytest.fail(f"cannot start the local cluster: {e}", pytrace=False)
    try:
        yield info
    finally:
        down(directory)


@pytest.fixture(scope="session")
def kube_api(cluster: ClusterInfo) -> Iterator[client.ApiClient]:
    """An ApiClient authenticated as the cluster admin."""
    api = api_client(cluster.kubeconfig)
    yield api
    api.close()


def _namespace_name(node_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(kube_api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (its default service account ready); deleted afterwards."""
    core = client.CoreV1Api(kube_api)
    name = _namespace_name(request.node.name)
    meta = client.V1ObjectMeta(name=name, labels={"localkube.slipway.dev/test": "true"})
    core.create_namespace(client.V1Namespace(metadata=meta))
    wait_for(
        lambda: core.read_namespaced_service_account("default", name),
        30,
        f"the default service account of {name}",
    )
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:  # a test may delete its namespace itself
            raise
