"""Shared pytest configuration. The local cluster fixtures (cluster, kube_api, namespace) come from
the plugin localkube.pytest_plugin, loaded for tests/ and e2e/tests/ by pyproject.toml's addopts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

DEFAULT_SECONDS = 20  # a cluster test not yet in the durations file


ROOT = Path(__file__).resolve().parent.parent
GPU_SCOPE = "the node's GPUs"


TAKES_GPUS = re.compile(r"def \w+\([^)]*\bnode_gpus\b")  # a test (or fixture) with node_gpus among its parameters


def gpu_modules() -> frozenset[str]:
    """The test modules (as node ids name them) whose tests take the node's GPUs (``node_gpus``)."""
    files = [*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "e2e" / "tests").rglob("test_*.py")]
    return frozenset(str(f.relative_to(ROOT)) for f in files if TAKES_GPUS.search(f.read_text()))


def scope(nodeid: str, gpus: frozenset[str]) -> str:
    """What the shared phase hands a worker at once: a module, or every module that takes the
    node's GPUs. Those take turns on the GPUs (a file lock) whatever worker runs them; on separate
    workers each would sit idle waiting for the lock (a module's first test waited 320 s for
    another's in one run) while the other workers' queues ran out."""
    module = nodeid.split("::")[0]
    return GPU_SCOPE if module in gpus else module


@pytest.hookimpl(optionalhook=True)  # a run without xdist (-p no:xdist) knows no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """xdist's ``loadscope`` with :func:`scope` as its scope."""
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    gpus = gpu_modules()

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid, gpus)

    return Scheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With SLIPWAY_LONGEST_FIRST naming a durations file (tests/suite.py's shared phase), run the
    longest scopes (:func:`scope`) first, each scope's tests together and in their order: with
    xdist's `loadscope` distribution a scope (and its modules' fixtures) stays on one worker, and
    no long scope is left to start last."""
    source = os.environ.get("SLIPWAY_LONGEST_FIRST")
    if not source:
        return
    seconds = json.loads(Path(source).read_text())
    gpus = gpu_modules()
    scopes: dict[str, float] = {}
    for item in items:
        key = scope(item.nodeid, gpus)
        scopes[key] = scopes.get(key, 0.0) + seconds.get(item.nodeid, DEFAULT_SECONDS)
    items.sort(key=lambda item: -scopes[scope(item.nodeid, gpus)])  # stable: a scope keeps its order


@pytest.fixture(scope="session")
def slipway_crds(cluster) -> list[str]:
    """Slipway's CRDs installed from crds/ and Established."""
    from localkube.kube import Kube
    from slipway_testing import install_crds

    return install_crds(Kube(cluster.kubeconfig))


@pytest.fixture
def mlflow(request):
    """A client of the cluster's MLflow server, or of the server SLIPWAY_TEST_MLFLOW_URL names (the
    MLflow contract phase runs the MLflow tests against each supported release without a cluster)."""
    from slipway.mlflow import MlflowClient

    url = os.environ.get("SLIPWAY_TEST_MLFLOW_URL") or request.getfixturevalue("cluster").mlflow_url
    with MlflowClient(url) as client:
        yield client


# --------------------------------------------------------------------------- the operator on the local cluster


@pytest.fixture
def operator(cluster, slipway_crds, namespace, kube_api, monkeypatch):
    """A factory for the Slipway operator running in-process (kopf) against the local cluster,
    watching the test's namespace, with the cluster's MLflow and Prometheus; stopped after the test.
    The namespace enforces the restricted Pod Security Standard: a pod Slipway builds that breaks it
    is refused by the API server, and the test waiting for it fails."""
    from kubernetes import client

    from slipway_testing import OperatorProcess

    restricted = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    client.CoreV1Api(kube_api).patch_namespace(namespace, restricted)
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    running: list[OperatorProcess] = []

    def start(mlflow_url: str | None = None, kubeconfig=None, also: tuple[str, ...] = ()) -> OperatorProcess:
        for more in also:  # more namespaces it watches, restricted too
            client.CoreV1Api(kube_api).patch_namespace(more, restricted)
        op = OperatorProcess(cluster, namespace, mlflow_url, kubeconfig, also)
        op.start()
        running.append(op)
        return op

    yield start
    for op in running:
        op.stop()


@pytest.fixture
def node_gpus(cluster):
    """The local node's GPUs to this test alone: tests that fill them (preemption, costs) take turns
    across pytest-xdist workers (a file lock beside the cluster's data)."""
    import fcntl

    shared = Path(cluster.directory) / "test-fixtures"
    shared.mkdir(exist_ok=True)
    with (shared / "gpus.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def trained(cluster) -> str:
    """The run id of one trained reference model (8 steps, experiment ``shared-tests``), made once per
    cluster (a file beside the cluster's data): the first pytest-xdist worker that asks trains it,
    the others wait on the lock and read its id. Tests register versions of it under model names of their own."""
    import fcntl
    from pathlib import Path

    from slipway_testing import train_run

    shared = Path(cluster.directory) / "test-fixtures"
    shared.mkdir(exist_ok=True)
    with (shared / "trained.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        recorded = shared / "trained-run-id"  # beside the cluster's MLflow data: valid as long as it is
        if recorded.exists():
            return recorded.read_text().strip()
        run_id = train_run(cluster.mlflow_url, "shared-tests", steps=8)
        recorded.write_text(run_id)
        return run_id


def _started_once(cluster, name: str, ensure):
    """``ensure(cluster directory)`` for a component of the local cluster, once across pytest-xdist
    workers (a file lock: the first test that asks starts it, the others find it running)."""
    import fcntl
    from pathlib import Path

    shared = Path(cluster.directory) / "test-fixtures"
    shared.mkdir(exist_ok=True)
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return ensure(Path(cluster.directory))


@pytest.fixture(scope="session")
def kueue(cluster):
    """Kueue (``make kueue``) running in the local cluster, its webhooks served: started by the first
    test that asks, kept for the session (a file lock: one start across pytest-xdist workers)."""
    from localkube.batch import ensure_kueue

    return _started_once(cluster, "kueue", ensure_kueue)


KUEUE = ("kueue.x-k8s.io", "v1beta2")


@pytest.fixture
def kueue_quota(kueue, kube_api, namespace):
    """``kueue_quota(gpus)``: a ResourceFlavor and a ClusterQueue of ``gpus`` GPUs open to the test's
    namespace alone (a lower priority preempted within it), and the LocalQueue ``gpus`` in the
    namespace (``localkube.batch.gpu_quota``); returns the ClusterQueue's name.
    ``kueue_quota(gpus, serving_first=True)``: instead the cohort of README's serving-first setup,
    LocalQueues ``serving`` and ``training`` (``localkube.batch.serving_first_cohort``); returns the
    serving ClusterQueue's name. Removed after the test."""
    from kubernetes import client

    from localkube.batch import gpu_quota, serving_first_cohort

    custom = client.CustomObjectsApi(kube_api)
    made: list[tuple[str, str]] = []

    def make(gpus: int, serving_first: bool = False) -> str:
        for plural, obj in (serving_first_cohort if serving_first else gpu_quota)(namespace, gpus):
            if plural == "localqueues":
                custom.create_namespaced_custom_object(*KUEUE, namespace, plural, obj)
            else:
                custom.create_cluster_custom_object(*KUEUE, plural, obj)
                made.insert(0, (plural, obj["metadata"]["name"]))
        return f"cq-{namespace}-serving" if serving_first else f"cq-{namespace}"

    yield make
    for plural, name in made:
        try:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture(scope="session")
def keda(cluster):
    """KEDA (``make keda``) running in the local cluster, its external metrics API served (as ``kueue``)."""
    from localkube.keda import ensure_keda

    return _started_once(cluster, "keda", ensure_keda)


@pytest.fixture(scope="session")
def inference_gateway(cluster):
    """The cluster's Gateway API Inference Extension data plane (``localkube.gie``: Envoy, its translator;
    ``make gie`` for the endpoint picker), started once as ``kueue``."""
    from localkube.gie import ensure_inference_gateway

    return _started_once(cluster, "inference-gateway", ensure_inference_gateway)


@pytest.fixture(scope="session")
def jobset(cluster):
    """JobSet (``make jobset``) running in the local cluster, its webhooks served (as ``kueue``)."""
    from localkube.batch import ensure_jobset

    return _started_once(cluster, "jobset", ensure_jobset)
