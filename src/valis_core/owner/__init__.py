"""The owner terminus: the node's authenticated write path (DNS UPDATE over TSIG)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from valis_core.face import lazy_attributes

if TYPE_CHECKING:
    from valis_core.owner.key import TsigKey, derive_owner_tsig

__all__ = [
    "TsigKey",
    "derive_owner_tsig",
]

__getattr__ = lazy_attributes(
    __name__,
    {
        "TsigKey": "valis_core.owner.key",
        "derive_owner_tsig": "valis_core.owner.key",
    },
)
