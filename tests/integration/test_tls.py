"""MLflow and Prometheus behind TLS-terminating proxies with a CA made in the test, on the local cluster.

With the CA bundle and client certificates, the operator and the pods it makes (training, the
artifact's validation) work through a proxy that requires a client certificate: the operator with
its own, the pods with their namespace's, mounted from a ConfigMap and a Secret. Without the bundle,
or without a client certificate, the TrainingRun says so, naming the setting to set. Insecure works,
with a warning. The operator's Prometheus client, the same four ways."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from slipway.config import OperatorConfig
from slipway.prometheus import PrometheusClient, PrometheusUnavailable
from slipway_testing import apply_object, condition, get_object, report, training_run, wait_status
from slipway_testing.tlskit import Pki, TlsProxy, make_pki

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def mlflow_proxy(cluster, pki: Pki) -> Iterator[TlsProxy]:
    """The cluster's MLflow behind TLS, a client certificate required."""
    with TlsProxy(cluster.mlflow_url, pki, require_client_cert=True) as proxy:
        yield proxy


def shown(title: str, facts: dict[str, Any]) -> None:
    report(f"{title}: {json.dumps(facts, indent=2, default=str)}")


def settings(monkeypatch: pytest.MonkeyPatch, **variables: object) -> None:
    """The operator's variables SLIPWAY_<NAME> for each name=value (None: unset)."""
    for name, value in variables.items():
        if value is None:
            monkeypatch.delenv(f"SLIPWAY_{name}", raising=False)
        else:
            monkeypatch.setenv(f"SLIPWAY_{name}", str(value))


def namespace_tls(kube_api: client.ApiClient, namespace: str, pki: Pki) -> None:
    """The CA bundle and the pods' client certificate, as a platform team provides them in a namespace."""
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "corp-ca"}, "data": {"ca.crt": pki.ca.read_text()}}
    )
    secret = {"metadata": {"name": "mlflow-client"}, "stringData": {"tls-combined.pem": pki.pods.read_text()}}
    core.create_namespaced_secret(namespace, secret)


def pod_template(kube_api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    (job,) = (
        client.BatchV1Api(kube_api)
        .list_namespaced_job(namespace, label_selector=f"slipway.dev/trainingrun={name}")
        .items
    )
    return kube_api.sanitize_for_serialization(job.spec.template.spec)  # type: ignore[no-any-return]


def message_naming(setting: str):
    """A predicate: the TrainingRun's Ready condition is False with a message naming ``setting``."""
    return lambda obj: (
        setting in condition(obj, "Ready").get("message", "") and condition(obj, "Ready")["status"] == "False"
    )


def test_with_the_ca_bundle_and_client_certificates_the_operator_and_its_pods_work_through_tls(
    kube_api, namespace, operator, pki, mlflow_proxy, monkeypatch
):
    namespace_tls(kube_api, namespace, pki)
    settings(
        monkeypatch,
        MLFLOW_CA_BUNDLE=pki.ca,
        MLFLOW_CLIENT_CERT=pki.operator.cert,
        MLFLOW_CLIENT_KEY=pki.operator.key,
        MLFLOW_CA_CONFIGMAP="corp-ca",
        MLFLOW_CLIENT_CERT_SECRET="mlflow-client",
    )
    operator(mlflow_url=mlflow_proxy.url)
    body = training_run("tls", artifact={"quantization": {"method": "none"}})
    apply_object(kube_api, namespace, body)
    ready = wait_status(
        kube_api,
        namespace,
        "TrainingRun",
        "tls",
        lambda o: condition(o, "Ready").get("status") == "True",
        240,
        "Ready through TLS",
    )
    assert get_object(kube_api, namespace, "ModelArtifact", "tls")["status"]["phase"] == "Validated"
    pod = pod_template(kube_api, namespace, "tls")
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MLFLOW_TRACKING_URI"] == mlflow_proxy.url
    assert env["MLFLOW_TRACKING_SERVER_CERT_PATH"] == "/etc/slipway-tls/mlflow-ca/ca.crt"
    assert env["MLFLOW_TRACKING_CLIENT_CERT_PATH"] == "/etc/slipway-tls/mlflow-client/tls-combined.pem"
    assert {
        v["name"]: v.get("configMap", v.get("secret")) for v in pod["volumes"] if "slipway-mlflow" in v["name"]
    } == {
        "slipway-mlflow-ca": {
            "name": "corp-ca",
            "items": [{"key": "ca.crt", "path": "ca.crt"}],
            "optional": True,
            "defaultMode": 420,
        },
        "slipway-mlflow-client-cert": {
            "secretName": "mlflow-client",
            "optional": True,
            "defaultMode": 420,
            "items": [{"key": "tls-combined.pem", "path": "tls-combined.pem"}],
        },
    }
    seen = set(mlflow_proxy.clients)
    shown(
        "TLS with the CA bundle and client certificates",
        {
            "trainingRun": ready["status"]["phase"],
            "ready": condition(ready, "Ready")["message"],
            "client certificates the proxy saw": sorted(seen),
            "connections": mlflow_proxy.relayed,
        },
    )
    assert seen == {"slipway-operator", "team-pods"}  # the operator's, and the pods' from their namespace
    assert "BEGIN" not in str(ready) and "PRIVATE KEY" not in str(pod)


def test_without_the_ca_bundle_or_a_client_certificate_the_trainingrun_names_the_setting_to_set(
    kube_api, namespace, operator, pki, mlflow_proxy, monkeypatch
):
    settings(
        monkeypatch, MLFLOW_CA_BUNDLE=None, MLFLOW_CLIENT_CERT=pki.operator.cert, MLFLOW_CLIENT_KEY=pki.operator.key
    )
    op = operator(mlflow_url=mlflow_proxy.url)
    apply_object(kube_api, namespace, training_run("untrusted"))
    untrusted = wait_status(
        kube_api,
        namespace,
        "TrainingRun",
        "untrusted",
        message_naming("--mlflow-ca-bundle ($SLIPWAY_MLFLOW_CA_BUNDLE)"),
        60,
        "the CA named",
    )
    settings(monkeypatch, MLFLOW_CA_BUNDLE=pki.ca, MLFLOW_CLIENT_CERT=None, MLFLOW_CLIENT_KEY=None)
    op.restart()
    refused = wait_status(
        kube_api,
        namespace,
        "TrainingRun",
        "untrusted",
        message_naming("--mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT)"),
        60,
        "the cert named",
    )
    said = {"no CA bundle": condition(untrusted, "Ready"), "no client certificate": condition(refused, "Ready")}
    shown("TLS without the CA bundle, then without a client certificate", said)
    for ready in said.values():
        assert ready["reason"] == "MlflowUnavailable"
        assert f"MLflow at {mlflow_proxy.url} is unreachable" in ready["message"]
    assert "signed by a CA this client does not trust" in said["no CA bundle"]["message"]
    assert "it asks for a client certificate (mutual TLS)" in said["no client certificate"]["message"]
    assert mlflow_proxy.clients == []  # nothing got through


def test_insecure_works_with_a_warning(kube_api, namespace, operator, pki, mlflow_proxy, monkeypatch, caplog):
    namespace_tls(kube_api, namespace, pki)
    settings(
        monkeypatch,
        MLFLOW_INSECURE_TLS="true",
        MLFLOW_CA_BUNDLE=None,
        MLFLOW_CLIENT_CERT=pki.operator.cert,
        MLFLOW_CLIENT_KEY=pki.operator.key,
        MLFLOW_CLIENT_CERT_SECRET="mlflow-client",
    )
    with caplog.at_level(logging.WARNING):
        operator(mlflow_url=mlflow_proxy.url)
        apply_object(kube_api, namespace, training_run("insecure"))
        done = wait_status(
            kube_api,
            namespace,
            "TrainingRun",
            "insecure",
            lambda o: (o.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            180,
            "finish",
        )
    assert done["status"]["phase"] == "Succeeded", done["status"]
    env = {e["name"]: e.get("value") for e in pod_template(kube_api, namespace, "insecure")["containers"][0]["env"]}
    assert env["MLFLOW_TRACKING_INSECURE_TLS"] == "true" and "MLFLOW_TRACKING_SERVER_CERT_PATH" not in env
    warning = "TLS: MLflow's certificate is NOT checked (--mlflow-insecure-tls ($SLIPWAY_MLFLOW_INSECURE_TLS))"
    assert warning in caplog.text
    assert set(mlflow_proxy.clients) == {"slipway-operator", "team-pods"}


def test_the_operators_prometheus_client_through_tls(cluster, pki: Pki, tmp_path: Path) -> None:
    def answer(url: str, **options: object) -> str:
        config = OperatorConfig(**{f"prometheus_{k}": v for k, v in options.items()})  # type: ignore[arg-type]
        prometheus = PrometheusClient(url, timeout=5, tls=config.prometheus_tls)
        try:
            return "answered" if prometheus.query("up") else "no series"
        except PrometheusUnavailable as exc:
            return str(exc)
        finally:
            prometheus.close()

    cert = {"client_cert": str(pki.operator.cert), "client_key": str(pki.operator.key)}
    with (
        TlsProxy(cluster.prometheus_url, pki) as proxy,
        TlsProxy(cluster.prometheus_url, pki, require_client_cert=True) as mutual,
    ):
        results = {
            "the CA bundle": answer(proxy.url, ca_bundle=str(pki.ca)),
            "insecure": answer(proxy.url, insecure_tls=True),
            "no bundle": answer(proxy.url),
            "a client certificate": answer(mutual.url, ca_bundle=str(pki.ca), **cert),
            "no client certificate": answer(mutual.url, ca_bundle=str(pki.ca)),
        }
    shown("Prometheus through TLS", results)
    assert results["the CA bundle"] == results["insecure"] == results["a client certificate"] == "answered"
    assert results["no bundle"].endswith(
        "give that CA's certificate (PEM) with --prometheus-ca-bundle ($SLIPWAY_PROMETHEUS_CA_BUNDLE)"
    )
    assert results["no client certificate"].endswith(
        "give one it trusts with --prometheus-client-cert ($SLIPWAY_PROMETHEUS_CLIENT_CERT)"
    )
