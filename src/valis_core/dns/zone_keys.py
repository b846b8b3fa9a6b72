"""The zone-signing keys on disk: one PEM file per key under the state directory's
``dnssec`` directory (``state_layout.SIGNING_KEYS``), 0600, written atomically.

Keys live with the node's state, not in operator state: the database is shared with
whoever can read it, a private key is the node's alone. They are in the backup set, so an
evacuated or restored successor signs with the same keys and the parent's DS still holds.
A file is named as BIND names its key files, ``K<zone>+<algorithm>+<tag>.pem``, and holds
the private key as unencrypted PKCS #8; the zone, algorithm and tag in the name are
checked against the key when it is read, so a file renamed by hand is refused rather
than served under the wrong zone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from valis_core.atomic import write_atomic
from valis_core.dns import dnssec
from valis_core.dns.dnssec import DnssecError, ZoneKey
from valis_core.state_layout import signing_keys_dir

KEY_MODE = 0o600
DIR_MODE = 0o700
MAX_KEY_BYTES = 16 << 10
MAX_KEYS = 10000
_FILE = re.compile(r"K(?P<zone>.+)\+(?P<algorithm>\d{3})\+(?P<tag>\d{5})\.pem")


class ZoneKeyError(DnssecError):
    """A signing key file that cannot be read or written."""


def file_zone(zone: str) -> str:
    """How a zone (absolute, any case) is written in a key file's name: lowercase,
    without the final dot (the root is ``.``)."""
    lowered = zone.lower()
    return lowered if lowered == "." else lowered.rstrip(".")


def key_file_name(zone: str, key: ZoneKey) -> str:
    return f"K{file_zone(zone)}+{key.algorithm:03d}+{key.tag:05d}.pem"


def encode_key(key: ZoneKey) -> bytes:
    return key.private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def decode_key(data: bytes, where: str) -> ZoneKey:
    """The key a PEM file holds, refused with where it was found if it is not a P-256
    or Ed25519 private key."""
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ZoneKeyError(
            f"signing key {where} is not an unencrypted PEM private key ({exc}); restore "
            "it from the backup set"
        ) from None
    if not isinstance(private, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        raise ZoneKeyError(f"signing key {where} is neither ECDSA P-256 nor Ed25519")
    try:
        return ZoneKey(private)
    except DnssecError as exc:
        raise ZoneKeyError(f"signing key {where}: {exc}") from None


def load_key_ring(state_dir: Path) -> dict[str, dict[int, ZoneKey]]:
    """Every signing key the state directory holds, by zone (``file_zone`` form) and key
    tag: one per zone, two while it rolls. A missing directory holds none. A file whose
    name does not match its key is refused."""
    root = signing_keys_dir(state_dir)
    try:
        entries = sorted(root.iterdir())
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ZoneKeyError(
            f"signing keys {root} cannot be listed: {exc.strerror or exc}; the directory "
            "must be the run account's"
        ) from None
    found: dict[str, dict[int, ZoneKey]] = {}
    for path in entries[:MAX_KEYS]:
        match = _FILE.fullmatch(path.name)
        if match is None:
            continue  # an atomic write's leftover, or a file that is not a key
        key = read_key_file(path)
        if (key.algorithm, key.tag) != (int(match["algorithm"]), int(match["tag"])):
            raise ZoneKeyError(
                f"signing key {path} holds algorithm {key.algorithm} tag {key.tag}, not "
                "what its name says; restore it from the backup set"
            )
        found.setdefault(match["zone"], {})[key.tag] = key
    return found


def load_zone_keys(state_dir: Path) -> dict[str, ZoneKey]:
    """Each zone's one signing key, by zone (``file_zone`` form). A zone holding two
    (a roll under way) is refused: which signs is operator state's to say."""
    found: dict[str, ZoneKey] = {}
    for zone, keys in load_key_ring(state_dir).items():
        if len(keys) > 1:
            raise ZoneKeyError(
                f"zone {zone} has {len(keys)} signing keys in "
                f"{signing_keys_dir(state_dir)}: a rollover is under way ('valis zone ds "
                f"{zone}.' shows its step) and its key changes only by that roll; if none "
                "is, move aside the key a finished roll left"
            )
        found[zone] = next(iter(keys.values()))
    return found


def read_key_file(path: Path) -> ZoneKey:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ZoneKeyError(
            f"signing key {path} cannot be read: {exc.strerror or exc}; it must be a file "
            "the run account can read"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_KEY_BYTES + 1)
    if len(data) > MAX_KEY_BYTES:
        raise ZoneKeyError(f"signing key {path} is larger than any key file")
    return decode_key(data, str(path))


def ensure_zone_key(state_dir: Path, zone: str, algorithm: int) -> tuple[ZoneKey, bool]:
    """The zone's signing key, made (with ``algorithm``) and written if it has none;
    whether it was made. A zone already holding a key of another algorithm is refused:
    changing algorithm is a rollover. Written as the state directory's owner, so a key
    made by root is still the run account's."""
    held = load_zone_keys(state_dir).get(file_zone(zone))
    if held is not None:
        if held.algorithm != algorithm:
            raise ZoneKeyError(
                f"zone {zone} already signs with algorithm {held.algorithm} (key tag "
                f"{held.tag}); 'valis zone rollover' keeps the algorithm, and an "
                "algorithm rollover is not offered"
            )
        return held, False
    return make_zone_key(state_dir, zone, algorithm, ()), True


def make_zone_key(
    state_dir: Path, zone: str, algorithm: int, avoid: tuple[int, ...]
) -> ZoneKey:
    """A new key for ``zone``, written, whose tag is none of ``avoid`` (the keys the zone
    holds: two keys sharing a tag would be one file and one DS)."""
    key = ZoneKey(dnssec.generate_key(algorithm))
    for _ in range(100):
        if key.tag not in avoid:
            break
        key = ZoneKey(dnssec.generate_key(algorithm))
    else:  # pragma: no cover - 100 draws of a 16-bit tag all taken
        raise ZoneKeyError(f"no new key for zone {zone} with a tag not yet held")
    root = signing_keys_dir(state_dir)
    state = state_dir.stat()
    owner = (state.st_uid, state.st_gid) if os.geteuid() == 0 else None
    if not root.exists():
        root.mkdir(mode=DIR_MODE)
        if owner is not None:
            os.chown(root, *owner)
    write_atomic(root / key_file_name(zone, key), encode_key(key), mode=KEY_MODE, owner=owner)
    return key


def forget_zone_key(state_dir: Path, zone: str, key: ZoneKey) -> None:
    """Remove a key just made, when what it was made for was refused, or the old key a
    finished roll leaves unused."""
    (signing_keys_dir(state_dir) / key_file_name(zone, key)).unlink(missing_ok=True)
