"""The edge's ACME files in a state directory: minted once, private, and checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.scenario.edge_ca import install, make_test_ca
from valis_core.edge import acme_store
from valis_core.edge.acme_store import AcmeStoreError
from valis_core.state_layout import (
    acme_account_key_path,
    edge_certificate_path,
    edge_key_path,
)


def _rsa_pem() -> bytes:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def test_keys_are_minted_once_private_and_kept(tmp_path: Path) -> None:
    account = acme_store.account_key(tmp_path)
    leaf = acme_store.leaf_key(tmp_path)
    assert account != leaf
    for path in (acme_account_key_path(tmp_path), edge_key_path(tmp_path)):
        assert path.stat().st_mode & 0o777 == 0o600
    assert edge_key_path(tmp_path).parent.stat().st_mode & 0o777 == 0o700
    assert acme_store.account_key(tmp_path) == account
    assert acme_store.leaf_key(tmp_path) == leaf


def test_a_leaf_key_alone_is_no_certificate_yet(tmp_path: Path) -> None:
    acme_store.leaf_key(tmp_path)
    assert acme_store.held_certificate(tmp_path) is None


def test_a_chain_without_its_key_is_refused_naming_both(tmp_path: Path) -> None:
    install(make_test_ca().issue(("doh.example.test",)), tmp_path)
    edge_key_path(tmp_path).unlink()
    with pytest.raises(AcmeStoreError, match=r"leaf\.crt is there but its key"):
        acme_store.held_certificate(tmp_path)


def test_a_chain_for_another_key_is_never_stored(tmp_path: Path) -> None:
    key = acme_store.leaf_key(tmp_path)
    other = make_test_ca().issue(("doh.example.test",))
    with pytest.raises(AcmeStoreError, match="not for the leaf key"):
        acme_store.store_chain(tmp_path, other.chain_pem, key)
    assert not edge_certificate_path(tmp_path).exists()
    stored = acme_store.store_chain(tmp_path, other.chain_pem, other.key_pem)
    assert edge_certificate_path(tmp_path).read_bytes() == other.chain_pem
    assert stored.not_after == other.not_after


def test_an_operators_rsa_leaf_key_is_used_but_the_account_key_must_be_ecdsa(
    tmp_path: Path,
) -> None:
    edge_key_path(tmp_path).parent.mkdir(mode=0o700)
    edge_key_path(tmp_path).write_bytes(_rsa_pem())
    assert acme_store.leaf_key(tmp_path) == edge_key_path(tmp_path).read_bytes()
    acme_account_key_path(tmp_path).write_bytes(_rsa_pem())
    with pytest.raises(AcmeStoreError, match="not an ECDSA key"):
        acme_store.account_key(tmp_path)


def test_a_damaged_key_is_refused_pointing_at_the_backup_set(tmp_path: Path) -> None:
    acme_account_key_path(tmp_path).parent.mkdir(mode=0o700)
    acme_account_key_path(tmp_path).write_bytes(b"not a key")
    with pytest.raises(AcmeStoreError, match="restore it from the backup set"):
        acme_store.account_key(tmp_path)
