"""Structure-aware inputs for each fuzz target, drawn from a ``random.Random``.

Where the mutator breaks real inputs blindly, these build inputs that are right in
most places and wrong in one: a DNS query whose header, question and OPT are well
formed except for one chosen field; an UPDATE signed with the real key but carrying odd
sections; a tar archive made by ``tarfile`` with hostile member names, types and PAX
records; a delivery or backup set whose manifest is internally consistent (hashed, and
for a backup set signed by the owner key) but lists paths that collide or escape. The
same functions drive the campaign (seeded RNG) and the pytest tier (``st.randoms``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import struct
import tarfile
import time

import dns.message
import dns.name
import dns.opcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TSIG
import dns.tsig
import dns.update
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from valis_core.apply import delivery
from valis_core.ops import backup
from valis_core.owner.key import TsigKey, derive_owner_tsig

OWNER = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
"""The owner identity the backup sets and signed UPDATEs of the fuzz tier belong to."""
OWNER_SEED = bytes(range(32))
TSIG: TsigKey = derive_owner_tsig(OWNER)

NAMES = (
    "example.com.", "www.example.com.", "alias.example.com.", "mail.example.com.",
    "ns1.example.com.", "missing.example.com.", "a.b.c.example.com.", "example.org.", ".",
    "fuzz.example.", "x.wild.fuzz.example.", "wild.fuzz.example.", "deep.sub.fuzz.example.",
    "sub.fuzz.example.", "ns.sub.fuzz.example.", "a.dn.fuzz.example.", "loop1.fuzz.example.",
    "chain.fuzz.example.", "big.fuzz.example.", "srv.fuzz.example.", "mx.fuzz.example.",
    "ent.fuzz.example.", "x.y.ent.fuzz.example.",
)
_LONGEST_NAME = b"?" + b"a" * 63 + b"?" + b"b" * 63 + b"?" + b"c" * 63 + b"=" + b"d" * 61 + b"\x00"
"""A name of exactly 255 octets on the wire, the most RFC 1035 allows."""
QTYPES = (1, 2, 5, 6, 12, 15, 16, 28, 33, 39, 41, 43, 48, 250, 251, 252, 255, 65280, 0)


def _name_wire(rng: random.Random) -> bytes:
    choice = rng.random()
    if choice < 0.75:
        text = rng.choice(NAMES)
        if rng.random() < 0.3:
            text = "".join(c.upper() if rng.random() < 0.5 else c for c in text)
        wire = dns.name.from_text(text).to_wire()
        assert wire is not None
        return wire
    if choice < 0.85:
        labels = [bytes(rng.randrange(256) for _ in range(rng.choice((1, 3, 63)))) for _ in
                  range(rng.randrange(1, 5))]
        return b"".join(bytes([len(label)]) + label for label in labels) + b"\x00"
    if choice < 0.9:
        return _LONGEST_NAME
    if choice < 0.95:
        return rng.choice((b"\xc0\x0c", b"\x03www\xc0\x0c", b"\xc0\x11", b"\x40abc\x00", b"\x00"))
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20)))


def _opt(rng: random.Random) -> bytes:
    payload = rng.choice((0, 1, 511, 512, 513, 1232, 1233, 4096, 65535, rng.randrange(65536)))
    version = 0 if rng.random() < 0.8 else rng.choice((1, 255))
    flags = rng.choice((0, 0x8000, 0xFFFF))
    options = b""
    for _ in range(rng.choice((0, 0, 1, 2))):
        code = rng.choice((8, 10, 12, 15, 0, 65535))
        body = bytes(rng.randrange(256) for _ in range(rng.choice((0, 4, 8, 24))))
        length = len(body) if rng.random() < 0.8 else rng.choice((0, len(body) + 1, 0xFFFF))
        options += struct.pack("!HH", code, length) + body
    owner = b"\x00" if rng.random() < 0.9 else b"\x03www\x00"
    rdlen = len(options) if rng.random() < 0.9 else rng.choice((0, len(options) + 3))
    return owner + struct.pack("!HHIH", 41, payload, version << 16 | flags, rdlen) + options


def dns_query(rng: random.Random) -> bytes:
    """One query, mostly well formed: a question from the served names or odd bytes,
    maybe an OPT, maybe a TSIG or another section that the server must refuse."""
    if rng.random() < 0.05:
        message = dns.message.make_query(rng.choice(NAMES), "A")
        message.use_tsig(dns.tsig.Key(TSIG.name, TSIG.secret, TSIG.algorithm))
        return message.to_wire()
    qid = rng.randrange(65536)
    flags = rng.choice((0, 0x0100, 0x0010, 0x0110, 0x0120))
    if rng.random() < 0.1:
        flags |= rng.choice((1, 2, 4, 5, 15)) << 11
    if rng.random() < 0.03:
        flags |= 0x8000
    qtype = rng.choice(QTYPES) if rng.random() < 0.9 else rng.randrange(65536)
    qclass = 1 if rng.random() < 0.85 else rng.choice((3, 254, 255, 0, rng.randrange(65536)))
    questions = [_name_wire(rng) + struct.pack("!HH", qtype, qclass)]
    if rng.random() < 0.05:
        questions.append(questions[0])
    additional = []
    if rng.random() < 0.5:
        additional.append(_opt(rng))
    if rng.random() < 0.05:
        additional.append(_opt(rng))
    answers = []
    if rng.random() < 0.05:
        answers.append(b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + b"\xc0\x00\x02\x01")
    counts = [len(questions), len(answers), 0, len(additional)]
    if rng.random() < 0.1:
        counts[rng.randrange(4)] = rng.choice((0, 1, 2, 0xFFFF))
    body = b"".join(questions + answers + additional)
    if rng.random() < 0.05:
        body += bytes(rng.randrange(1, 8))
    return struct.pack("!HH4H", qid, flags, *counts) + body


def tcp_stream(rng: random.Random) -> bytes:
    """Several framed queries back to back, the last maybe cut short."""
    stream = b""
    for _ in range(rng.randrange(0, 5)):
        message = dns_query(rng) if rng.random() < 0.8 else bytes(rng.randrange(0, 40))
        stream += len(message).to_bytes(2, "big") + message
    if stream and rng.random() < 0.4:
        stream = stream[: rng.randrange(len(stream))]
    if rng.random() < 0.1:
        stream += rng.choice((b"\xff\xff", b"\x00", b"\x00\x00"))
    return stream


def signed_update(rng: random.Random) -> bytes:
    """An UPDATE (or another opcode) signed with the owner key, or a foreign one, or
    not at all; its sections drawn from the forms RFC 2136 gives them."""
    zone = rng.choice(("example.com.", "fuzz.example.", ".", "example.com.example.com."))
    key: dns.tsig.Key | None = dns.tsig.Key(TSIG.name, TSIG.secret, TSIG.algorithm)
    pick = rng.random()
    if pick < 0.1:
        key = None
    elif pick < 0.15:
        key = dns.tsig.Key("someone-else.", TSIG.secret, TSIG.algorithm)
    elif pick < 0.2:
        key = dns.tsig.Key(TSIG.name, b"\x00" * 32, TSIG.algorithm)
    elif pick < 0.25:
        key = dns.tsig.Key(TSIG.name, TSIG.secret, "hmac-sha512")
    update = dns.update.UpdateMessage(zone)
    for _ in range(rng.randrange(0, 4)):
        owner = rng.choice(("www", "new", "@", "a.b", "alias"))
        action = rng.randrange(6)
        if action == 0:
            update.present(owner)
        elif action == 1:
            update.absent(owner, rng.choice(("A", "TXT")))
        elif action == 2:
            update.add(owner, rng.randrange(0, 1 << 31), "A", f"192.0.2.{rng.randrange(256)}")
        elif action == 3:
            update.add(owner, 60, "TXT", '"' + "x" * rng.randrange(0, 255) + '"')
        elif action == 4:
            update.delete(owner, rng.choice(("A", "MX", "TYPE65280")))
        else:
            update.replace(owner, 300, "MX", f"{rng.randrange(65536)} mail")
    if rng.random() < 0.1:
        update.set_opcode(dns.opcode.Opcode(rng.choice((0, 1, 2, 4))))
    if key is not None and rng.random() < 0.05:
        # Signed at a moment far from now: a BADTIME to answer.
        return _signed_at(update.to_wire(), key, int(time.time()) - 3600)
    if key is not None:
        # Never a fudge of 0: the invariant's own check, a moment after receive's, could
        # then fall on the next second.
        update.use_tsig(key, fudge=rng.choice((300, 5)))
    return update.to_wire()


def _signed_at(wire: bytes, key: dns.tsig.Key, when: int) -> bytes:
    """``wire`` with a TSIG by ``key`` made at ``when`` (dnspython signs only at now)."""
    qid = int.from_bytes(wire[:2], "big")
    unsigned = dns.rdtypes.ANY.TSIG.TSIG(  # type: ignore[no-untyped-call]
        dns.rdataclass.ANY, dns.rdatatype.TSIG, key.algorithm, 0, 300, b"", qid, 0, b""
    )
    rdata, _ = dns.tsig.sign(wire, key, unsigned, when, None)  # type: ignore[no-untyped-call]
    body = rdata.to_wire()
    assert body is not None
    owner = key.name.to_wire()
    assert owner is not None
    record = owner + struct.pack("!HHIH", dns.rdatatype.TSIG, dns.rdataclass.ANY, 0, len(body))
    arcount = int.from_bytes(wire[10:12], "big") + 1
    return bytes(wire[:10] + arcount.to_bytes(2, "big") + wire[12:] + record + body)


# -- tar archives -------------------------------------------------------------------------

HOSTILE_NAMES = (
    "../escape", "/etc/passwd", "a/../../b", "./bin/valis", "bin//valis", "bin/./valis",
    "a\\b", "", ".", "x" * 120 + "/long", "é/ü", "config", "config/site", "owner.key/x",
    "store/manifest.json/../x", "bin", "bin/valis/inner", "n" * 300, "d/" * 1100 + "deep",
)
_TYPES = (
    tarfile.REGTYPE, tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
    tarfile.CHRTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE, b"Z",
)
_PAX = (
    {"path": "../pax-escape"}, {"size": "-1"}, {"size": "x"}, {"GNU.sparse.size": "x"},
    {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "s"},
    {"GNU.sparse.map": "1,x"}, {"GNU.sparse.numblocks": "z", "GNU.sparse.offset": "0"},
    {"hdrcharset": "BINARY"}, {"linkpath": "/"}, {"mtime": "nan"}, {"uid": "-5"},
    {"comment": "\udcff"},
)


def _member(
    rng: random.Random, name: str, data: bytes, hostile: bool
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    if hostile and rng.random() < 0.3:
        info.type = rng.choice(_TYPES)
        if info.type in (tarfile.SYMTYPE, tarfile.LNKTYPE):
            info.linkname = rng.choice(("/etc/passwd", "../x", "MANIFEST.json"))
    if hostile and rng.random() < 0.2:
        info.pax_headers = dict(rng.choice(_PAX))
    if info.type in (tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE,
                     tarfile.FIFOTYPE):
        info.size = 0
        return info, None
    return info, data


def tar_bytes(rng: random.Random, members: list[tuple[str, bytes]], hostile: bool) -> bytes:
    """A tar archive of ``members``, with hostile types, PAX records and formats when asked."""
    raw = io.BytesIO()
    fmt = rng.choice((tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT)) if hostile \
        else tarfile.PAX_FORMAT
    with tarfile.open(fileobj=raw, mode="w", format=fmt, encoding="utf-8",
                      errors="surrogateescape") as archive:
        for name, data in members:
            info, content = _member(rng, name, data, hostile)
            try:
                archive.addfile(info, io.BytesIO(content) if content is not None else None)
            except (ValueError, UnicodeError):
                continue  # tarfile will not write this header in this format
    out = raw.getvalue()
    if hostile and rng.random() < 0.1:
        out = out[: rng.randrange(len(out) + 1)]
    return out


def _pick_paths(rng: random.Random, usual: tuple[str, ...]) -> list[str]:
    paths = list(usual)
    for _ in range(rng.randrange(0, 3)):
        paths.append(rng.choice(HOSTILE_NAMES) if rng.random() < 0.6 else rng.choice(usual))
    return paths


def delivery_tarball(rng: random.Random) -> bytes:
    """A delivery whose manifest hashes what it lists, over usual and hostile paths;
    sometimes with a member unlisted, a listing missing, a mode or version out of range."""
    usual = ("bin/valis", "bin/fulcrum", "lib/systemd/system/valis.service", "share/doc/x.md")
    files: dict[str, tuple[bytes, str]] = {}
    for path in _pick_paths(rng, usual):
        mode = rng.choice(("0644", "0755")) if rng.random() < 0.9 else rng.choice(
            ("4755", "0777", "644", "0")
        )
        files[path] = (path.encode("utf-8", "surrogateescape") * rng.randrange(1, 4), mode)
    version = rng.choice(("0.1.0", "1.2.3+local"))
    if rng.random() < 0.1:
        version = rng.choice(("../up", "", "a" * 80, "v 1", "."))
    listed = [
        {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "mode": mode}
        for path, (data, mode) in sorted(files.items())
    ]
    if listed and rng.random() < 0.1:
        listed.pop(rng.randrange(len(listed)))
    if listed and rng.random() < 0.05:
        listed.append(dict(listed[0]))
    form = 1 if rng.random() < 0.9 else rng.choice((2, "1"))
    document: object = {"format": form, "version": version, "files": listed}
    if rng.random() < 0.05:
        document = rng.choice(([], None, {"format": 1}, {"format": 1, "version": "1", "files": {}}))
    manifest = json.dumps(document).encode()
    members = [(delivery.MANIFEST_NAME, manifest), *((p, d) for p, (d, _) in files.items())]
    if rng.random() < 0.3:
        rng.shuffle(members)
    tar = tar_bytes(rng, members, hostile=rng.random() < 0.3)
    return gzip.compress(tar, mtime=0) if rng.random() < 0.5 else tar


def backup_archive(rng: random.Random) -> bytes:
    """A backup set signed by the owner key, listing usual and hostile paths (hashed and
    sized right, so the reader gets past the signature to the files themselves)."""
    usual = ("owner.key", "store/manifest.json", "config/site-facts", "edge/leaf.key")
    contents: dict[str, bytes] = {}
    for path in _pick_paths(rng, usual):
        contents[path] = OWNER_SEED if path == "owner.key" else path.encode("utf-8", "replace")
    if rng.random() < 0.1:
        contents["owner.key"] = OWNER_SEED[: rng.randrange(40)]
    public = OWNER.public_key().public_bytes_raw().hex()
    if rng.random() < 0.05:
        public = rng.choice(("00" * 32, "ff" * 32, "0" * 63 + "x"))
    members = signed_backup_members(
        contents, public=public, generation=rng.choice((0, 3, -1, 1 << 70)),
        sign=rng.random() < 0.95,
    )
    return tar_bytes(rng, members, hostile=rng.random() < 0.3)


def signed_backup_members(
    contents: dict[str, bytes], *, public: str | None = None, generation: int = 3,
    sign: bool = True,
) -> list[tuple[str, bytes]]:
    """The members of a backup set of ``contents``: its manifest, hashing and sizing
    every file, signed by the owner key (or by nothing, with ``sign=False``)."""
    document = {
        "format": 1,
        "owner_public_key": public or OWNER.public_key().public_bytes_raw().hex(),
        "generation": generation,
        "files": [
            {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for path, data in sorted(contents.items())
        ],
    }
    manifest = (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()
    signature = OWNER.sign(manifest) if sign else bytes(64)
    return [(backup.MANIFEST_NAME, manifest), (backup.SIGNATURE_NAME, signature),
            *sorted(contents.items())]


_ROW_FIELDS = (
    (b"example.com.", b"fuzz.example.", b"EXAMPLE.COM.", b"other.example.", b"\\N", b""),
    (b"example.com.", b"www.example.com.", b"W.Example.COM.", b"*.example.com.",
     b"a.b.example.com.", b"\\\\065.example.com.", b"tab\\there.example.com.",
     b"x..example.com.", b"www.fuzz.example.", b"www", b"\\N", b"\xc3\xa9.example.com."),
    (b"A", b"a", b"NS", b"CNAME", b"SOA", b"PTR", b"MX", b"mx", b"SRV", b"AAAA", b"TXT",
     b"TYPE1", b" A", b"\\N"),
    (b"300", b"0", b"2147483647", b"2147483648", b"-1", b"1h", b"", b"\\N", b"007"),
    (b"192.0.2.1", b"192.0.2.256", b"01.2.3.4", b"ns1.example.com.", b"ns1",
     b"10 mail.example.com.", b"65536 mail.example.com.",
     b"ns1.example.com. h.example.com. 1 2 3 4 5", b"0 5 5060 sip.example.com.",
     b"2001:db8::1", b'"text"', b"a\\tb", b"\\\\# 4 c0000201", b"\\N", b""),
)
_GOOD_ROWS = (
    (b"A", b"192.0.2.1"), (b"a", b"10.0.0.255"), (b"MX", b"10 mail.example.com."),
    (b"Srv", b"0 5 5060 sip.example.com."), (b"PTR", b"p.example.net."),
    (b"NS", b"ns.example.net."), (b"AAAA", b"2001:db8::1"), (b"TXT", b'"text"'),
)


def copy_lines(rng: random.Random) -> bytes:
    """Lines of a COPY of the records table in text format, as the zone load reads them:
    mostly the rows of a zone that builds, and hostile fields, cut lines and stray bytes
    now and then."""
    out = [b"example.com.\texample.com.\tSOA\t300\tns1.example.com. h.example.com. 1 2 3 4 5\n",
           b"example.com.\texample.com.\tNS\t300\tns1.example.com.\n"]
    for _ in range(rng.randrange(0, 30)):
        rtype, rdata = rng.choice(_GOOD_ROWS)
        owner = rng.choice((b"www", b"W", b"*", b"a.b", b"m-x", b"_sip._tcp")) + b".example.com."
        fields = [b"example.com.", owner, rtype, rng.choice((b"300", b"0")), rdata]
        if rng.random() < 0.1:
            at = rng.randrange(len(fields))
            fields[at] = rng.choice(_ROW_FIELDS[at])
        line = b"\t".join(fields) + b"\n"
        if rng.random() < 0.02:
            at = rng.randrange(len(line))
            line = line[:at] + rng.choice((b"", b"\t", b"\xff", b"\\", b"\x00")) + line[at + 1 :]
        out.append(line)
    return b"".join(out)


_MASTER_OWNERS = ("@", "www", "WWW", "*", "a.b", "_sip._tcp", "x.example.net.", "", " ",
                  "sub", "ns1.sub", "dn", "below.dn", "\\065", "a\\.b", "\\255x")
_MASTER_TTLS = ("", "300", "0", "1h", "2147483648", "1w2d", "-1", "007")
_MASTER_DATA = (
    ("A", ("192.0.2.1", "192.0.2.256", "\\# 4 c0000201", "")),
    ("AAAA", ("2001:db8::1", "::ffff:192.0.2.1", "2001:db8::g")),
    ("NS", ("ns1", "ns1.sub", "ns.example.net.", "@")),
    ("CNAME", ("www", "target.example.net.", "dn")),
    ("DNAME", ("sub", "example.net.", "below.dn")),
    ("MX", ("10 mail", "65536 mail", "0 .")),
    ("SRV", ("0 5 5060 sip", "1 2 3")),
    ("TXT", ('"text"', '"a" "b"', '( "x"\n "y" )', '"unterminated', "plain words")),
    ("SOA", ("ns1 h 1 2 3 4 5", "ns1 h ( 1 2\n 3 4 5 )", "ns1 h 4294967296 2 3 4 5")),
    ("DS", ("60485 5 1 2BB183AF5F22588179A53B0A98631FAD1A292118",)),
    ("LOC", ("52 22 23 N 4 53 32 E -2m 0m 0m 0m", "0 0 0 N 0 0 0 E 42849673 0 0 0")),
    ("CAA", ('0 issue "ca.example.net"',)),
    ("SVCB", ("1 . alpn=h2", "0 target.example.net.")),
    ("TYPE65280", ("\\# 2 abcd", "\\# 3 ab")),
    ("RRSIG", ("A 8 2 300 20300101000000 20200101000000 1 example.com. AAAA",)),
)
_MASTER_DIRECTIVES = ("$ORIGIN sub", "$ORIGIN example.net.", "$TTL 60", "$TTL x",
                      "$INCLUDE other.zone", "$GENERATE 1-3 h$ A 192.0.2.$", "$UNKNOWN")


def master_file(rng: random.Random) -> bytes:
    """A master file of ``fuzz.example.``: mostly records a zone is made of, with odd
    owners, TTLs, rdata, directives, parentheses and stray bytes now and then."""
    out = ["$TTL 300\n" if rng.random() < 0.9 else "",
           "@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\nns1 A 192.0.2.1\n"]
    for _ in range(rng.randrange(0, 25)):
        if rng.random() < 0.08:
            out.append(rng.choice(_MASTER_DIRECTIVES) + "\n")
            continue
        rtype, values = rng.choice(_MASTER_DATA)
        fields = [rng.choice(_MASTER_OWNERS), rng.choice(_MASTER_TTLS),
                  rng.choice(("", "IN", "in", "CH")), rtype.lower() if rng.random() < 0.1
                  else rtype, rng.choice(values)]
        line = " ".join(fields) + rng.choice(("\n", "\n", " ; note\n", "\r\n"))
        if rng.random() < 0.03:
            at = rng.randrange(len(line))
            line = line[:at] + rng.choice(("(", ")", '"', "\\", ";", "\x00", "é")) + line[at:]
        out.append(line)
    return "".join(out).encode("utf-8")
