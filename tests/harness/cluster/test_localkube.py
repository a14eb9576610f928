"""Acceptance tests of the local cluster (issue 3): real control plane, localkube's node agent.

Every test runs in its own namespace of the one session cluster.
"""

from __future__ import annotations

import json
import secrets
import textwrap
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.audit import AUDITED_GROUP, AuditRecord, audited_kubeconfig, requests_by, summarize
from localkube.kube import api_client
from localkube.state import ClusterInfo
from localkube.testing import (
    PYTHON,
    deployment_available,
    job_condition,
    pod_phase,
    simple_pod,
    termination_message,
)
from localkube.wait import wait_for

pytestmark = pytest.mark.cluster

POD_IP_ENV = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def job(name: str, command: list[str], backoff_limit: int = 0) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": command}],
                }
            },
        },
    }


def test_job_completes(kube_api: client.ApiClient, namespace: str) -> None:
    client.BatchV1Api(kube_api).create_namespaced_job(namespace, job("ok", ["sh", "-c", "echo hello; exit 0"]))

    job_condition(kube_api, namespace, "ok", ("Complete", "Failed"), timeout=60)

    status = client.BatchV1Api(kube_api).read_namespaced_job_status("ok", namespace).status
    assert status.succeeded == 1
    assert [c.type for c in status.conditions if c.status == "True"] == ["SuccessCriteriaMet", "Complete"]


def test_failing_job_backs_off_then_fails(kube_api: client.ApiClient, namespace: str) -> None:
    batch, core = client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    batch.create_namespaced_job(namespace, job("bad", ["sh", "-c", "echo failing >&2; exit 3"], backoff_limit=1))

    failed = job_condition(kube_api, namespace, "bad", ("Failed", "Complete"), timeout=90)

    assert failed.type == "Failed" and failed.reason == "BackoffLimitExceeded"
    pods = core.list_namespaced_pod(namespace, label_selector="job-name=bad").items
    assert len(pods) == 2
    assert all(p.status.phase == "Failed" for p in pods)
    assert [p.status.container_statuses[0].state.terminated.exit_code for p in pods] == [3, 3]
    first, second = sorted(p.metadata.creation_timestamp for p in pods)
    assert second - first >= timedelta(seconds=5), "the Job controller backs off before its retry"


def test_deployment_available_with_two_ready_endpoints(kube_api: client.ApiClient, namespace: str) -> None:
    labels = {"app": "web"}
    container = {
        "name": "web",
        "image": "python:3.11",
        "command": [PYTHON, "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
        "env": POD_IP_ENV,
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    client.AppsV1Api(kube_api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            },
        },
    )
    client.CoreV1Api(kube_api).create_namespaced_service(
        namespace, {"metadata": {"name": "web"}, "spec": {"selector": labels, "ports": [{"port": 8080}]}}
    )

    deployment_available(kube_api, namespace, "web", timeout=60)

    discovery = client.DiscoveryV1Api(kube_api)

    def ready_addresses() -> list[str]:
        slices = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=web"
        ).items
        eps = [e for s in slices for e in (s.endpoints or []) if e.conditions and e.conditions.ready]
        addresses = [a for e in eps for a in e.addresses]
        return addresses if len(addresses) == 2 else []

    addresses = wait_for(ready_addresses, 30, "an EndpointSlice with 2 ready endpoints")
    assert len(set(addresses)) == 2
    assert all(a.startswith("127.") and a != "127.0.0.1" for a in addresses)
    for address in addresses:
        assert httpx.get(f"http://{address}:8080/", timeout=5).status_code == 200


def test_pod_asking_for_more_gpus_than_any_node_stays_unschedulable(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    node = core.read_node("slipway-local")
    assert node.status.capacity["nvidia.com/gpu"] == "4"
    assert node.metadata.labels["nvidia.com/gpu.memory"] == "81920"
    pod = simple_pod("greedy", ["sleep", "60"], resources={"limits": {"nvidia.com/gpu": "5"}})
    core.create_namespaced_pod(namespace, pod)

    def unschedulable() -> object:
        p = core.read_namespaced_pod("greedy", namespace)
        conds = [c for c in (p.status.conditions or []) if c.type == "PodScheduled"]
        return conds and conds[0].status == "False" and conds[0].reason == "Unschedulable" and p

    p = wait_for(unschedulable, 30, "PodScheduled=False/Unschedulable")
    assert p.status.phase == "Pending"
    assert "nvidia.com/gpu" in p.status.conditions[0].message
    assert not p.spec.node_name


def test_file_written_to_a_claim_is_read_by_the_next_pod(kube_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "checkpoints"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    volume = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}
    mount = [{"name": "ckpt", "mountPath": "/checkpoints"}]
    writer = simple_pod("writer", ["sh", "-c", "echo step-42 > /checkpoints/latest"], volumeMounts=mount)
    writer["spec"]["volumes"] = [volume]
    core.create_namespaced_pod(namespace, writer)
    assert pod_phase(kube_api, namespace, "writer", ("Succeeded", "Failed")).status.phase == "Succeeded"
    core.delete_namespaced_pod("writer", namespace)

    reader = simple_pod("reader", ["sh", "-c", "cat /checkpoints/latest > /dev/termination-log"], volumeMounts=mount)
    reader["spec"]["volumes"] = [volume]
    core.create_namespaced_pod(namespace, reader)
    pod = pod_phase(kube_api, namespace, "reader", ("Succeeded", "Failed"))

    assert pod.status.phase == "Succeeded"
    assert termination_message(pod) == "step-42\n"
    claim = core.read_namespaced_persistent_volume_claim("checkpoints", namespace)
    assert claim.status.phase == "Bound" and claim.spec.storage_class_name == "local"


def test_deleting_an_owner_garbage_collects_its_children(kube_api: client.ApiClient, namespace: str) -> None:
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    labels = {"app": "owned"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "owner"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"]}],
                    },
                },
            },
        },
    )
    deployment_available(kube_api, namespace, "owner")
    assert len(apps.list_namespaced_replica_set(namespace).items) == 1

    apps.delete_namespaced_deployment("owner", namespace, propagation_policy="Background")

    wait_for(
        lambda: (
            not apps.list_namespaced_replica_set(namespace).items
            and not core.list_namespaced_pod(namespace, label_selector="app=owned").items
        ),
        60,
        "the garbage collector to delete the ReplicaSet and its pods",
    )


IN_CLUSTER_SCRIPT = textwrap.dedent(
    """
    from kubernetes import client, config
    config.load_incluster_config()
    core = client.CoreV1Api()
    ns = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
    names = sorted(c.metadata.name for c in core.list_namespaced_config_map(ns).items)
    try:
        core.list_namespaced_secret(ns)
        secrets = "allowed"
    except client.ApiException as e:
        secrets = str(e.status)
    message = f"configmaps={','.join(names)} secrets={secrets}"
    print(message)
    open("/dev/termination-log", "w").write(message)
    """
)


def test_in_cluster_config_gets_what_its_role_allows_only(kube_api: client.ApiClient, namespace: str) -> None:
    core, rbac = client.CoreV1Api(kube_api), client.RbacAuthorizationV1Api(kube_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"a": "1"}})
    pod = simple_pod("in-cluster", [PYTHON, "-c", IN_CLUSTER_SCRIPT])
    pod["spec"]["serviceAccountName"] = "reader"
    core.create_namespaced_pod(namespace, pod)

    done = pod_phase(kube_api, namespace, "in-cluster", ("Succeeded", "Failed"), timeout=60)

    assert done.status.phase == "Succeeded", termination_message(done)
    assert termination_message(done) == "configmaps=kube-root-ca.crt,settings secrets=403"


def test_crd_cel_rule_rejects_a_bad_object_with_its_message(kube_api: client.ApiClient, namespace: str) -> None:
    ext, custom = client.ApiextensionsV1Api(kube_api), client.CustomObjectsApi(kube_api)
    group = f"t{secrets.token_hex(3)}.localkube.test"
    name = f"widgets.{group}"
    ext.create_custom_resource_definition(
        {
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "properties": {"replicas": {"type": "integer"}},
                                        "x-kubernetes-validations": [
                                            {"rule": "self.replicas <= 10", "message": "replicas must be at most 10"}
                                        ],
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }
    )
    try:

        def established() -> bool:
            crd = ext.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        wait_for(established, 30, f"CRD {name} Established")

        def widget(n: str, replicas: int) -> dict[str, object]:
            return {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": n},
                "spec": {"replicas": replicas},
            }

        wait_for(
            lambda: custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", widget("good", 3)),
            15,
            "the new resource to be served",
        )
        with pytest.raises(ApiException) as err:
            custom.create_namespaced_custom_object(group, "v1", namespace, "widgets", widget("bad", 11))
        assert err.value.status == 422
        assert "replicas must be at most 10" in err.value.body
    finally:
        ext.delete_custom_resource_definition(name)


METRICS_SCRIPT = textwrap.dedent(
    """
    import os, threading
    from prometheus_client import Gauge, start_http_server
    Gauge("localkube_test_gauge", "a value for the scrape test").set(42)
    start_http_server(9100, addr=os.environ["POD_IP"])
    threading.Event().wait()
    """
)


def test_prometheus_scrapes_a_pod_and_answers_promql(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str
) -> None:
    if not cluster.prometheus_url:
        pytest.fail("this cluster was started without Prometheus: start it without --no-prometheus")
    pod = simple_pod("exporter", [PYTHON, "-c", METRICS_SCRIPT], restart_policy="Always", env=POD_IP_ENV)
    pod["metadata"]["labels"] = {"app": "metrics-demo"}
    pod["metadata"]["annotations"] = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
        "prometheus.io/path": "/metrics",
    }
    client.CoreV1Api(kube_api).create_namespaced_pod(namespace, pod)
    query = f'localkube_test_gauge{{namespace="{namespace}"}}'

    def scraped() -> list[dict[str, object]]:
        r = httpx.get(f"{cluster.prometheus_url}/api/v1/query", params={"query": query}, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]  # type: ignore[no-any-return]

    result = wait_for(scraped, 60, f"Prometheus to return {query}", interval=1)

    assert len(result) == 1
    labels, (_, value) = result[0]["metric"], result[0]["value"]  # type: ignore[misc]
    assert value == "42"
    assert labels["app"] == "metrics-demo" and labels["pod"] == "exporter"  # type: ignore[index]


def test_mlflow_answers_health(cluster: ClusterInfo) -> None:
    if not cluster.mlflow_url:
        pytest.fail("this cluster was started without MLflow: start it without --no-mlflow")
    r = httpx.get(f"{cluster.mlflow_url}/health", timeout=5)
    assert r.status_code == 200
    assert r.text.strip() == "OK"


def test_audit_log_counts_the_requests_of_an_audited_identity_only(
    cluster: ClusterInfo, kube_api: client.ApiClient, namespace: str
) -> None:
    admin = client.CoreV1Api(kube_api)
    admin.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"a": "1"}})
    since = datetime.now(UTC)
    admin.read_namespaced_config_map("settings", namespace)  # the admin is not audited
    user = "localkube-test-audited"
    audited = api_client(audited_kubeconfig(cluster, user))
    try:
        core = client.CoreV1Api(audited)
        core.list_namespaced_pod(namespace)
        core.read_namespaced_config_map("settings", namespace)
        # A watch still open counts from the moment it starts.
        watch = core.list_namespaced_config_map(namespace, watch=True, timeout_seconds=60, _preload_content=False)
        try:

            def three_requests() -> list[AuditRecord]:
                found = requests_by(cluster, user, since)
                return found if len(found) >= 3 else []

            records = wait_for(three_requests, 10, f"3 requests of {user} in {cluster.audit_log}", interval=0.1)
        finally:
            watch.close()  # type: ignore[attr-defined]  # _preload_content=False: the raw HTTP response
    finally:
        audited.close()

    assert summarize(records) == {"get configmaps": 1, "list pods": 1, "watch configmaps": 1}
    assert [(r.verb, r.resource, r.subresource, r.namespace, r.name, r.code) for r in records] == [
        ("list", "pods", None, namespace, None, 200),
        ("get", "configmaps", None, namespace, "settings", 200),
        ("watch", "configmaps", None, namespace, None, 200),
    ]
    assert records[1].uri == f"/api/v1/namespaces/{namespace}/configmaps/settings"
    assert requests_by(cluster, user, since, until=records[1].time) == records[:1]
    assert requests_by(cluster, "localkube-admin", since) == []
    assert cluster.audit_log is not None
    events = [json.loads(line) for line in cluster.audit_log.read_text().splitlines() if line.strip()]
    assert all(AUDITED_GROUP in e["user"].get("groups", []) for e in events), "only the audited group is logged"
