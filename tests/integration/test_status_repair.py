"""A status edited by hand (``kubectl edit --subresource=status``), on the local cluster: every edit
the status model would refuse (a wrong type, an unknown enum value, an item missing a required field)
is refused by the API server itself with the field named, since the CRD's schema is generated from
the model; the operator's field-by-field repair (tests/unit/status/test_status_repair.py) covers a status
written under a CRD of another version. Durable decisions written by hand, as a backup tool restores
them, are kept and acted on: a pending MLflow tag lands, lastRollback and previousStable stay."""

from __future__ import annotations

import pytest
from kubernetes import client

from localkube.wait import wait_for
from slipway.mlflow import MlflowClient
from slipway_testing import Versions, apply_object, custom, get_object, inference_deployment, status_of

pytestmark = pytest.mark.cluster

ROLLBACK = {"reason": "AnalysisFailed", "metric": "errorRate", "value": 0.4, "modelVersion": "7",
            "revision": "abc1234567", "time": "2026-12-01T10:00:00Z"}  # fmt: skip
PREVIOUS = {"revision": "0123456789", "modelVersion": "6", "uri": "models:/x/6",
            "podTemplate": {"spec": {"containers": [{"name": "server", "image": "srv:1"}]}}}  # fmt: skip


def repairs(api: client.ApiClient, namespace: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.name=digits")
    return [e.message for e in events.items if e.reason == "StatusRepaired" and e.type == "Warning"]


def write_status(api: client.CustomObjectsApi, namespace: str, status: dict) -> dict:
    """What `kubectl edit idep digits --subresource=status` sends: a merge patch of the status."""
    return api.patch_namespaced_custom_object_status(  # type: ignore[no-any-return]
        "slipway.dev", "v1alpha1", namespace, "inferencedeployments", "digits", {"status": status}
    )


def test_a_status_edited_into_garbage_keeps_its_durable_decisions(kube_api, namespace, operator, cluster, trained):
    with MlflowClient(cluster.mlflow_url) as mlflow:
        versions = Versions(mlflow, f"digits-{namespace}", trained)
        version = versions.publish()
        body = inference_deployment("digits", {"name": versions.model, "alias": "absent"}, None, image="srv:1")
        apply_object(kube_api, namespace, body)
        tag = {"action": "SetTag", "model": versions.model, "version": version, "key": "slipway.test/kept",
               "value": "yes"}  # fmt: skip
        # Every hand edit the status model would refuse is refused by the API server itself (the CRD's
        # schema is generated from the model): a wrong type, an unknown enum value, an item missing a
        # required field. What the operator repairs comes from elsewhere (a CRD of another version).
        api = custom(kube_api)
        for bad, field in (({"phase": "Exploding"}, "status.phase"), ({"observedGeneration": "four"},
                           "status.observedGeneration"), ({"canary": "gone"}, "status.canary"),
                           ({"lastRollback": {"reason": "AnalysisFailed"}}, "status.lastRollback.time"),
                           ({"pendingRegistryUpdates": [{"action": "Teleport", "model": "m", "version": "1"}]},
                            "status.pendingRegistryUpdates[0].action"),
                           ({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t"}]},
                            "status.conditions[0].reason")):  # fmt: skip
            with pytest.raises(client.ApiException) as refused:
                write_status(api, namespace, bad)
            assert refused.value.status == 422 and field in refused.value.body, (bad, refused.value.body)
        # Durable decisions written by hand (a status restored by a backup tool) are kept and acted on.
        durable = {"lastRollback": ROLLBACK, "previousStable": PREVIOUS, "pendingRegistryUpdates": [tag]}
        written = api.patch_namespaced_custom_object_status(
            "slipway.dev", "v1alpha1", namespace, "inferencedeployments", "digits", {"status": durable}
        )
        assert {k: written["status"].get(k) for k in durable} == durable
        operator()
        tags = lambda: mlflow.get_model_version(versions.model, version).tags  # noqa: E731
        wait_for(lambda: tags().get("slipway.test/kept") == "yes", 30, "the pending tag carried out")
        status = status_of(kube_api, namespace)
        assert status["lastRollback"] == ROLLBACK
        assert status["previousStable"] == PREVIOUS
        assert {c["type"] for c in status["conditions"]} >= {"Ready"}
        assert not status.get("pendingRegistryUpdates")  # written to MLflow, then done
        assert not repairs(kube_api, namespace)
        assert get_object(kube_api, namespace, "InferenceDeployment", "digits")["metadata"]["generation"] == 1
