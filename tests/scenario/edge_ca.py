"""A throwaway certificate authority for the edge's tests, made with ``cryptography``.

It issues a leaf for the served names (and loopback/test addresses) so real TLS clients
(dnspython, curl, kdig) verify the edge against the CA's root with ``--cacert``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from valis_core.atomic import write_atomic
from valis_core.edge.certificate import EdgeCertificate, certificate_from_pem
from valis_core.state_layout import edge_certificate_path, edge_key_path


@attrs.frozen
class LocalCA:
    root_pem: bytes
    _key: ec.EllipticCurvePrivateKey
    _name: x509.Name

    def issue(
        self,
        names: tuple[str, ...],
        addresses: tuple[str, ...] = ("127.0.0.1",),
        *,
        days: int = 30,
    ) -> EdgeCertificate:
        """A leaf for ``names`` and ``addresses``, its chain the leaf then the root."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        alt += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        chain = leaf.public_bytes(serialization.Encoding.PEM) + self.root_pem
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return certificate_from_pem(chain, key_pem, origin="test CA")


def make_test_ca() -> LocalCA:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "valis test root")])
    now = datetime.datetime.now(datetime.UTC)
    root = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return LocalCA(root.public_bytes(serialization.Encoding.PEM), key, name)


def install(
    certificate: EdgeCertificate, state_dir: Path, owner: tuple[int, int] | None = None
) -> None:
    """Put ``certificate`` where the node reads it, as the ACME side does: atomically,
    owned by ``owner`` (the run account) when given."""
    directory = edge_certificate_path(state_dir).parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if owner is not None:
        os.chown(directory, *owner)
    write_atomic(edge_key_path(state_dir), certificate.key_pem, mode=0o600, owner=owner)
    write_atomic(edge_certificate_path(state_dir), certificate.chain_pem, mode=0o644,
                 owner=owner)
