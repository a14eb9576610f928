"""Helpers for tests on a real cluster: wait for Jobs, pods and Deployments, read pod output.

Everything waits on an observable condition with a deadline (``wait_for``).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from localkube.procs import Proc
from localkube.wait import wait_for

PYTHON = "python"  # the node agent puts the project's .venv/bin first on PATH


def job_condition(api: client.ApiClient, ns: str, name: str, kinds: tuple[str, ...], timeout: float = 60) -> Any:
    """Wait until the Job has a true condition of one of ``kinds``; return that condition."""
    batch = client.BatchV1Api(api)

    def check() -> Any:
        job = batch.read_namespaced_job_status(name, ns)
        for c in (job.status and job.status.conditions) or []:
            if c.type in kinds and c.status == "True":
                return c
        return None

    return wait_for(check, timeout, f"job {ns}/{name} to be {'/'.join(kinds)}")


def pod_phase(api: client.ApiClient, ns: str, name: str, phases: tuple[str, ...], timeout: float = 60) -> Any:
    """Wait until the pod is in one of ``phases``; return the pod."""
    core = client.CoreV1Api(api)

    def check() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status and pod.status.phase in phases else None

    return wait_for(check, timeout, f"pod {ns}/{name} to be {'/'.join(phases)}")


def pod_gone(api: client.ApiClient, ns: str, name: str, timeout: float = 60) -> None:
    """Wait until the pod no longer exists."""
    core = client.CoreV1Api(api)

    def check() -> bool:
        try:
            core.read_namespaced_pod(name, ns)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(check, timeout, f"pod {ns}/{name} to be deleted")


def termination_message(pod: Any) -> str:
    """The message the pod's first container left in its termination-message file."""
    state = pod.status.container_statuses[0].state
    return (state.terminated.message or "") if state.terminated else ""


def deployment_available(api: client.ApiClient, ns: str, name: str, timeout: float = 60) -> Any:
    """Wait until the Deployment's Available condition is true and all replicas are ready."""
    apps = client.AppsV1Api(api)

    def check() -> Any:
        d = apps.read_namespaced_deployment_status(name, ns)
        if d.status is None or d.spec is None:
            return None
        conds = {c.type: c.status for c in (d.status.conditions or [])}
        ready = d.status.ready_replicas or 0
        return d if conds.get("Available") == "True" and ready == d.spec.replicas else None

    return wait_for(check, timeout, f"deployment {ns}/{name} to be Available")


def simple_pod(
    name: str,
    command: list[str],
    *,
    restart_policy: str = "Never",
    image: str = "localkube/none",
    **container: Any,
) -> dict[str, Any]:
    """A one-container pod manifest (as a dict)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": image, "command": command, **container}],
        },
    }


def kill_pod_process(directory: Path, namespace: str, pod: str, sig: signal.Signals = signal.SIGKILL) -> int:
    """Signal the process group of a running pod's container, as a crash or the OOM killer would:
    the node agent sees it exit and applies the pod's restart policy. Returns the pid signalled."""
    for record in sorted(directory.glob("nodes/*/processes/*.json")):
        try:
            doc = json.loads(record.read_text())
        except (OSError, ValueError):
            continue  # being rewritten or removed as we look
        proc = Proc.from_dict(doc["process"])
        if doc.get("pod") == f"{namespace}/{pod}" and proc.alive():
            os.killpg(proc.pid, sig)
            return proc.pid
    raise LookupError(f"no running process of pod {namespace}/{pod} under {directory / 'nodes'}")


def wait_controllers_serve(api: client.ApiClient, timeout: float = 150) -> float:
    """After the API server was away, wait until the controller manager and the scheduler serve again:
    their watches come back on client-go's backoff (up to a minute after a long outage). A probe
    namespace gets its default service account and a probe pod is bound to a node; the namespace is
    then deleted. Returns the seconds waited, so the next test starts on a whole cluster."""
    core = client.CoreV1Api(api)
    start = time.monotonic()
    name = f"t-controllers-probe-{secrets.token_hex(3)}"
    meta = client.V1ObjectMeta(name=name, labels={"localkube.slipway.dev/test": "true"})
    core.create_namespace(client.V1Namespace(metadata=meta))
    try:
        remaining = lambda: max(1.0, timeout - (time.monotonic() - start))  # noqa: E731
        wait_for(lambda: core.read_namespaced_service_account("default", name), remaining(),
                 f"the controller manager to make the default service account of {name}")  # fmt: skip
        pod = simple_pod("probe", [PYTHON, "-c", "pass"])
        core.create_namespaced_pod(name, pod)
        wait_for(lambda: core.read_namespaced_pod("probe", name).spec.node_name, remaining(),
                 f"the scheduler to bind pod {name}/probe")  # fmt: skip
    finally:
        core.delete_namespace(name, propagation_policy="Background")
    return time.monotonic() - start
