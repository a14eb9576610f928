"""TLS to MLflow and Prometheus: the CA bundle a server's certificate is checked against, the client
certificate presented to it (mutual TLS), or, said explicitly, no check at all; and, when a handshake
fails, what went wrong in words of Slipway's own, naming the option that fixes it.

The operator takes these options from its settings (``--mlflow-ca-bundle``, ``--prometheus-client-cert``,
...: :mod:`slipway.config`); Slipway's pods from MLflow's own variables
(``MLFLOW_TRACKING_SERVER_CERT_PATH``, ``MLFLOW_TRACKING_CLIENT_CERT_PATH``,
``MLFLOW_TRACKING_INSECURE_TLS``), so that a pod's own code using MLflow's client trusts what Slipway's
workloads trust. A CA bundle replaces the image's CAs, as it does for MLflow's client. The files are
read again when they change (a rotated certificate), at most every :data:`RECHECK_SECONDS`. A message
names a file by its path, never by what it holds.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from slipway import settings

log = logging.getLogger(__name__)

RECHECK_SECONDS = 30.0
T = TypeVar("T")


@dataclass(frozen=True)
class Names:
    """How messages name each option: the operator's flag and variable, or MLflow's variable."""

    ca_bundle: str
    client_cert: str
    client_key: str
    insecure: str


MLFLOW_ENV_NAMES = Names(
    "MLFLOW_TRACKING_SERVER_CERT_PATH",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH (one PEM file: the certificate and its key)",
    "MLFLOW_TRACKING_INSECURE_TLS",
)


def setting_names(service: str) -> Names:
    """The names of the operator's settings for ``service`` ("mlflow" or "prometheus"): flag and variable."""

    def named(option: str) -> str:
        setting = settings.BY_NAME[f"{service}_{option}"]
        return f"{setting.flag} (${setting.env[0]})"

    return Names(named("ca_bundle"), named("client_cert"), named("client_key"), named("insecure_tls"))


@dataclass(frozen=True)
class TlsOptions:
    """What a client of one service checks and presents; all unset: the HTTP client's own defaults."""

    ca_bundle: str | None = None  # a PEM file (or a directory of hashed ones): the CAs trusted
    client_cert: str | None = None  # a PEM file of the client certificate, and its key unless client_key
    client_key: str | None = None
    insecure: bool = False  # no check of the server's certificate at all
    names: Names = MLFLOW_ENV_NAMES

    @property
    def configured(self) -> bool:
        return bool(self.ca_bundle or self.client_cert or self.client_key or self.insecure)

    def refusal(self) -> str | None:
        """Why these options contradict each other, naming them; None when they do not."""
        if self.insecure and self.ca_bundle:
            return (
                f"{self.names.insecure} and {self.names.ca_bundle} are both set: one checks the server's "
                "certificate against the bundle, the other not at all; unset one"
            )
        if self.client_key and not self.client_cert:
            return f"{self.names.client_key} is set without {self.names.client_cert}: give the certificate too"
        return None


def insecure_warning(service: str, options: TlsOptions) -> str:
    """The warning logged at start when ``service``'s certificate goes unchecked."""
    return (
        f"TLS: {service}'s certificate is NOT checked ({options.names.insecure}): anyone on the way to it can "
        "read and change what is exchanged, credentials included; give its CA instead "
        f"({options.names.ca_bundle})"
    )


class TlsContext:
    """The SSL context of one client, its files read again when they change (a certificate rotated by
    cert-manager or the kubelet): a new connection uses what the files hold now. A file that turns
    bad after a good read leaves the context as it was (logged once per change)."""

    def __init__(self, options: TlsOptions) -> None:
        refused = options.refusal()
        if refused is not None:
            raise ValueError(refused)
        self.options = options
        self._lock = threading.Lock()
        self._stamps = self._read_stamps()
        self._checked = time.monotonic()
        self.ssl = self._build()

    def _files(self) -> list[tuple[str, str, str]]:
        """(path, the option's name, what it holds) of each file set."""
        o, n = self.options, self.options.names
        files = [(o.ca_bundle, n.ca_bundle, "CA bundle"), (o.client_cert, n.client_cert, "client certificate")]
        files.append((o.client_key, n.client_key, "client key"))
        return [(path, name, what) for path, name, what in files if path]

    def _read_stamps(self) -> tuple[tuple[str, float], ...]:
        stamps = []
        for path, _, _ in self._files():
            try:
                stamps.append((path, os.stat(path).st_mtime))
            except OSError:
                stamps.append((path, -1.0))
        return tuple(stamps)

    def _build(self) -> ssl.SSLContext:
        """A new context from the files as they are; a ValueError naming the option and the file."""
        o = self.options
        for path, name, what in self._files():
            _readable(path, name, what)
        if o.insecure:
            context = httpx.create_ssl_context(verify=False)
        elif o.ca_bundle:
            context = _pem(lambda: _trusting(str(o.ca_bundle)), o.ca_bundle, o.names.ca_bundle)
        else:
            context = httpx.create_ssl_context()
        if o.client_cert:
            _pem(lambda: _present(context, o), o.client_cert, o.names.client_cert)
        return context

    def refresh(self) -> None:
        """Read the files again if one changed since; cheap when none did (a stat per file, at most
        every RECHECK_SECONDS)."""
        now = time.monotonic()
        if now - self._checked < RECHECK_SECONDS:
            return
        with self._lock:
            self._checked = now
            stamps = self._read_stamps()
            if stamps == self._stamps:
                return
            self._stamps = stamps
            files = ", ".join(path for path, _ in stamps)
            try:
                self._build()  # the files as they are now, checked on a context of their own first
                if self.options.client_cert:  # then into the context in use, which the clients' pools share
                    _present(self.ssl, self.options)
                if self.options.ca_bundle and not self.options.insecure:
                    _trust(self.ssl, self.options.ca_bundle)
            except ValueError as exc:
                log.warning("%s; the TLS files read before stay in use", exc)
                return
            except (OSError, _EncryptedKey):  # changed again in between: read on the next change
                log.warning("TLS: %s changed while being read; the files read before stay in use", files)
                return
            log.info("TLS: read %s again", files)


def _trusting(path: str) -> ssl.SSLContext:
    if os.path.isdir(path):
        return ssl.create_default_context(capath=path)
    return ssl.create_default_context(cafile=path)


def _trust(context: ssl.SSLContext, path: str) -> None:
    if os.path.isdir(path):
        context.load_verify_locations(capath=path)
    else:
        context.load_verify_locations(cafile=path)


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    raise _EncryptedKey  # instead of OpenSSL asking for a password on a terminal there is none of


def _present(context: ssl.SSLContext, options: TlsOptions) -> None:
    context.load_cert_chain(str(options.client_cert), options.client_key or None, password=_no_password)


def _readable(path: str, name: str, what: str) -> None:
    """A ValueError naming the option and the file when ``path`` cannot be read (never what it holds)."""
    try:
        if not os.path.isdir(path):
            with open(path, "rb"):
                pass
    except FileNotFoundError:
        raise ValueError(f"{name}: the {what} file {path} does not exist") from None
    except OSError as exc:
        raise ValueError(f"{name}: the {what} file {path} cannot be read ({exc.strerror or 'error'})") from None


def _pem(load: Callable[[], T], path: str, name: str) -> T:
    """``load()``, OpenSSL's refusal of the file a ValueError naming the option and the file."""
    try:
        return load()
    except _EncryptedKey:
        raise ValueError(f"{name}: the key of {path} is encrypted; give it unencrypted (a Secret keeps it)") from None
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc.reason):
            raise ValueError(f"{name}: the key given is not the key of the certificate {path}") from None
        raise ValueError(
            f"{name}: {path} holds no usable PEM (a certificate, and for a client certificate its unencrypted key)"
        ) from None


# OpenSSL's verify codes (X509_V_ERR_*): a server certificate signed by a CA not trusted here.
_UNTRUSTED = {2, 18, 19, 20, 21, 27}
_EXPIRED, _NOT_YET_VALID = 10, 9
_NAME_MISMATCH = {62, 64}
# Alerts a server sends when it wants a client certificate, or refuses the one given.
_CLIENT_CERT_ALERTS = (
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
    "TLSV1_ALERT_ACCESS_DENIED",
)
_NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST")
_REASON = re.compile(r"[A-Z0-9_]{1,64}")


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def failure(exc: BaseException, options: TlsOptions | None) -> str | None:
    """What went wrong in the TLS handshake behind ``exc``, naming the option that fixes it; None when
    ``exc`` is no TLS failure. In OpenSSL's fixed words only: nothing the server sent is repeated."""
    error = _ssl_error(exc)
    if error is None:
        return None
    o = options or TlsOptions()
    if isinstance(error, ssl.SSLCertVerificationError):
        return _certificate_refused(error.verify_code, o)
    reason = str(error.reason or "")
    if reason in _CLIENT_CERT_ALERTS or reason == "SSLV3_ALERT_HANDSHAKE_FAILURE":
        return _client_certificate_refused(reason, o)
    if reason in _NOT_TLS:
        return "it does not answer TLS there; is the address's scheme right (http:// rather than https://)?"
    shown = f" ({reason})" if _REASON.fullmatch(reason) else ""
    return f"the TLS handshake failed{shown}"


def _certificate_refused(code: int, o: TlsOptions) -> str:
    if code in _UNTRUSTED:
        if o.ca_bundle:
            return (
                f"its certificate is signed by a CA that the CA bundle {o.ca_bundle} does not hold "
                f"({o.names.ca_bundle}); add that CA's certificate (PEM) to it"
            )
        return (
            "its certificate is signed by a CA this client does not trust (a private CA?); give that CA's "
            f"certificate (PEM) with {o.names.ca_bundle}"
        )
    if code == _EXPIRED:
        return "its certificate has expired; the server needs a new one"
    if code == _NOT_YET_VALID:
        return "its certificate is not valid yet; check the clocks of the server and of this host"
    if code in _NAME_MISMATCH:
        return "its certificate does not name the host of the address; use a name the certificate holds"
    return f"its certificate was refused (OpenSSL verify code {int(code)})"


def _client_certificate_refused(reason: str, o: TlsOptions) -> str:
    if reason == "SSLV3_ALERT_HANDSHAKE_FAILURE":
        return (
            "the TLS handshake failed: it may want a client certificate "
            f"({o.names.client_cert}{' is not set' if not o.client_cert else ''}), or shares no TLS version "
            "or cipher with this client"
        )
    if not o.client_cert:
        return f"it asks for a client certificate (mutual TLS); give one it trusts with {o.names.client_cert}"
    return (
        f"it refused the client certificate {o.client_cert} ({reason}); give one it trusts with {o.names.client_cert}"
    )
