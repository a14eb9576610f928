"""TLS made in the test: a CA, a server certificate for 127.0.0.1 and localhost, client certificates,
another CA that signed none of them; and a TLS-terminating proxy (threads of the test process) in
front of a plain HTTP server, that may require a client certificate and records the
common name of each client certificate it was shown."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localkube.pki import CertificateAuthority, CertPair


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA that signed the server's and the clients' certificates (PEM)
    server: CertPair  # for 127.0.0.1 and localhost
    operator: CertPair  # a client certificate, common name "slipway-operator"
    pods: Path  # a client certificate and its key in one PEM file, key first (cert-manager's CombinedPEM)
    stranger_ca: Path  # a CA that signed nothing the proxy shows
    stranger: CertPair  # a client certificate the stranger CA signed


def make_pki(directory: Path) -> Pki:
    ca = CertificateAuthority(directory / "ca")
    server = ca.issue("server", "mlflow.test", server=True, dns_names=("localhost",), ip_addresses=("127.0.0.1",))
    operator = ca.issue("operator", "slipway-operator")
    pods = ca.issue("pods", "team-pods")
    combined = directory / "pods-combined.pem"
    combined.write_bytes(pods.key.read_bytes() + pods.cert.read_bytes())
    stranger_ca = CertificateAuthority(directory / "stranger")
    stranger = stranger_ca.issue("stranger-client", "stranger")
    return Pki(ca.pair.cert, server, operator, combined, stranger_ca.pair.cert, stranger)


class TlsProxy:
    """TLS on 127.0.0.1 (the PKI's server certificate), relayed as plain TCP to ``upstream`` (an
    http:// URL). ``require_client_cert``: a client without a certificate the PKI's CA signed is
    refused in the handshake, with TLS's alert as a server sends it. ``clients``: the common names of
    the client certificates shown, in order; ``relayed``: the connections past the handshake."""

    def __init__(self, upstream: str, pki: Pki, *, require_client_cert: bool = False) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki.server.cert, pki.server.key)
        self.context.load_verify_locations(pki.ca)
        self.context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        self.clients: list[str] = []
        self.relayed = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> TlsProxy:
        threading.Thread(target=self._accept, daemon=True, name="tls-proxy").start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in list(self._open):
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            secured = self.context.wrap_socket(conn, server_side=True)  # a refusal sends TLS's alert
        except (ssl.SSLError, OSError):
            conn.close()
            return
        secured.settimeout(None)
        self.relayed += 1
        self.clients.append(_common_name(secured.getpeercert()))
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            secured.close()
            return
        upstream.settimeout(None)
        self._open.update((secured, upstream))
        _shuttle(secured, upstream)


def _common_name(cert: dict[str, Any] | None) -> str:
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def _shuttle(secured: ssl.SSLSocket, upstream: socket.socket) -> None:
    """Both directions in one thread: an SSL socket read in one thread while written in another
    corrupts its records under load (SSLV3_ALERT_BAD_RECORD_MAC). Bytes the SSL layer already holds
    (``pending``) are read before waiting on the sockets."""
    try:
        while True:
            ready = [secured] if secured.pending() else select.select([secured, upstream], [], [])[0]
            for source in ready:
                data = source.recv(65536)
                if not data:
                    return
                (upstream if source is secured else secured).sendall(data)
    except OSError:
        pass
    finally:
        for sock in (secured, upstream):
            with contextlib.suppress(OSError):
                sock.close()
