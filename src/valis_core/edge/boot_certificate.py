"""The certificate an elected edge comes up with, from the state directory alone.

The resident's ``edge`` stage starts on it, and condense asks the same question before it
claims the fence (so a successor whose edge would stop its boot never fences its
predecessor out). What the state directory decides on its own:

- a chain without its key, or a chain that is not the key's: refused always;
- no certificate at all: refused, unless the node obtains one over ACME (the edge and
  ``VALIS_SERVED_DOMAIN`` and ``VALIS_ACME_DIRECTORY_URL`` set: the ``acme`` stage asks
  the CA, which only a node holding the fence can do) or waits for one
  (``VALIS_EDGE_CERT=on-demand``).

A leaf key alone is an ACME order that has not finished when the node obtains its
certificates (the key is kept for the next order); without ACME it is half a pair.
"""

from __future__ import annotations

from pathlib import Path

from valis_core.edge.acme_store import held_certificate
from valis_core.edge.certificate import EdgeCertificate, EdgeCertificateError, load_edge_certificate
from valis_core.state_layout import edge_certificate_path


class NoEdgeCertificate(EdgeCertificateError):
    """An elected edge with no certificate, none to be obtained and none waited for."""


def boot_certificate(state_dir: Path, *, acme: bool, on_demand: bool) -> EdgeCertificate | None:
    """The certificate ``state_dir`` holds for the elected edge (``None``: none yet, and
    the node obtains one over ACME or waits for it); raises ``EdgeCertificateError`` (or
    ``AcmeStoreError`` for a chain without its key) when the edge would refuse to come up
    on what it holds."""
    certificate = held_certificate(state_dir) if acme else load_edge_certificate(state_dir)
    if certificate is None and not acme and not on_demand:
        raise NoEdgeCertificate(
            f"no certificate at {edge_certificate_path(state_dir)} (and its key): the "
            "elected edge serves only with one; obtain it (ACME) or restore the backup "
            "set, or set VALIS_EDGE_CERT=on-demand to serve DNS meanwhile"
        )
    return certificate
