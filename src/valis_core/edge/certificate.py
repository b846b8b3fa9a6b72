"""The edge's certificate as the TLS server consumes it: a value, a slot, a loader.

The ACME side writes the leaf key and its chain atomically at the state layout's places
and hands each new one to ``CertificateSlot.swap``; the edge reads only the slot. Every
certificate gets its own ``ssl.SSLContext``, built once when it is swapped in: a new
handshake takes the newest context, a connection in flight keeps the one it began with,
so a renewal drops nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
from cryptography import x509

from valis_core.errors import ValisError
from valis_core.state_layout import edge_certificate_path, edge_key_path

ALPN_PROTOCOLS: tuple[str, ...] = ("h2", "http/1.1")
"""What the edge offers, in its order of preference (RFC 7301): HTTP/2 first."""


class EdgeCertificateError(ValisError):
    """The edge's certificate or key is unreadable, malformed or not a pair."""


@attrs.frozen
class EdgeCertificate:
    """One leaf: its chain (PEM, leaf first), its private key (PEM), and its expiry."""

    chain_pem: bytes = attrs.field(repr=False)
    key_pem: bytes = attrs.field(repr=False)
    not_after: datetime.datetime


def certificate_from_pem(chain_pem: bytes, key_pem: bytes, *, origin: str) -> EdgeCertificate:
    """The value for a chain and key, its expiry read from the leaf (the chain's first).

    ``origin`` names where the bytes came from, for the error an operator reads.
    """
    try:
        leaf = x509.load_pem_x509_certificate(chain_pem)
    except ValueError as exc:
        raise EdgeCertificateError(
            f"edge certificate {origin}: not a PEM certificate chain ({exc}); "
            "remove it so the node obtains a new one"
        ) from None
    return EdgeCertificate(
        chain_pem=chain_pem, key_pem=key_pem, not_after=leaf.not_valid_after_utc
    )


def load_edge_certificate(state_dir: Path) -> EdgeCertificate | None:
    """The certificate in ``state_dir``, or ``None`` when the node has none yet.

    Both files or neither: a key without its chain (or the reverse) is an error an
    operator must look at, never silently "no certificate".
    """
    chain_path = edge_certificate_path(state_dir)
    key_path = edge_key_path(state_dir)
    chain = _read_or_none(chain_path)
    key = _read_or_none(key_path)
    if chain is None and key is None:
        return None
    if chain is None or key is None:
        missing = chain_path if chain is None else key_path
        raise EdgeCertificateError(
            f"edge certificate: {missing} is missing while its pair is present; "
            "restore both from the backup set, or remove both so the node obtains a new one"
        )
    certificate = certificate_from_pem(chain, key, origin=str(chain_path))
    tls_context(certificate)  # refuses a key that is not the leaf's
    return certificate


def tls_context(certificate: EdgeCertificate) -> ssl.SSLContext:
    """A server context for ``certificate``: TLS 1.2 or 1.3, ALPN h2 and http/1.1.

    ``ssl`` loads keys only from files: the PEM goes through an anonymous in-memory file
    (memfd), so no copy of the key ever touches a disk.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(list(ALPN_PROTOCOLS))
    with _memfile(certificate.chain_pem) as chain, _memfile(certificate.key_pem) as key:
        try:
            context.load_cert_chain(certfile=chain, keyfile=key)
        except ssl.SSLError as exc:
            raise EdgeCertificateError(
                f"edge certificate (valid until {certificate.not_after:%Y-%m-%d}): its key "
                f"and chain do not load as a pair ({exc.reason or exc}); remove both so "
                "the node obtains a new one"
            ) from None
    return context


@attrs.frozen
class _Loaded:
    certificate: EdgeCertificate
    context: ssl.SSLContext


class CertificateSlot:
    """The edge's current certificate and its TLS context; ``swap`` replaces both at once.

    One reference assignment is the only mutation, so a reader sees the old pair or the
    new one, never half of each. Listeners (``on_swap``) learn of each new certificate:
    the on-demand edge starts when the first one arrives.
    """

    def __init__(self, certificate: EdgeCertificate | None = None) -> None:
        self._loaded: _Loaded | None = None
        self._listeners: list[Callable[[EdgeCertificate], None]] = []
        if certificate is not None:
            self.swap(certificate)

    def swap(self, certificate: EdgeCertificate) -> None:
        """Serve ``certificate`` to every handshake from now on; refuse a broken pair.

        Call it from the resident's trio thread (listeners may wake trio tasks)."""
        self._loaded = _Loaded(certificate, tls_context(certificate))
        for listener in tuple(self._listeners):
            listener(certificate)

    def current(self) -> EdgeCertificate | None:
        loaded = self._loaded
        return None if loaded is None else loaded.certificate

    def context(self) -> ssl.SSLContext | None:
        """The context a new handshake uses, or ``None`` before the first certificate."""
        loaded = self._loaded
        return None if loaded is None else loaded.context

    def on_swap(self, listener: Callable[[EdgeCertificate], None]) -> None:
        self._listeners.append(listener)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EdgeCertificateError(
            f"edge certificate: cannot read {path} ({exc.strerror}); "
            "it must be readable by the run account"
        ) from None


@contextlib.contextmanager
def _memfile(data: bytes) -> Iterator[str]:
    fd = os.memfd_create("valis-edge", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)
