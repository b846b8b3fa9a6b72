"""The owner terminus: the node's authenticated write path (DNS UPDATE over TSIG)."""

from valis_core.owner.key import TsigKey, derive_owner_tsig

__all__ = ["TsigKey", "derive_owner_tsig"]
