"""Custody of the node's owner Ed25519 seed: minted once, never overwritten, never loose.

The seed is the node's durable identity and is irreplaceable (it is in the backup-critical
set). The keyfile ``owner.key`` under the state directory holds the 32 raw seed bytes,
mode 0600. It is minted on the first boot only and created atomically and exclusively,
so two processes racing to mint end with one key: the loser loads the winner's. A
keyfile that other accounts could read or write, of the wrong size, or not a regular file
(a symlink among others) is refused rather than used or replaced.

``derive_x25519`` gives the key-agreement twin of the owner key by the standard
Ed25519→X25519 conversion (RFC 8032 §5.1.5 key expansion, RFC 7748 clamping): the
X25519 scalar is the clamped first half of SHA-512(seed), and so its public key is the
birational image u = (1 + y) / (1 - y) mod 2^255 - 19 of the Ed25519 public key.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from valis_core.atomic import create_exclusive
from valis_core.errors import ValisError
from valis_core.state_layout import KEYFILE, keyfile_path

KEYFILE_NAME = KEYFILE
KEYFILE_MODE = 0o600
SEED_SIZE = 32

__all__ = [
    "KEYFILE_MODE",
    "KEYFILE_NAME",
    "SEED_SIZE",
    "CustodyError",
    "derive_x25519",
    "keyfile_path",
    "load_keyfile",
    "load_or_create_keyfile",
    "public_key_hex",
]


class CustodyError(ValisError):
    """The owner keyfile cannot be minted or loaded safely."""


def load_or_create_keyfile(state_dir: Path) -> Ed25519PrivateKey:
    """Load the owner key from ``state_dir``, minting it if (and only if) none exists."""
    path = keyfile_path(state_dir)
    try:
        return _load(path)
    except FileNotFoundError:
        pass
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    try:
        create_exclusive(path, seed, mode=KEYFILE_MODE)
    except FileExistsError:
        pass  # another process minted first; its key is the node's key
    except OSError as exc:
        raise CustodyError(
            f"custody: cannot mint the owner key at {path}: {exc.strerror or exc} "
            "(the state directory must exist and be writable by the run account)"
        ) from exc
    try:
        return _load(path)
    except FileNotFoundError as exc:
        raise CustodyError(
            f"custody: the owner keyfile {path} vanished while minting; find what removes "
            "files from the state directory"
        ) from exc


def load_keyfile(state_dir: Path) -> Ed25519PrivateKey:
    """Load the owner key from ``state_dir``; never mint one (for operator tools, which
    must not give a node a new identity)."""
    path = keyfile_path(state_dir)
    try:
        return _load(path)
    except FileNotFoundError as exc:
        raise CustodyError(
            f"custody: no owner keyfile at {path}; give the node's state directory "
            "(--state-dir), or restore owner.key from the backup set"
        ) from exc


def derive_x25519(key: Ed25519PrivateKey) -> X25519PrivateKey:
    """The X25519 key whose public key is the birational image of ``key``'s public key."""
    digest = bytearray(hashlib.sha512(key.private_bytes_raw()).digest()[:32])
    digest[0] &= 248
    digest[31] &= 127
    digest[31] |= 64
    return X25519PrivateKey.from_private_bytes(bytes(digest))


def public_key_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw 32-byte public key in lowercase hex: the node's identity fingerprint."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes_raw().hex()


def _load(path: Path) -> Ed25519PrivateKey:
    """Read the seed at ``path``, refusing anything but a private 32-byte regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise CustodyError(
                f"custody: the owner keyfile {path} is a symlink; refusing to follow it. "
                "Put the keyfile itself there (restore it from the backup set if needed)"
            ) from exc
        raise CustodyError(
            f"custody: cannot read the owner keyfile {path}: {exc.strerror or exc} "
            "(it must be readable by the run account)"
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CustodyError(
                f"custody: the owner keyfile {path} is not a regular file; put the keyfile "
                "itself there (restore it from the backup set if needed)"
            )
        if info.st_mode & 0o077:
            raise CustodyError(
                f"custody: the owner keyfile {path} has mode "
                f"{stat.S_IMODE(info.st_mode):04o}, open to other accounts; run "
                f"`chmod 0600 {path}` and consider whether the seed leaked"
            )
        data = _read_all(fd, SEED_SIZE + 1)
    finally:
        os.close(fd)
    if info.st_size != SEED_SIZE or len(data) != SEED_SIZE:
        size = info.st_size if info.st_size != SEED_SIZE else len(data)
        raise CustodyError(
            f"custody: the owner keyfile {path} holds {size} bytes, not a "
            f"{SEED_SIZE}-byte seed; restore it from the backup set (never delete it: "
            "the seed is irreplaceable)"
        )
    return Ed25519PrivateKey.from_private_bytes(data)


def _read_all(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
