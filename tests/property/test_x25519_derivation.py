"""The owner key's X25519 twin is the birational image of its Ed25519 public key."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.identity.custody import derive_x25519, public_key_hex

P = 2**255 - 19


def montgomery_u(ed25519_public: bytes) -> bytes:
    """u = (1 + y) / (1 - y) mod p, from the y coordinate of an Edwards point."""
    y = int.from_bytes(ed25519_public, "little") & ((1 << 255) - 1)
    u = (1 + y) * pow(1 - y, P - 2, P) % P
    return u.to_bytes(32, "little")


@given(st.binary(min_size=32, max_size=32))
def test_the_derived_public_key_is_the_birational_map_of_the_ed25519_public_key(
    seed: bytes,
) -> None:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    derived = derive_x25519(key).public_key().public_bytes_raw()
    assert derived == montgomery_u(key.public_key().public_bytes_raw())


@settings(max_examples=scaled(0.3))
@given(st.binary(min_size=32, max_size=32), st.binary(min_size=32, max_size=32))
def test_two_owner_keys_agree_on_a_shared_secret_through_their_twins(
    seed_a: bytes, seed_b: bytes
) -> None:
    a = derive_x25519(Ed25519PrivateKey.from_private_bytes(seed_a))
    b = derive_x25519(Ed25519PrivateKey.from_private_bytes(seed_b))
    assert a.exchange(b.public_key()) == b.exchange(a.public_key())


def test_the_derivation_matches_a_known_vector() -> None:
    # RFC 8032 §7.1 test 1 secret key; the twin's public key computed independently
    # from the birational map of its published public key.
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    key = Ed25519PrivateKey.from_private_bytes(seed)
    assert public_key_hex(key) == (
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    )
    twin = derive_x25519(key)
    assert isinstance(twin, X25519PrivateKey)
    assert twin.public_key().public_bytes_raw() == montgomery_u(
        bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    )
