"""TLS to MLflow reaches Slipway's pods by reference and in MLflow's own variables: the CA bundle from a
ConfigMap and the client certificate from a Secret of the pod's namespace, mounted (optional) into the
containers that talk to MLflow, never their content; the insecure switch as MLFLOW_TRACKING_INSECURE_TLS.
For a serving fleet it is no part of a revision: turning TLS on or off restarts no pod."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from slipway import children
from slipway.artifact import build as ma
from slipway.inference import build as idep
from slipway.inference.model import InferenceDeploymentSpec
from slipway.inference.operatorfields import keeping_operator_fields
from slipway.podspec import PodTls, pod_tls_of, with_credentials, with_mlflow_tls
from slipway.training import build as tr
from slipway.training.model import TrainingRunSpec

TLS = PodTls("corp-ca", "mlflow-client")
CA_PATH = "/etc/slipway-tls/mlflow-ca/ca.crt"
CERT_PATH = "/etc/slipway-tls/mlflow-client/tls-combined.pem"
CA_VOLUME = {
    "name": "slipway-mlflow-ca",
    "configMap": {"name": "corp-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}], "optional": True},
}
CERT_VOLUME = {
    "name": "slipway-mlflow-client-cert",
    "secret": {
        "secretName": "mlflow-client",
        "items": [{"key": "tls-combined.pem", "path": "tls-combined.pem"}],
        "optional": True,
    },
}
SERVING = InferenceDeploymentSpec.model_validate(
    {"model": {"name": "m", "alias": "a"}, "image": "img:1", "modelLoad": {}}
)


def manifests(env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """One manifest of each kind of pod that talks to MLflow, as its builder makes it."""
    entries = [{"name": k, "value": v} for k, v in (env or {}).items()]
    training = TrainingRunSpec.model_validate({"model": {"name": "m"}, "image": "img:1", "env": entries})
    step = {"image": "img:1", "command": None, "args": None, "env": {"MLFLOW_TRACKING_URI": "https://mlflow.corp"}}
    return {
        "training": tr.job("run", "ns", training, "https://mlflow.corp"),
        "training-jobset": tr.jobset("run", "ns", training.model_copy(update={"nodes": 2}), "https://mlflow.corp"),
        "quantize": ma.step_job("art", "ns", "quantize", **step, extra_env=training.env),
        "serving": idep.deployment("d", "ns", SERVING, "stable", "1", "models:/m/1", "https://mlflow.corp", None),
    }


def pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    if manifest["kind"] == "JobSet":
        return [r["template"]["spec"]["template"]["spec"] for r in manifest["spec"]["replicatedJobs"]]
    return [manifest["spec"]["template"]["spec"]]


def variables(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", []) if e["name"].startswith("MLFLOW_TRACKING")}


@pytest.mark.parametrize("kind", ["training", "training-jobset", "quantize", "serving"])
def test_the_ca_bundle_and_client_certificate_are_mounted_by_reference(kind: str) -> None:
    manifest = with_mlflow_tls(manifests()[kind], TLS)
    for pod in pod_specs(manifest):
        assert [v for v in pod["volumes"] if v["name"].startswith("slipway-mlflow-")] == [CA_VOLUME, CERT_VOLUME]
        talking = pod.get("initContainers") or pod["containers"]  # a fetch-model init container, else the main one
        for container in talking:
            assert variables(container) == {
                "MLFLOW_TRACKING_URI": "https://mlflow.corp",
                "MLFLOW_TRACKING_SERVER_CERT_PATH": CA_PATH,
                "MLFLOW_TRACKING_CLIENT_CERT_PATH": CERT_PATH,
            }
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            assert mounts["/etc/slipway-tls/mlflow-ca"] == {
                "name": "slipway-mlflow-ca",
                "mountPath": "/etc/slipway-tls/mlflow-ca",
                "readOnly": True,
            }
            assert mounts["/etc/slipway-tls/mlflow-client"]["readOnly"] is True
        if pod.get("initContainers"):  # the model server reads files: no certificate of its own
            assert "volumeMounts" not in pod["containers"][0] or not [
                m for m in pod["containers"][0]["volumeMounts"] if m["name"].startswith("slipway-mlflow-")
            ]
    assert "BEGIN" not in json.dumps(manifest)


def test_insecure_is_mlflows_switch_and_no_ca_bundle_beside_it() -> None:
    manifest = with_mlflow_tls(manifests()["training"], PodTls("corp-ca", "", insecure=True))
    (pod,) = pod_specs(manifest)
    assert variables(pod["containers"][0])["MLFLOW_TRACKING_INSECURE_TLS"] == "true"
    assert "MLFLOW_TRACKING_SERVER_CERT_PATH" not in variables(pod["containers"][0])  # MLflow refuses both
    assert "volumes" not in pod


def test_nothing_set_changes_nothing_and_a_spec_setting_mlflows_tls_keeps_its_own() -> None:
    for kind, manifest in manifests().items():
        assert with_mlflow_tls(copy.deepcopy(manifest), PodTls()) == manifest, kind
    own = {"MLFLOW_TRACKING_SERVER_CERT_PATH": "/team/ca.pem"}
    (pod,) = pod_specs(with_mlflow_tls(manifests(own)["training"], TLS))
    assert variables(pod["containers"][0])["MLFLOW_TRACKING_SERVER_CERT_PATH"] == "/team/ca.pem"
    assert "MLFLOW_TRACKING_CLIENT_CERT_PATH" not in variables(pod["containers"][0])
    assert "volumeMounts" not in pod["containers"][0]


def test_the_pods_tls_is_read_back_from_a_pod_spec() -> None:
    for tls in (TLS, PodTls(insecure=True), PodTls("", "mlflow-client", insecure=True), PodTls()):
        (pod,) = pod_specs(with_mlflow_tls(manifests()["training"], tls))
        assert pod_tls_of(pod) == tls


def serving_fleet(tls: PodTls, version: str = "3", observed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stable Deployment a pass of an operator with these TLS settings wants, as the handler builds it."""
    uri = f"models:/m/{version}"
    body = idep.deployment("d", "ns", SERVING, "stable", version, uri, "https://mlflow.corp", None, "m", "img:w")
    return keeping_operator_fields(with_mlflow_tls(with_credentials(body, "creds"), tls), observed)


def created(desired: dict[str, Any]) -> dict[str, Any]:
    """``desired`` as the API server returns it: its hash, and the defaults it adds to volumes."""
    out = copy.deepcopy(desired)
    out["metadata"] |= {"uid": "child", "resourceVersion": "7"}
    owner = {"apiVersion": "slipway.dev/v1alpha1", "kind": "InferenceDeployment", "name": "d", "uid": "owner"}
    out["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    out["metadata"].setdefault("annotations", {})[children.APPLIED_HASH] = children.desired_hash(desired)
    for volume in out["spec"]["template"]["spec"].get("volumes", []):
        for source in ("configMap", "secret"):
            if source in volume:
                volume[source]["defaultMode"] = 420
    return out


@pytest.mark.parametrize(
    ("before", "after"), [(PodTls(), TLS), (TLS, PodTls()), (TLS, PodTls(insecure=True)), (TLS, TLS)]
)
def test_a_tls_setting_changed_restarts_no_serving_pod_and_reaches_the_next_revision(
    before: PodTls, after: PodTls
) -> None:
    stable = created(serving_fleet(before))
    desired = serving_fleet(after, observed=stable)
    assert children.decide(desired, stable, "owner").action == "Keep"
    assert pod_tls_of(desired["spec"]["template"]["spec"]) == before
    following = serving_fleet(after, "4", observed=stable)
    assert pod_tls_of(following["spec"]["template"]["spec"]) == after
