"""Custody of the node's owner Ed25519 identity."""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.identity.custody import (
        CustodyError,
        derive_x25519,
        load_keyfile,
        public_key_hex,
    )

__all__ = [
    "CustodyError",
    "derive_x25519",
    "load_keyfile",
    "public_key_hex",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "CustodyError": "valis_core.identity.custody",
        "derive_x25519": "valis_core.identity.custody",
        "load_keyfile": "valis_core.identity.custody",
        "public_key_hex": "valis_core.identity.custody",
    },
)
