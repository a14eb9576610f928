"""TLS settings: from their variables and flags to the options of each client; files that cannot be
used, and contradicting settings, refused at start naming the flag, its variable and the file (never
what the file holds); each kind of handshake failure in words naming the setting that fixes it."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from slipway import settings, tls
from slipway.__main__ import build_parser, main
from slipway.config import OperatorConfig
from slipway_testing.tlskit import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_the_variables_reach_each_clients_options(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, value in {
        "SLIPWAY_MLFLOW_CA_BUNDLE": "/etc/slipway-tls/mlflow-ca/ca.crt",
        "SLIPWAY_MLFLOW_CLIENT_CERT": "/etc/slipway-tls/mlflow-client/tls.crt",
        "SLIPWAY_MLFLOW_CLIENT_KEY": "/etc/slipway-tls/mlflow-client/tls.key",
        "SLIPWAY_PROMETHEUS_INSECURE_TLS": "true",
        "SLIPWAY_MLFLOW_CA_CONFIGMAP": "corp-ca",
        "SLIPWAY_MLFLOW_CLIENT_CERT_SECRET": "mlflow-client",
    }.items():
        monkeypatch.setenv(variable, value)
    config = OperatorConfig()
    assert config.mlflow_tls == tls.TlsOptions(
        "/etc/slipway-tls/mlflow-ca/ca.crt",
        "/etc/slipway-tls/mlflow-client/tls.crt",
        "/etc/slipway-tls/mlflow-client/tls.key",
        False,
        tls.Names(
            "--mlflow-ca-bundle ($SLIPWAY_MLFLOW_CA_BUNDLE)",
            "--mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT)",
            "--mlflow-client-key ($SLIPWAY_MLFLOW_CLIENT_KEY)",
            "--mlflow-insecure-tls ($SLIPWAY_MLFLOW_INSECURE_TLS)",
        ),
    )
    assert config.prometheus_tls.insecure and not config.prometheus_tls.ca_bundle
    assert (config.pod_mlflow_tls.ca_configmap, config.pod_mlflow_tls.client_cert_secret) == (
        "corp-ca",
        "mlflow-client",
    )
    assert not config.pod_mlflow_tls.insecure  # MLflow's switch, not Prometheus'
    args = build_parser().parse_args(["--mlflow-insecure-tls", "--prometheus-ca-bundle", "/ca.pem"])
    assert (args.mlflow_insecure_tls, args.prometheus_ca_bundle, args.mlflow_ca_bundle) == (
        True,
        "/ca.pem",
        "/etc/slipway-tls/mlflow-ca/ca.crt",
    )


def test_nothing_set_leaves_every_client_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in settings.SETTINGS:
        for variable in setting.env:
            monkeypatch.delenv(variable, raising=False)
    config = OperatorConfig()
    assert not config.mlflow_tls.configured and not config.prometheus_tls.configured
    config.check_tls()


def refusal(pki: Pki, tmp_path: Path, **options: object) -> str:
    """What check_tls says of the operator's MLflow settings ``options`` (ca_bundle=...), "" if nothing."""
    try:
        OperatorConfig(**{f"mlflow_{k}": v for k, v in options.items()}).check_tls()  # type: ignore[arg-type]
    except ValueError as exc:
        return str(exc)
    return ""


def test_unusable_files_and_contradicting_settings_are_refused_naming_the_setting(pki: Pki, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    encrypted = tmp_path / "encrypted.key"
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.operator.key.read_bytes(), password=None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    cert, ca = str(pki.operator.cert), str(pki.ca)
    cases = {
        "a CA bundle and insecure": (
            {"ca_bundle": ca, "insecure_tls": True},
            "--mlflow-insecure-tls ($SLIPWAY_MLFLOW_INSECURE_TLS) and --mlflow-ca-bundle ($SLIPWAY_MLFLOW_CA_BUNDLE) "
            "are both set: one checks the server's certificate against the bundle, the other not at all; unset one",
        ),
        "a key without its certificate": (
            {"client_key": str(pki.operator.key)},
            "--mlflow-client-key ($SLIPWAY_MLFLOW_CLIENT_KEY) is set without --mlflow-client-cert "
            "($SLIPWAY_MLFLOW_CLIENT_CERT): give the certificate too",
        ),
        "a missing CA bundle": (
            {"ca_bundle": "/nowhere/ca.crt"},
            "--mlflow-ca-bundle ($SLIPWAY_MLFLOW_CA_BUNDLE): the CA bundle file /nowhere/ca.crt does not exist",
        ),
        "a missing key": (
            {"client_cert": cert, "client_key": "/nowhere/tls.key"},
            "--mlflow-client-key ($SLIPWAY_MLFLOW_CLIENT_KEY): the client key file /nowhere/tls.key does not exist",
        ),
        "a CA bundle that is no certificate": (
            {"ca_bundle": str(garbage)},
            f"--mlflow-ca-bundle ($SLIPWAY_MLFLOW_CA_BUNDLE): {garbage} holds no usable PEM (a certificate, and for "
            "a client certificate its unencrypted key)",
        ),
        "a certificate without its key": (
            {"client_cert": cert},
            f"--mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT): {cert} holds no usable PEM (a certificate, and for "
            "a client certificate its unencrypted key)",
        ),
        "another certificate's key": (
            {"client_cert": cert, "client_key": str(pki.stranger.key)},
            f"--mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT): the key given is not the key of the "
            f"certificate {cert}",
        ),
        "an encrypted key": (
            {"client_cert": cert, "client_key": str(encrypted)},
            f"--mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT): the key of {cert} is encrypted; give it "
            "unencrypted (a Secret keeps it)",
        ),
        "all good": ({"ca_bundle": ca, "client_cert": cert, "client_key": str(pki.operator.key)}, ""),
        "one PEM of a key and its certificate": ({"client_cert": str(pki.pods)}, ""),
    }
    for case, (options, expected) in cases.items():
        said = refusal(pki, tmp_path, **options)
        assert said == expected, case
        assert "BEGIN" not in said and "bm90" not in said  # a path, never what the file holds


def test_a_bad_file_stops_the_start_before_kopf_runs(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("SLIPWAY_PROMETHEUS_CA_BUNDLE", "/nowhere/ca.crt")
    with pytest.raises(SystemExit):
        main(["-n", "team-a"])
    assert (
        "--prometheus-ca-bundle ($SLIPWAY_PROMETHEUS_CA_BUNDLE): the CA bundle file /nowhere/ca.crt does not exist"
        in capsys.readouterr().err
    )


def ssl_error(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}]")
    error.reason = reason
    return error


def verify_error(code: int) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED]")
    error.verify_code = code
    return error


def as_httpx(error: ssl.SSLError) -> httpx.ConnectError:
    try:
        raise httpx.ConnectError("failed") from error
    except httpx.ConnectError as exc:
        return exc


MLFLOW = tls.setting_names("mlflow")


@pytest.mark.parametrize(
    ("error", "options", "said"),
    [
        (
            verify_error(20),
            tls.TlsOptions(names=MLFLOW),
            "its certificate is signed by a CA this client does not trust (a private CA?); give that CA's "
            "certificate (PEM) with --mlflow-ca-bundle ($SLIPWAY_MLFLOW_CA_BUNDLE)",
        ),
        (
            verify_error(19),
            tls.TlsOptions("/ca.pem", names=MLFLOW),
            "its certificate is signed by a CA that the CA "
            "bundle /ca.pem does not hold (--mlflow-ca-bundle ($SLIPWAY_MLFLOW_CA_BUNDLE)); add that CA's certificate "
            "(PEM) to it",
        ),
        (verify_error(10), tls.TlsOptions(names=MLFLOW), "its certificate has expired; the server needs a new one"),
        (
            verify_error(62),
            tls.TlsOptions(names=MLFLOW),
            "its certificate does not name the host of the address; use a name the certificate holds",
        ),
        (verify_error(7), None, "its certificate was refused (OpenSSL verify code 7)"),
        (
            ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED"),
            tls.TlsOptions(names=MLFLOW),
            "it asks for a client "
            "certificate (mutual TLS); give one it trusts with --mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT)",
        ),
        (
            ssl_error("SSLV3_ALERT_CERTIFICATE_EXPIRED"),
            tls.TlsOptions(client_cert="/c.pem", names=MLFLOW),
            "it "
            "refused the client certificate /c.pem (SSLV3_ALERT_CERTIFICATE_EXPIRED); give one it trusts with "
            "--mlflow-client-cert ($SLIPWAY_MLFLOW_CLIENT_CERT)",
        ),
        (
            ssl_error("SSLV3_ALERT_HANDSHAKE_FAILURE"),
            None,
            "the TLS handshake failed: it may want a client "
            "certificate (MLFLOW_TRACKING_CLIENT_CERT_PATH is not set), or shares no TLS version or cipher with this "
            "client",
        ),
        (
            ssl_error("WRONG_VERSION_NUMBER"),
            None,
            "it does not answer TLS there; is the address's scheme right (http:// rather than https://)?",
        ),
        (ssl_error("TLSV1_ALERT_INTERNAL_ERROR"), None, "the TLS handshake failed (TLSV1_ALERT_INTERNAL_ERROR)"),
        (ssl_error("words a server chose"), None, "the TLS handshake failed"),
    ],
)
def test_each_handshake_failure_in_words_naming_the_fix(error, options, said) -> None:
    assert tls.failure(as_httpx(error), options) == said


def test_a_failure_that_is_no_tls_failure_is_left_to_the_caller() -> None:
    assert tls.failure(httpx.ConnectError("[Errno 111] Connection refused"), None) is None
