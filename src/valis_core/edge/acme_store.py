"""The edge's ACME files in the state directory: the account key, the leaf key, the chain.

Each is minted or written once, atomically, mode 0600, at the place ``state_layout``
gives it, and all three are in the backup set, so a restored node is the same ACME
account with the same leaf and serves the same certificate without asking its CA.

The leaf key is minted once and kept across renewals: a renewal writes only the new
chain, so the key and the chain on disk are always a pair (the chain is the one write
that changes) and a crash between two writes cannot leave a key without its
certificate. Both keys are ECDSA P-256 (ES256 for the account's JWS signatures).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from valis_core.atomic import write_atomic
from valis_core.edge.certificate import (
    EdgeCertificate,
    EdgeCertificateError,
    certificate_from_pem,
    tls_context,
)
from valis_core.errors import ValisError
from valis_core.state_layout import (
    ACME_ACCOUNT_KEY,
    EDGE_CERTIFICATE,
    EDGE_KEY,
    acme_account_key_path,
    edge_certificate_path,
    edge_key_path,
)

FILE_MODE = 0o600
DIR_MODE = 0o700
MAX_FILE_BYTES = 1 << 20


class AcmeStoreError(ValisError):
    """An edge key or chain in the state directory that cannot be read or written."""


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AcmeStoreError(
            f"edge: cannot read {path} ({exc.strerror or exc}); it must be the run "
            "account's, mode 0600"
        ) from None


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(mode=DIR_MODE, exist_ok=True)
        write_atomic(path, data, mode=FILE_MODE)
    except OSError as exc:
        raise AcmeStoreError(
            f"edge: cannot write {path} ({exc.strerror or exc}); the state directory must "
            "be writable by the run account"
        ) from None


def _load_or_mint(path: Path, what: str, *, ecdsa_only: bool) -> bytes:
    held = _read(path)
    if held is not None:
        try:
            key = serialization.load_pem_private_key(held, password=None)
        except (ValueError, TypeError) as exc:
            raise AcmeStoreError(
                f"edge: the {what} at {path} is not a PEM private key ({exc}); restore it "
                "from the backup set"
            ) from None
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) or (
            ecdsa_only and not isinstance(key, ec.EllipticCurvePrivateKey)
        ):
            kinds = "an ECDSA key" if ecdsa_only else "an ECDSA or RSA key"
            raise AcmeStoreError(f"edge: the {what} at {path} is not {kinds}")
        return held
    minted = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write(path, minted)
    return minted


def account_key(state_dir: Path) -> bytes:
    """The ACME account key (PEM), minted on first use."""
    return _load_or_mint(acme_account_key_path(state_dir), "ACME account key", ecdsa_only=True)


def leaf_key(state_dir: Path) -> bytes:
    """The TLS leaf key (PEM), minted on first use (ECDSA) and kept across renewals (one
    an operator placed, RSA or ECDSA, is used as it is)."""
    return _load_or_mint(edge_key_path(state_dir), "edge leaf key", ecdsa_only=False)


def held_certificate(state_dir: Path) -> EdgeCertificate | None:
    """The certificate the node holds, or ``None`` when it has none yet (a leaf key
    alone is an order that has not finished: the key is kept for the next one)."""
    chain = _read(edge_certificate_path(state_dir))
    if chain is None:
        return None
    key = _read(edge_key_path(state_dir))
    if key is None:
        raise AcmeStoreError(
            f"edge: {edge_certificate_path(state_dir)} is there but its key "
            f"{edge_key_path(state_dir)} is not; restore both from the backup set, or "
            "remove the chain so the node obtains a new certificate"
        )
    certificate = certificate_from_pem(chain, key, origin=str(edge_certificate_path(state_dir)))
    tls_context(certificate)  # refuses a chain that is not the key's
    return certificate


def store_chain(state_dir: Path, chain_pem: bytes, key_pem: bytes) -> EdgeCertificate:
    """Check ``chain_pem`` is issued for ``key_pem`` and write it; the new certificate."""
    certificate = certificate_from_pem(chain_pem, key_pem, origin="from the CA")
    try:
        tls_context(certificate)
    except EdgeCertificateError as exc:
        raise AcmeStoreError(f"edge: the CA's certificate is not for the leaf key: {exc}") from None
    _write(edge_certificate_path(state_dir), chain_pem)
    return certificate



def backed_up_problem(files: Mapping[str, bytes]) -> tuple[str, str] | None:
    """What is wrong with the edge's files in a backup set (path and problem), if
    anything: each key must be a private key, and the chain must be the leaf key's."""
    for path in (ACME_ACCOUNT_KEY, EDGE_KEY):
        if path in files:
            try:
                serialization.load_pem_private_key(files[path], password=None)
            except (ValueError, TypeError):
                return path, "is not a PEM private key"
    if EDGE_CERTIFICATE in files:
        if EDGE_KEY not in files:
            return EDGE_CERTIFICATE, f"is there without its key {EDGE_KEY}"
        try:
            tls_context(certificate_from_pem(
                files[EDGE_CERTIFICATE], files[EDGE_KEY], origin=EDGE_CERTIFICATE
            ))
        except EdgeCertificateError as exc:
            return EDGE_CERTIFICATE, f"does not serve with {EDGE_KEY} ({exc})"
    return None
