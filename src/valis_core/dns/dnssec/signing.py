"""DNSSEC's arithmetic: DNSKEY, DS, key tags, canonical RRsets and RRSIGs (RFC 4034).

Pure: a key is a value (``ZoneKey``, holding a ``cryptography`` private key), names are
uncompressed wire forms, and every function returns bytes; the time a signature is made
at is a parameter. Algorithms 13 (ECDSA P-256 with SHA-256, RFC 6605) and 15 (Ed25519,
RFC 8080) are the ones a node signs with: both give short keys and signatures, so signed
answers stay within a 1232-octet UDP payload.

The canonical form (RFC 4034 section 6) is owner and embedded names lowercased, RRs in
the order of their canonical rdata, duplicates dropped. Which types have names in their
rdata to lowercase is RFC 4034 section 6.2's list less NSEC (RFC 6840 section 5.1);
those rdatas are re-encoded by dnspython, the rest taken as they are.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

import attrs
import dns.rdata
import dns.rdataclass
import dns.rdatatype
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from valis_core.dns.wire import names as wire
from valis_core.dns.wire.records import IN, NSEC, RRSIG, RRset
from valis_core.errors import ValisError

ECDSAP256SHA256 = 13
ED25519 = 15
ALGORITHMS = (ECDSAP256SHA256, ED25519)
DEFAULT_ALGORITHM = ECDSAP256SHA256
"""The algorithm a zone signed for the first time gets unless another is named."""

DNSKEY = int(dns.rdatatype.DNSKEY)
CDS = int(dns.rdatatype.CDS)
CDNSKEY = int(dns.rdatatype.CDNSKEY)
NXNAME = 128
"""RFC 9824's meta type: set in a compact denial NSEC's bitmap, the name does not exist."""

CSK_FLAGS = 257
"""Zone key and secure entry point: one key signing both the DNSKEY RRset and the zone
(a CSK), or a split zone's KSK, signing the DNSKEY RRset alone."""
ZSK_FLAGS = 256
"""Zone key without the secure entry point: a split zone's ZSK, signing the rest."""
PROTOCOL = 3
SHA256_DIGEST = 2

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

_NAMED_RDATA = frozenset(
    int(getattr(dns.rdatatype, name))
    for name in (
        "NS", "MD", "MF", "CNAME", "SOA", "MB", "MG", "MR", "PTR", "MINFO", "MX", "RP",
        "AFSDB", "RT", "SIG", "PX", "NXT", "NAPTR", "KX", "SRV", "DNAME", "A6", "RRSIG",
    )
)
"""Types whose rdata names are lowercased in the canonical form (RFC 4034 section 6.2,
without NSEC and HINFO as RFC 6840 section 5.1 corrects)."""

_RRSIG_FIXED = struct.Struct("!HBBIIIH")
_RR_TAIL = struct.Struct("!HHIH")


class DnssecError(ValisError):
    """A signing key that cannot be used as given."""


@attrs.frozen(eq=False)
class ZoneKey:
    """One zone's signing key: the private key, its algorithm, its DNSKEY flags, and the
    DNSKEY rdata and key tag derived from them (computed once)."""

    private: PrivateKey
    flags: int = CSK_FLAGS
    algorithm: int = attrs.field(init=False)
    dnskey: bytes = attrs.field(init=False)
    tag: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        algorithm = algorithm_of(self.private)
        rdata = dnskey_rdata(self.private, self.flags)
        object.__setattr__(self, "algorithm", algorithm)
        object.__setattr__(self, "dnskey", rdata)
        object.__setattr__(self, "tag", key_tag(rdata))


def generate_key(algorithm: int) -> PrivateKey:
    """A new private key for ``algorithm`` (13 or 15)."""
    if algorithm == ECDSAP256SHA256:
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == ED25519:
        return ed25519.Ed25519PrivateKey.generate()
    raise DnssecError(
        f"DNSSEC algorithm {algorithm} is not one valis signs with; choose 13 (ECDSA "
        "P-256 with SHA-256) or 15 (Ed25519)"
    )


def algorithm_of(private: PrivateKey) -> int:
    if isinstance(private, ed25519.Ed25519PrivateKey):
        return ED25519
    if isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(
        private.curve, ec.SECP256R1
    ):
        return ECDSAP256SHA256
    raise DnssecError("the signing key is neither ECDSA P-256 nor Ed25519")


def public_key_bytes(private: PrivateKey) -> bytes:
    """The public key as DNSKEY carries it: Ed25519's 32 octets (RFC 8080), or P-256's
    x and y, 32 octets each (RFC 6605 section 4)."""
    public = private.public_key()
    if isinstance(public, ed25519.Ed25519PublicKey):
        return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    point = public.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return point[1:]


def dnskey_rdata(private: PrivateKey, flags: int = CSK_FLAGS) -> bytes:
    return struct.pack("!HBB", flags, PROTOCOL, algorithm_of(private)) + public_key_bytes(
        private
    )


def key_tag(dnskey: bytes) -> int:
    """RFC 4034 appendix B's checksum over a DNSKEY rdata."""
    total = 0
    for i, octet in enumerate(dnskey):
        total += octet << 8 if i % 2 == 0 else octet
    total += (total >> 16) & 0xFFFF
    return total & 0xFFFF


def ds_rdata(owner: bytes, dnskey: bytes) -> bytes:
    """The DS (SHA-256, digest type 2) of the DNSKEY rdata ``dnskey`` at ``owner``; the
    same rdata is the apex's CDS (RFC 7344)."""
    digest = hashlib.sha256(owner.lower() + dnskey).digest()
    return struct.pack("!HBB", key_tag(dnskey), dnskey[3], SHA256_DIGEST) + digest


def canonical_rdata(rtype: int, rdata: bytes) -> bytes:
    """``rdata`` (uncompressed wire form) in canonical form: embedded names lowercased
    for the types RFC 4034 section 6.2 lists."""
    if rtype not in _NAMED_RDATA:
        return rdata
    parsed = dns.rdata.from_wire(
        dns.rdataclass.IN, dns.rdatatype.RdataType(rtype), rdata, 0, len(rdata)
    )
    return parsed.to_digestable()


def rrsig_labels(owner: bytes) -> int:
    """The RRSIG's Labels field: the owner's labels, less the root and a leading ``*``."""
    count = len(wire.label_offsets(owner))
    return count - 1 if owner.startswith(b"\x01*") else count


def signed_data(
    owner: bytes,
    rtype: int,
    ttl: int,
    rdatas: Iterable[bytes],
    rrsig_fixed: bytes,
) -> bytes:
    """What an RRSIG signs (RFC 4034 section 3.1.8.1): its own rdata up to the signature,
    then the RRset in canonical form and order, each RR once."""
    head = owner.lower() + _RR_TAIL.pack(rtype, IN, ttl, 0)[:8]
    forms = sorted({canonical_rdata(rtype, rdata) for rdata in rdatas})
    parts = [rrsig_fixed]
    for form in forms:
        parts.append(head)
        parts.append(len(form).to_bytes(2, "big"))
        parts.append(form)
    return b"".join(parts)


def sign_rrset(
    key: ZoneKey,
    signer: bytes,
    owner: bytes,
    rtype: int,
    rrset: RRset,
    *,
    inception: int,
    expiration: int,
) -> bytes:
    """The RRSIG rdata over the RRset ``owner``/``rtype`` (for an answer synthesized from
    a wildcard, ``owner`` is the wildcard), signed by ``key`` of the zone ``signer``."""
    ttl, rdatas = rrset
    fixed = _RRSIG_FIXED.pack(
        rtype,
        key.algorithm,
        rrsig_labels(owner),
        ttl,
        expiration & 0xFFFFFFFF,
        inception & 0xFFFFFFFF,
        key.tag,
    ) + signer.lower()
    data = signed_data(owner, rtype, ttl, rdatas, fixed)
    return fixed + signature(key.private, data)


def signature(private: PrivateKey, data: bytes) -> bytes:
    """The signature field: Ed25519's 64 octets, or ECDSA's r and s, 32 octets each."""
    if isinstance(private, ed25519.Ed25519PrivateKey):
        return private.sign(data)
    r, s = decode_dss_signature(private.sign(data, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def type_bitmap(types: Iterable[int]) -> bytes:
    """NSEC's Type Bit Maps field (RFC 4034 section 4.1.2) for ``types``."""
    windows: dict[int, bytearray] = {}
    for rtype in sorted(set(types)):
        window, low = divmod(rtype, 256)
        bits = windows.setdefault(window, bytearray())
        index = low // 8
        if len(bits) <= index:
            bits.extend(bytes(index + 1 - len(bits)))
        bits[index] |= 0x80 >> (low % 8)
    return b"".join(bytes((window, len(bits))) + bytes(bits) for window, bits in sorted(
        windows.items()
    ))


def nsec_rdata(next_name: bytes, types: Iterable[int]) -> bytes:
    """An NSEC's rdata: the next name (as given: NSEC rdata is not lowercased) and the
    bitmap of ``types`` together with RRSIG and NSEC."""
    return next_name + type_bitmap({*types, RRSIG, NSEC})


def successor(name: bytes) -> bytes:
    """The immediate successor of ``name`` in canonical order (RFC 4471 section 3.1.2):
    ``\\000.name``, or when that is too long, the name itself with its first label grown
    or incremented. Compact denial's NSEC records end here (RFC 9824 section 3)."""
    if len(name) + 2 <= wire.MAX_NAME:
        return b"\x01\x00" + name
    return name  # pragma: no cover - 254-octet names: an NSEC to itself still denies


def next_sibling(name: bytes) -> bytes:
    """The first name after ``name`` and all its descendants in canonical order: its
    first label with a zero octet appended. The NSEC covering a wildcard answer's next
    closer name ends here, not beneath that name: validators take the closest encloser
    from the NSEC's names, and it must be the wildcard's parent (RFC 4035 section
    5.3.4)."""
    size = name[0]
    if size < wire.MAX_LABEL and len(name) < wire.MAX_NAME:
        return bytes((size + 1,)) + name[1 : 1 + size] + b"\x00" + name[1 + size :]
    return successor(name)  # pragma: no cover - a 63-octet label: the plain successor


def predecessor(name: bytes, apex: bytes) -> bytes:
    """A name just before ``name`` in canonical order, at or below ``apex``: the owner
    of an NSEC covering ``name`` (RFC 4471 section 3.1.3, simplified: the first label's
    last octet decremented and filled out with ``\\377``, or dropped when it is zero)."""
    if name == apex:
        return name
    size = name[0]
    label = name[1 : 1 + size].lower()
    rest = name[1 + size :]
    last = label[-1]
    if last == 0:
        shorter = label[:-1]
        return bytes((len(shorter),)) + shorter + rest if shorter else rest
    lowered = last - 1
    if 0x41 <= lowered <= 0x5A:  # an uppercase letter sorts as lowercase: step below it
        lowered = 0x40
    grown = label[:-1] + bytes((lowered,))
    room = min(wire.MAX_LABEL - len(grown), wire.MAX_NAME - len(rest) - len(grown) - 1)
    grown += b"\xff" * max(room, 0)
    return bytes((len(grown),)) + grown + rest


def canonical_key(name: bytes) -> tuple[bytes, ...]:
    """A sort key giving RFC 4034 section 6.1's canonical order of names."""
    offsets = wire.label_offsets(name)
    lower = name.lower()
    return tuple(lower[at + 1 : at + 1 + lower[at]] for at in reversed(offsets))
