"""Custody of the node's owner Ed25519 identity."""

from valis_core.identity.custody import (
    CustodyError,
    derive_x25519,
    load_keyfile,
    public_key_hex,
)

__all__ = ["CustodyError", "derive_x25519", "load_keyfile", "public_key_hex"]
