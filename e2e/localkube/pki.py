"""Certificates and keys for the local cluster, made with ``cryptography``.

One CA signs everything: the kube-apiserver's serving certificate and a client
certificate per identity (admin in ``system:masters``, the controller-manager,
the scheduler, each node agent as ``system:node:<name>`` in ``system:nodes``, the
volume provisioner and Prometheus). Service-account tokens are signed with a
separate RSA key pair.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class CertPair:
    """Paths of a PEM certificate and its private key."""

    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


class CertificateAuthority:
    """A self-signed CA kept on disk as ``ca.crt``/``ca.key``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pair = CertPair(directory / "ca.crt", directory / "ca.key")
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = _name("localkube-ca")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.pair.key, self._key)

    @classmethod
    def load(cls, directory: Path) -> CertificateAuthority:
        """The CA kept in ``directory`` (to issue certificates for a component added later)."""
        ca = cls.__new__(cls)
        ca.directory = directory
        ca.pair = CertPair(directory / "ca.crt", directory / "ca.key")
        ca._cert = x509.load_pem_x509_certificate(ca.pair.cert.read_bytes())
        key = serialization.load_pem_private_key(ca.pair.key.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        ca._key = key
        return ca

    def issue(
        self,
        name: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        server: bool = False,
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        mutual: bool = False,
    ) -> CertPair:
        """Issue ``<name>.crt``/``<name>.key``: a client certificate, or a serving one if ``server``
        (and a client one too if ``mutual``: one pair both ends of a mutual TLS link present)."""
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server and mutual:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = CertPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair


def service_account_keys(directory: Path) -> CertPair:
    """Write the RSA key pair that signs service-account tokens (``sa.pub`` as ``cert``)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    pair.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    _write_key(pair.key, key)
    return pair
