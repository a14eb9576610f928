"""The operator's MLflow and Prometheus clients, and the pods' MLflow client, over real TLS sockets: a
proxy with a certificate of a CA made in the test, in front of a plain HTTP server on 127.0.0.1. With
the CA bundle they work; without it they fail saying so and naming the setting to set; insecure works;
a proxy requiring a client certificate lets in only the clients that present one its CA signed."""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slipway import tls
from slipway.config import OperatorConfig
from slipway.mlflow import MlflowClient, MlflowUnavailable
from slipway.prometheus import PrometheusClient, PrometheusUnavailable
from slipway_testing.tlskit import Pki, TlsProxy, make_pki

VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "1"]}]}}


class Upstream(http.server.BaseHTTPRequestHandler):
    """MLflow's experiments/get and Prometheus' instant query, in plain HTTP (one exchange per connection)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = VECTOR if self.path.startswith("/api/v1/query") else {"experiment": {"name": "tls"}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def proxy(upstream: str, pki: Pki) -> Iterator[TlsProxy]:
    with TlsProxy(upstream, pki) as running:
        yield running


@pytest.fixture(scope="module")
def mutual(upstream: str, pki: Pki) -> Iterator[TlsProxy]:
    """A proxy that requires a client certificate its CA signed."""
    with TlsProxy(upstream, pki, require_client_cert=True) as running:
        yield running


def config(service: str, **options: object) -> OperatorConfig:
    """The operator's config with these TLS settings of ``service`` (e.g. ca_bundle=...), nothing else."""
    return OperatorConfig(**{f"{service}_{k}": v for k, v in options.items()})  # type: ignore[arg-type]


def mlflow_answer(url: str, settings: OperatorConfig) -> str:
    """The experiment's name as the operator's MLflow client reads it, or the error it raised."""
    with MlflowClient(url, timeout=5, tls=settings.mlflow_tls) as client:
        try:
            return str(client.experiment_name("1"))
        except MlflowUnavailable as exc:
            return f"error: {exc}"


def prometheus_answer(url: str, settings: OperatorConfig) -> str:
    client = PrometheusClient(url, timeout=5, tls=settings.prometheus_tls)
    try:
        return str(client.query_value("up"))
    except PrometheusUnavailable as exc:
        return f"error: {exc}"
    finally:
        client.close()


def test_the_operators_mlflow_client_over_tls(proxy: TlsProxy, pki: Pki) -> None:
    cases = {
        "the CA bundle": ({"ca_bundle": str(pki.ca)}, "tls"),
        "no bundle": (
            {},
            "error: MLflow at https://127.0.0.1:{port} is unreachable (GET /api/2.0/mlflow/experiments/"
            "get (experiment_id='1')): its certificate is signed by a CA this client does not trust (a "
            "private CA?); give that CA's certificate (PEM) with --mlflow-ca-bundle "
            "($SLIPWAY_MLFLOW_CA_BUNDLE)",
        ),
        "another CA's bundle": (
            {"ca_bundle": str(pki.stranger_ca)},
            f"error: MLflow at https://127.0.0.1:{{port}} is unreachable (GET /api/2.0/mlflow/"
            f"experiments/get (experiment_id='1')): its certificate is signed by a CA that the CA "
            f"bundle {pki.stranger_ca} does not hold (--mlflow-ca-bundle "
            "($SLIPWAY_MLFLOW_CA_BUNDLE)); add that CA's certificate (PEM) to it",
        ),
        "insecure": ({"insecure_tls": True}, "tls"),
    }
    for case, (options, expected) in cases.items():
        assert mlflow_answer(proxy.url, config("mlflow", **options)) == expected.format(port=proxy.port), case


def test_a_server_that_requires_a_client_certificate(mutual: TlsProxy, pki: Pki) -> None:
    ca = {"ca_bundle": str(pki.ca)}
    cases = {
        "a certificate and its key": (
            {**ca, "client_cert": str(pki.operator.cert), "client_key": str(pki.operator.key)},
            "tls",
        ),
        "one PEM file, key first": ({**ca, "client_cert": str(pki.pods)}, "tls"),
        "none": (
            ca,
            "it asks for a client certificate (mutual TLS); give one it trusts with --mlflow-client-cert "
            "($SLIPWAY_MLFLOW_CLIENT_CERT)",
        ),
        "one another CA signed": (
            {**ca, "client_cert": str(pki.stranger.cert), "client_key": str(pki.stranger.key)},
            f"it refused the client certificate {pki.stranger.cert} (TLSV1_ALERT_UNKNOWN_CA); "
            "give one it trusts with --mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT)",
        ),
    }
    relayed = mutual.relayed
    for case, (options, expected) in cases.items():
        answer = mlflow_answer(mutual.url, config("mlflow", **options))
        assert answer == expected or answer.endswith(f"): {expected}"), (case, answer)
    assert mutual.relayed == relayed + 2  # only the two with a certificate got through
    assert mutual.clients[-2:] == ["slipway-operator", "team-pods"]


def test_the_operators_prometheus_client_over_tls(proxy: TlsProxy, mutual: TlsProxy, pki: Pki) -> None:
    ca, cert = {"ca_bundle": str(pki.ca)}, {"client_cert": str(pki.operator.cert), "client_key": str(pki.operator.key)}
    assert prometheus_answer(proxy.url, config("prometheus", **ca)) == "1.0"
    assert prometheus_answer(proxy.url, config("prometheus", insecure_tls=True)) == "1.0"
    assert prometheus_answer(proxy.url, config("prometheus")) == (
        f"error: Prometheus at {proxy.url} unreachable: its certificate is signed by a CA this client does not "
        "trust (a private CA?); give that CA's certificate (PEM) with --prometheus-ca-bundle "
        "($SLIPWAY_PROMETHEUS_CA_BUNDLE)"
    )
    assert prometheus_answer(mutual.url, config("prometheus", **ca, **cert)) == "1.0"
    assert prometheus_answer(mutual.url, config("prometheus", **ca)).endswith(
        "it asks for a client certificate (mutual TLS); give one it trusts with --prometheus-client-cert "
        "($SLIPWAY_PROMETHEUS_CLIENT_CERT)"
    )
    # A Prometheus a spec names is asked with the same settings, and named the same way when it fails.
    assert PrometheusClient(proxy.url).tls.names == config("prometheus").prometheus_tls.names


def test_the_pods_client_reads_mlflows_own_variables(
    mutual: TlsProxy, pki: Pki, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mutual.url)
    monkeypatch.setenv("MLFLOW_TRACKING_CLIENT_CERT_PATH", str(pki.pods))
    monkeypatch.setenv("MLFLOW_TRACKING_SERVER_CERT_PATH", str(pki.ca))
    with MlflowClient.from_env(timeout=5) as client:
        assert client.experiment_name("1") == "tls"
    monkeypatch.delenv("MLFLOW_TRACKING_SERVER_CERT_PATH")
    with MlflowClient.from_env(timeout=5) as client, pytest.raises(MlflowUnavailable) as refused:
        client.experiment_name("1")
    assert "give that CA's certificate (PEM) with MLFLOW_TRACKING_SERVER_CERT_PATH" in str(refused.value)
    monkeypatch.setenv("MLFLOW_TRACKING_INSECURE_TLS", "true")
    with caplog.at_level(logging.WARNING), MlflowClient.from_env(timeout=5) as client:
        assert client.experiment_name("1") == "tls"
    assert "MLflow's certificate is NOT checked (MLFLOW_TRACKING_INSECURE_TLS)" in caplog.text
    # A CA bundle the pod's namespace did not provide: named, at once; for an http:// address, not read at all.
    monkeypatch.delenv("MLFLOW_TRACKING_INSECURE_TLS")
    monkeypatch.setenv("MLFLOW_TRACKING_SERVER_CERT_PATH", "/etc/slipway-tls/mlflow-ca/ca.crt")
    with pytest.raises(ValueError, match="^MLFLOW_TRACKING_SERVER_CERT_PATH: the CA bundle file /etc/slipway-tls/"):
        MlflowClient.from_env()
    MlflowClient.from_env("http://127.0.0.1:1").close()


def test_a_rotated_client_certificate_is_presented_from_the_next_connection(
    mutual: TlsProxy, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls, "RECHECK_SECONDS", 0.0)
    presented = tmp_path / "client.pem"
    presented.write_bytes(pki.operator.key.read_bytes() + pki.operator.cert.read_bytes())
    settings = config("mlflow", ca_bundle=str(pki.ca), client_cert=str(presented))
    with MlflowClient(mutual.url, timeout=5, tls=settings.mlflow_tls) as client:
        assert client.experiment_name("1") == "tls"
        presented.write_bytes(pki.pods.read_bytes())
        later = time.time() + 5  # a new modification time, whatever the file system's resolution
        os.utime(presented, (later, later))
        assert client.experiment_name("1") == "tls"
        presented.write_bytes(b"not a certificate")  # turned bad: the last good one stays in use
        os.utime(presented, (later + 5, later + 5))
        assert client.experiment_name("1") == "tls"
    assert mutual.clients[-3:] == ["slipway-operator", "team-pods", "team-pods"]
