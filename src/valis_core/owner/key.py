"""The owner terminus's TSIG key, derived from the owner Ed25519 seed.

The key is not stored anywhere: it is HKDF-SHA256 (RFC 5869, no salt) over the 32-byte
owner seed with the fixed info string ``HKDF_INFO``, 32 bytes long, used as an
hmac-sha256 TSIG key (RFC 8945) named ``KEY_NAME``. Whoever holds the owner seed (the
node, or the backup set) can therefore recover the key, and a node restored from its
backup set accepts the updates its operators' key files already sign. Changing the info
string, the length or the name would orphan every operator's key file: they are part of
the protocol, hence the version in the info string.

The secret is sensitive. ``TsigKey`` keeps it out of its ``repr``; only ``bind_text``
spells it, for the operator who asked for it on stdout.
"""

from __future__ import annotations

import base64

import attrs
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_NAME = "valis-owner."
ALGORITHM = "hmac-sha256"
HKDF_INFO = b"valis owner tsig v1"
SECRET_SIZE = 32


@attrs.frozen
class TsigKey:
    """A TSIG key: its name (absolute), algorithm and secret."""

    name: str
    algorithm: str
    secret: bytes = attrs.field(repr=False)

    @property
    def secret_base64(self) -> str:
        return base64.b64encode(self.secret).decode("ascii")

    def bind_text(self) -> str:
        """The key as a BIND ``key`` statement, the file ``nsupdate -k`` reads."""
        return (
            f'key "{self.name}" {{\n'
            f"\talgorithm {self.algorithm};\n"
            f'\tsecret "{self.secret_base64}";\n'
            "};\n"
        )


def derive_owner_tsig(key: Ed25519PrivateKey) -> TsigKey:
    """The owner terminus's TSIG key for the node whose owner key is ``key``."""
    secret = HKDF(
        algorithm=hashes.SHA256(), length=SECRET_SIZE, salt=None, info=HKDF_INFO
    ).derive(key.private_bytes_raw())
    return TsigKey(name=KEY_NAME, algorithm=ALGORITHM, secret=secret)
