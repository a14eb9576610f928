"""A watch broken for 60 s: the operator is cut off from the API server (a TCP proxy that blackholes)
while a child of a served InferenceDeployment is deleted and another InferenceDeployment is deleted and
made again under the same name. kopf notices its dead streams (no bookmark for 70 s) and watches again:
from where it was if the API server still holds the gap's events, else after listing everything again,
when what vanished gets no DELETED event and the cache heal (``slipway.resync``, unit-tested in
``tests/unit/test_resync.py``) drops it. On this cluster the API server held the events (its watch cache
outlasted 1,200 changes of each kind in the gap); the figures say which happened. Either way: the child
is made again, the re-created object is served, and nothing of the deleted one comes back."""

from __future__ import annotations

import copy
import time

import pytest
from kubernetes import client

from faults.scenario import promoted, serving
from integration.test_inferencedeployment import Versions
from localkube.faultproxy import FaultProxy, kubeconfig_through
from localkube.wait import wait_for
from slipway_testing import apply_object, custom, get_object, read_or_none, wait_status

pytestmark = pytest.mark.cluster

GAP_SECONDS = 60.0


def test_what_was_deleted_while_the_watch_was_away_is_forgotten(cluster, kube_api, namespace, operators, figures,
                                                                 mlflow, trained, tmp_path):  # fmt: skip
    host, port = cluster.apiserver_url.split("://", 1)[1].rsplit(":", 1)
    proxy = FaultProxy(host, int(port)).start()
    try:
        through = kubeconfig_through(cluster.kubeconfig, proxy, tmp_path / "through.kubeconfig")
        replica = operators(standalone=True, kubeconfig=through)
        versions = Versions(mlflow, f"digits-{namespace}", trained)
        v1 = versions.publish()
        body = serving(versions.model)
        apply_object(kube_api, namespace, body)
        other = copy.deepcopy(body)
        other["metadata"] = {"name": "other"}
        first = apply_object(kube_api, namespace, other)
        for name in ("digits", "other"):
            wait_status(kube_api, namespace, "InferenceDeployment", name, promoted(v1), 180, f"{name} serving {v1}")
        core = client.CoreV1Api(kube_api)

        proxy.blackhole()
        cut = time.monotonic()
        core.delete_namespaced_service("digits", namespace)
        custom(kube_api).delete_namespaced_custom_object("slipway.dev", "v1alpha1", namespace, "inferencedeployments",
                                                         "other")  # fmt: skip
        wait_for(lambda: read_or_none(get_object, kube_api, namespace, "InferenceDeployment", "other") is None, 30,
                 "other deleted")  # fmt: skip
        second = apply_object(kube_api, namespace, other)  # the same name, a new object
        wait_for(lambda: time.monotonic() - cut >= GAP_SECONDS, GAP_SECONDS + 5, "the gap", interval=1)
        proxy.pass_through()
        healed = time.monotonic()
        figures.inject(f"the operator cut off from the API server for {GAP_SECONDS:g}s (a TCP proxy); meanwhile "
                       "Service digits deleted, InferenceDeployment other deleted and made again")  # fmt: skip

        wait_for(lambda: read_or_none(core.read_namespaced_service, "digits", namespace), 180,
                 "Service digits made again")  # fmt: skip
        service_back = time.monotonic() - healed
        again = wait_status(kube_api, namespace, "InferenceDeployment", "other", promoted(v1), 180,
                            "the re-created other serving")  # fmt: skip
        served = time.monotonic() - healed
        figures.took("back to the Service made again", service_back)
        figures.took("back to the re-created object served", served)
        forgotten = [line.split("cache heal: ", 1)[1] for line in replica.log().splitlines() if "forgotten" in line
                     and "cache heal: " in line]  # fmt: skip
        # Whether the API server still held the gap's events (kopf resumed its watches and got the DELETED
        # events) or answered 410 (kopf listed again, and the heal dropped what vanished): the figures say.
        figures.count(relisted_and_forgotten=forgotten or "none: the watches resumed with the gap's events")
        assert again["metadata"]["uid"] == second["metadata"]["uid"] != first["metadata"]["uid"]
        # Every child of "other" belongs to the new object (made just after its first status, which is on
        # record first): nothing of the deleted one was brought back.
        apps = client.AppsV1Api(kube_api)

        def owners() -> set[str]:
            return {ref.uid for d in apps.list_namespaced_deployment(namespace).items
                    for ref in d.metadata.owner_references or [] if ref.name == "other"}  # fmt: skip

        wait_for(lambda: owners() == {second["metadata"]["uid"]}, 30, "the new other's Deployments, and only them")
        assert get_object(kube_api, namespace, "InferenceDeployment", "digits")["status"]["phase"] == "Promoted"
    finally:
        proxy.close()
