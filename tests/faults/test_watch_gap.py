"""A watch broken for 60 s, and the API server no longer able to resume it: the operator is cut off
from its API server (a TCP proxy that blackholes) while a child of a served InferenceDeployment is
deleted and another InferenceDeployment is deleted and made again under the same name; then etcd's
history is compacted, as the API server itself does every 5 minutes. The operator talks to an API server
of its own on the cluster's etcd, started with ``--watch-cache=false``: the shared one's watch cache
outlasted 1,200 changes of each kind in a 60 s gap and always resumed the watches, where a busy real
cluster answers 410 Gone. kopf notices its dead streams (no event for 70 s), watches again from where it
was, is answered 410, and lists everything again: what vanished gets no DELETED event, and the cache
heal (``slipway.resync``, unit-tested in ``tests/unit/frame/test_resync.py``) drops it. Then: the child is made
again, the re-created object is served, and nothing of the deleted one comes back."""

from __future__ import annotations

import copy
import time

import pytest
from kubernetes import client

from faults.scenario import promoted, serving
from localkube.cluster import ExtraApiServer, compact_etcd
from localkube.faultproxy import FaultProxy, kubeconfig_through
from localkube.wait import wait_for
from slipway_testing import Versions, apply_object, custom, get_object, read_or_none, wait_status

pytestmark = pytest.mark.cluster

GAP_SECONDS = 60.0


def test_what_was_deleted_while_the_watch_was_away_is_forgotten(cluster, kube_api, namespace, operators, figures,
                                                                 mlflow, trained, tmp_path):  # fmt: skip
    apiserver = ExtraApiServer(cluster.directory, f"kube-apiserver-{namespace}", ["--watch-cache=false"])
    with apiserver:
        watch_gap(cluster, kube_api, namespace, operators, figures, mlflow, trained, tmp_path, apiserver)


def watch_gap(cluster, kube_api, namespace, operators, figures, mlflow, trained, tmp_path, apiserver) -> None:
    proxy = FaultProxy("127.0.0.1", apiserver.port).start()
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
        compacted = compact_etcd(apiserver.etcd_url)
        wait_for(lambda: time.monotonic() - cut >= GAP_SECONDS, GAP_SECONDS + 5, "the gap", interval=1)
        proxy.pass_through()
        healed = time.monotonic()
        figures.inject(f"the operator cut off from the API server for {GAP_SECONDS:g}s (a TCP proxy); meanwhile "
                       "Service digits deleted, InferenceDeployment other deleted and made again, etcd "
                       f"compacted at revision {compacted}")  # fmt: skip

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
        figures.count(relisted_and_forgotten=forgotten)
        # No DELETED event reached the operator (its watches were answered 410 and listed again): the heal
        # dropped both the deleted child and the deleted object that has a namesake now.
        assert any(f"Service {namespace}/digits (" in line for line in forgotten), forgotten
        first_uid = first["metadata"]["uid"]
        assert any(f"InferenceDeployment {namespace}/other (uid {first_uid})" in line for line in forgotten), forgotten
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
