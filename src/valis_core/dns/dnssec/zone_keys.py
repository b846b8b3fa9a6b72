"""The zone-signing keys on disk: one PEM file per key under the state directory's
``dnssec`` directory (``state_layout.SIGNING_KEYS``), 0600, written atomically.

Keys live with the node's state, not in operator state: the database is shared with
whoever can read it, a private key is the node's alone. They are in the backup set, so an
evacuated or restored successor signs with the same keys and the parent's DS still holds.
A file is named as BIND names its key files, ``K<zone>+<algorithm>+<tag>.pem``, and holds
the private key as unencrypted PKCS #8; the zone, algorithm and tag in the name are
checked against the key when it is read, so a file renamed by hand is refused rather
than served under the wrong zone. The tag also says the key's role, since a DNSKEY's
flags enter its tag: a key whose tag is the one its DNSKEY has with flags 257 is a CSK or
KSK, one whose tag is that with flags 256 a ZSK (the two tags of one key always differ).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

import valis_core.dns.dnssec.signing as dnssec
from valis_core.atomic import write_atomic
from valis_core.dns.dnssec.signing import CSK_FLAGS, ZSK_FLAGS, DnssecError, ZoneKey
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
        if key.tag != int(match["tag"]):  # a ZSK's file: its tag is with flags 256
            key = ZoneKey(key.private, ZSK_FLAGS)
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


def ensure_zone_key(
    state_dir: Path, zone: str, algorithm: int | None
) -> tuple[ZoneKey, bool]:
    """The zone's combined signing key (``ensure_signing_keys`` without a split)."""
    keys, made = ensure_signing_keys(state_dir, zone, algorithm, split=False)
    return keys[0], made


def ensure_signing_keys(
    state_dir: Path, zone: str, algorithm: int | None, *, split: bool | None
) -> tuple[tuple[ZoneKey, ...], bool]:
    """The zone's signing keys, made (with ``algorithm``, by default 13) and written if it
    has none: a CSK, or with ``split`` a KSK then a ZSK; whether they were made. A zone
    holding keys keeps their algorithm and kind where ``algorithm`` or ``split`` is
    ``None`` (not named); naming another algorithm, or the other kind (a CSK where a
    split is held, or the reverse), is refused: a rollover keeps both. Written as the
    state directory's owner, so a key made by root is still the run account's."""
    held = load_key_ring(state_dir).get(file_zone(zone), {})
    if not held:
        first = make_zone_key(state_dir, zone, algorithm or dnssec.DEFAULT_ALGORITHM, ())
        if not split:
            return (first,), True
        try:
            second = make_zone_key(state_dir, zone, first.algorithm, (first.tag,), ZSK_FLAGS)
        except BaseException:
            forget_zone_key(state_dir, zone, first)
            raise
        return (first, second), True
    ksks = [key for key in held.values() if key.flags == CSK_FLAGS]
    zsks = [key for key in held.values() if key.flags == ZSK_FLAGS]
    if len(ksks) != 1 or len(zsks) > 1:
        raise ZoneKeyError(
            f"zone {zone} has {len(held)} signing keys in {signing_keys_dir(state_dir)}: "
            f"a rollover is under way ('valis zone ds {zone}' shows its step) and its "
            "key changes only by that roll; if none is, move aside the key a finished "
            "roll left"
        )
    keys = (ksks[0], *zsks)
    if split is not None and bool(zsks) != split:
        held_kind = "a KSK and a ZSK" if zsks else "a combined signing key (CSK)"
        raise ZoneKeyError(
            f"zone {zone} already signs with {held_kind} (key tag "
            f"{', '.join(str(key.tag) for key in keys)}); run 'valis zone sign' "
            f"{'with' if zsks else 'without'} --split, as it was signed: changing "
            "between a CSK and a split is not offered"
        )
    if algorithm is not None and keys[0].algorithm != algorithm:
        raise ZoneKeyError(
            f"zone {zone} already signs with algorithm {keys[0].algorithm} (key tag "
            f"{keys[0].tag}); 'valis zone rollover' keeps the algorithm, and an "
            "algorithm rollover is not offered"
        )
    return keys, False


def make_zone_key(
    state_dir: Path, zone: str, algorithm: int, avoid: tuple[int, ...],
    flags: int = CSK_FLAGS,
) -> ZoneKey:
    """A new key for ``zone`` with the DNSKEY ``flags`` (a CSK's or KSK's, or a ZSK's),
    written, whose tag is none of ``avoid`` (the keys the zone holds: two keys sharing a
    tag would be one file and one DS)."""
    key = ZoneKey(dnssec.generate_key(algorithm), flags)
    for _ in range(100):
        if key.tag not in avoid:
            break
        key = ZoneKey(dnssec.generate_key(algorithm), flags)
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
