"""The owner terminus's TSIG key is HKDF-SHA256 of the owner seed, recoverable by anyone
holding the seed, and printed in the form nsupdate reads."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.owner.key import ALGORITHM, HKDF_INFO, KEY_NAME, derive_owner_tsig

seeds = st.binary(min_size=32, max_size=32)


def rfc5869(seed: bytes, info: bytes, length: int) -> bytes:
    """HKDF-SHA256 with no salt, written out from RFC 5869 §2."""
    prk = hmac.new(b"\x00" * 32, seed, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


@settings(max_examples=scaled(0.5))
@given(seeds)
def test_the_secret_is_hkdf_sha256_of_the_owner_seed(seed: bytes) -> None:
    key = derive_owner_tsig(Ed25519PrivateKey.from_private_bytes(seed))
    assert key.secret == rfc5869(seed, HKDF_INFO, 32)
    assert (key.name, key.algorithm) == (KEY_NAME, ALGORITHM) == ("valis-owner.", "hmac-sha256")


@settings(max_examples=scaled(0.3))
@given(seeds, seeds)
def test_different_owner_seeds_give_different_keys(a: bytes, b: bytes) -> None:
    key_a = derive_owner_tsig(Ed25519PrivateKey.from_private_bytes(a))
    key_b = derive_owner_tsig(Ed25519PrivateKey.from_private_bytes(b))
    assert (key_a == key_b) == (a == b)


@settings(max_examples=scaled(0.3))
@given(seeds)
def test_the_bind_key_statement_carries_name_algorithm_and_secret(seed: bytes) -> None:
    key = derive_owner_tsig(Ed25519PrivateKey.from_private_bytes(seed))
    text = key.bind_text()
    found = re.fullmatch(
        r'key "([^"]+)" \{\n\talgorithm ([a-z0-9-]+);\n\tsecret "([A-Za-z0-9+/=]+)";\n\};\n',
        text,
    )
    assert found is not None
    assert found.group(1) == KEY_NAME
    assert found.group(2) == ALGORITHM
    assert base64.b64decode(found.group(3)) == key.secret


def test_the_secret_stays_out_of_the_repr() -> None:
    key = derive_owner_tsig(Ed25519PrivateKey.from_private_bytes(b"\x07" * 32))
    assert key.secret_base64 not in repr(key)
    assert repr(key.secret) not in repr(key)
