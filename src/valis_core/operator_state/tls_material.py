"""The certificates of the two-host topology: a database host's CA, its server
certificate, and the client certificates nodes reach it with.

PostgreSQL's ``cert`` authentication admits a client whose certificate chains to the
server's ``ssl_ca_file`` and whose subject CN is the role it logs in as; libpq's
``sslmode=verify-full`` admits a server whose certificate chains to the client's
``sslrootcert`` and names the host it dialled. One private CA on the database host does
both, so no public CA and no password are involved: ``make_ca`` once, ``issue_server``
for the names the nodes dial, ``issue_client`` for each node (CN = the role; the node's
name in the OU, for the operator's inventory).

Pure apart from the randomness of key generation: the clock is a parameter. Keys are
ECDSA P-256, which every libpq and PostgreSQL built with OpenSSL take.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence

import attrs
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from valis_core.errors import ValisError

CA_DAYS = 3650
LEAF_DAYS = 825
#: leaves start an hour back, so a node whose clock is a little behind takes them
_BACKDATE = datetime.timedelta(hours=1)


class TlsMaterialError(ValisError):
    """A certificate asked for with a name or a CA it cannot be issued with."""


@attrs.frozen
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if unit:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    return x509.Name(parts)


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey,
             now: datetime.datetime, days: int) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
    )


def make_ca(label: str, now: datetime.datetime, *, days: int = CA_DAYS) -> Issued:
    """A new private CA named ``valis operator state CA (label)``."""
    key = _key()
    name = _name(f"valis operator state CA ({label})")
    cert = (
        _builder(name, name, key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _ca_parts(ca: Issued) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TlsMaterialError("the operator-state CA's key is not an ECDSA key")
    return ca.certificate, key


def _leaf(ca: Issued, subject: x509.Name, usage: x509.ObjectIdentifier, *,
          names: Sequence[x509.GeneralName], now: datetime.datetime, days: int) -> Issued:
    ca_cert, ca_key = _ca_parts(ca)
    key = _key()
    builder = (
        _builder(subject, ca_cert.subject, key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_key.public_key()), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)),
                                        critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        pass
    label = name.rstrip(".").lower()
    if not label or any(not part for part in label.split(".")):
        raise TlsMaterialError(f"{name!r} is neither an IP address nor a host name")
    return x509.DNSName(label)


def issue_server(ca: Issued, names: Sequence[str], now: datetime.datetime, *,
                 days: int = LEAF_DAYS) -> Issued:
    """The database host's certificate, valid for every host name and address in
    ``names`` (what nodes put in their DSN's host; ``verify-full`` checks it)."""
    if not names:
        raise TlsMaterialError("a server certificate needs the name or address nodes dial")
    general = [_general_name(name) for name in names]
    return _leaf(ca, _name(names[0]), ExtendedKeyUsageOID.SERVER_AUTH, names=general,
                 now=now, days=days)


def issue_client(ca: Issued, role: str, node: str, now: datetime.datetime, *,
                 days: int = LEAF_DAYS) -> Issued:
    """A node's client certificate: CN ``role`` (what ``cert`` authentication logs in
    as), OU ``node``."""
    if not role:
        raise TlsMaterialError("a client certificate needs the role it logs in as")
    return _leaf(ca, _name(role, node or None), ExtendedKeyUsageOID.CLIENT_AUTH, names=(),
                 now=now, days=days)


def common_name(cert_pem: bytes) -> str:
    """The subject CN of a PEM certificate (empty when it has none)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    values = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else ""


def issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether ``cert_pem`` is signed by the CA certificate ``ca_pem``."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
