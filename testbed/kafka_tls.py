"""TLS certificates for the test bed's secured Kafka broker: a throwaway CA and a server cert.

Why this exists: the tests of ``spec.kafka`` need a broker whose TLS listener presents a
certificate that only the test's own certificate authority vouches for, so that a client is
proven to check it against the CA it was given (and refused with another CA). Every call makes
a new CA, so no key outlives a test session and two brokers never trust each other. Keys are
ECDSA P-256 (made in milliseconds); the server key is written as unencrypted PKCS#8 PEM
(``BEGIN PRIVATE KEY``), the one form Kafka's PEM keystore (``ssl.keystore.type=PEM``) reads
without a key password.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID_BEFORE = datetime.timedelta(days=1)
"""How long before now the certificates are valid from: a node's clock a little behind is fine."""
_VALID_FOR = datetime.timedelta(days=30)


@dataclass(frozen=True)
class TlsMaterial:
    """A server certificate, its key and the CA that signed it, all PEM text.

    Attributes:
        ca_pem: The CA certificate: what clients trust (librdkafka's ``ssl.ca.pem``).
        cert_pem: The server certificate signed by the CA.
        key_pem: The server certificate's private key, unencrypted PKCS#8
            (``BEGIN PRIVATE KEY``), as Kafka's PEM keystore needs.
    """

    ca_pem: str
    cert_pem: str
    key_pem: str

    @property
    def keystore_pem(self) -> str:
        """The key, then the certificate, in one text: a file for ``ssl.keystore.location``
        with ``ssl.keystore.type=PEM``."""
        return self.key_pem + self.cert_pem


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - _VALID_BEFORE, now + _VALID_FOR


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    """A certificate of ``key`` for ``subject`` by ``issuer``: a random serial and the test
    bed's validity; the caller adds the extensions and signs."""
    not_before, not_after = _validity()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def _new_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def server_tls(dns_names: Sequence[str], ip_addresses: Sequence[str] = ()) -> TlsMaterial:
    """A new CA and a server certificate it signed for the given names and addresses.

    Args:
        dns_names: The certificate's DNS subject alternative names (the first is also its
            common name); e.g. ``["kafka", "kafka.<namespace>.svc"]``.
        ip_addresses: Its IP address SANs, e.g. ``["127.0.0.1"]`` for a broker advertised at
            that address (clients check the address they connect to against them).

    Returns:
        The CA certificate, the server certificate (``serverAuth``) and its PKCS#8 key.

    Raises:
        ValueError: No name and no address given, or an address is not an IP address.
    """
    if not dns_names and not ip_addresses:
        raise ValueError("A server certificate needs at least one DNS name or IP address")
    ca_cert, ca_key = _new_ca("snapshotjob test-bed Kafka CA")
    key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
    common_name = dns_names[0] if dns_names else ip_addresses[0]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(subject, ca_cert.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")
    return TlsMaterial(ca_pem=_pem(ca_cert), cert_pem=_pem(cert), key_pem=key_pem)


def other_ca_pem() -> str:
    """A fresh CA certificate that signed nothing of any broker's, PEM.

    For the tests of a client given the wrong CA: the broker's certificate does not verify.
    """
    cert, _ = _new_ca("snapshotjob test-bed unrelated CA")
    return _pem(cert)
