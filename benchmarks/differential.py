"""Ask `valis serve`, NSD and Knot the same hostile and tricky questions; report where
their answers differ.

Generates ``--zones`` master files (wildcards, empty non-terminals, delegations with
in-domain, sibling and out-of-zone name servers, DS at cuts, DNAME and CNAME chains into,
out of and between the zones, MX/SRV/NAPTR/SVCB/HTTPS targets, RRsets too big for 512
octets, labels with odd bytes and mixed case, an unknown type), serves the same files
from all three on loopback ports, then sends ``--queries`` queries drawn from a seeded
RNG (``--seed``) to each over UDP and over TCP: existing, random and case-mixed names,
every type (ANY, DS, RRSIG, NSEC, AXFR, TYPEnnnn), EDNS variations (none, DO, payload
sizes, version 1, unknown options, COOKIE), RD/CD/AD, other opcodes, QDCOUNT 0 and 2,
other classes, records where a query has none, and truncated or garbage packets.

Each response is normalised (RCODE with its extended bits, opcode, the AA/TC/RD/CD/AD
flags, the question, and each section as a multiset of records with names lowercased:
compression, order and the ID are ignored; "no answer" when a server sends nothing in
time). A query whose three answers are not all equal is a difference; differences are
grouped by what differs and classified (``CLASSES``): valis wrong by the RFCs, a peer's
quirk, or a legitimate choice (saying which peer valis follows); anything no rule
explains is reported as unclassified, with an example to look at.

Every server runs in the foreground under a private work directory, removed at the end
with the processes stopped. Every exchange has a timeout and the run stops at
``--seconds``. Run from the repository root (NSD and Knot must be installed:
``apt-get install nsd knot``; NSD and Knot run as the caller, root included):

    .venv/bin/python benchmarks/differential.py [--zones N] [--queries N] [--seed S]

These are findings, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import attrs
import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tsigkeyring
from dns_qps import free_port, knot_conf, nsd_conf, stop, which  # beside this script

UDP_TIMEOUT = 0.6
TCP_TIMEOUT = 1.5
READY_LIMIT = 30.0
SERVERS = ("valis", "nsd", "knot")
TYPES = (
    "A", "AAAA", "NS", "SOA", "CNAME", "DNAME", "MX", "TXT", "SRV", "NAPTR", "SVCB",
    "HTTPS", "PTR", "CAA", "DS", "DNSKEY", "RRSIG", "NSEC", "NSEC3", "NSEC3PARAM",
    "ANY", "TYPE65280", "TYPE0", "TYPE65535", "HINFO", "AXFR", "IXFR", "MAILB", "OPT",
    "TSIG", "TKEY", "NULL",
)
KEY_NAME = "unknown-key.example."
KEYRING = dns.tsigkeyring.from_text({KEY_NAME: "c2VjcmV0c2VjcmV0c2VjcmV0"})
COMMON_TYPES = ("A", "AAAA", "MX", "TXT", "NS", "SOA", "CNAME", "DS", "ANY")


# --- zones ----------------------------------------------------------------------------


def zone_name(i: int) -> str:
    return f"z{i}.diff.test."


def zone_text(i: int, zones: int, rng: random.Random) -> tuple[str, list[str]]:
    """Zone ``i``'s master file and the owner names (relative) worth asking about."""
    origin = zone_name(i)
    other = zone_name((i + 1) % zones)
    ttl = rng.choice([60, 300, 3600])
    minimum = rng.choice([30, 300, 7200])
    hosts = [f"h{n}" for n in range(rng.randint(2, 6))]
    lines = [
        f"$ORIGIN {origin}",
        f"$TTL {ttl}",
        f"@ IN SOA ns1 hostmaster {rng.randint(1, 2**31)} 7200 3600 1209600 {minimum}",
        "@ IN NS ns1",
        "@ IN NS ns2.elsewhere.example.",
        "ns1 IN A 192.0.2.1",
        "ns1 IN AAAA 2001:db8::1",
        "@ IN MX 10 mail",
        "@ IN TXT \"apex\"",
        "mail IN A 192.0.2.25",
        "mail IN AAAA 2001:db8::25",
        "www IN A 192.0.2.80",
        "www IN AAAA 2001:db8::80",
        "MiXeD IN A 192.0.2.81",
        # wildcards
        "* IN TXT \"apex wildcard\"",
        "*.wild IN A 192.0.2.90",
        "*.wild IN MX 10 mail",
        "sub.*.wild IN A 192.0.2.91",
        "*.wc IN CNAME www",
        "*.wcout IN CNAME target.example.net.",
        "exists.wild IN TXT \"not from the wildcard\"",
        # empty non-terminals
        "a.b.c.ent IN A 192.0.2.100",
        "x.ent2 IN TXT \"under an ent\"",
        # delegations
        "deleg IN NS ns.deleg",
        "deleg IN NS ns.other.example.",
        "deleg IN NS ns1",
        "ns.deleg IN A 192.0.2.53",
        "ns.deleg IN AAAA 2001:db8::53",
        "deleg IN DS 12345 13 2 " + "ab" * 32,
        "outdeleg IN NS ns.elsewhere.example.",
        "outdeleg IN NS ns2.elsewhere.example.",
        "sib IN NS ns.deleg",
        "sib IN NS ns.sibglue",
        "sibglue IN NS ns.sibglue",
        "ns.sibglue IN A 192.0.2.54",
        # DNAME
        "dn IN DNAME target.example.net.",
        f"dnin IN DNAME {other}",
        "dnself IN DNAME sub.dnself",
        "dnlong IN DNAME " + ".".join(["x" * 60] * 3) + ".example.",
        # CNAME chains
        "c1 IN CNAME c2",
        "c2 IN CNAME c3",
        "c3 IN CNAME www",
        "cout IN CNAME www.example.net.",
        f"cother IN CNAME www.{other}",
        "cnx IN CNAME nowhere",
        "cdeleg IN CNAME x.deleg",
        "loop1 IN CNAME loop2",
        "loop2 IN CNAME loop1",
        "cwild IN CNAME q.wild",
        "cdn IN CNAME x.dnin",
        # additional processing
        "_sip._tcp IN SRV 0 5 5060 sip",
        "_sip._udp IN SRV 0 5 5060 sip",
        "sip IN A 192.0.2.60",
        "naptr IN NAPTR 100 10 \"S\" \"SIP+D2U\" \"\" _sip._udp",
        "naptra IN NAPTR 100 10 \"A\" \"SIP+D2U\" \"\" sip",
        "svc IN HTTPS 1 . alpn=h2",
        "svc IN A 192.0.2.70",
        "alias IN HTTPS 0 svc",
        "svcb IN SVCB 1 svc-target port=8443",
        "svc-target IN AAAA 2001:db8::70",
        "mxout IN MX 10 mail.example.net.",
        "mxdeleg IN MX 10 ns.deleg",
        # size
        *[f"big IN TXT \"{'t' * 200} {n}\"" for n in range(8)],
        *[f"many IN A 192.0.2.{n}" for n in range(1, 60)],
        # odd bytes, unknown types, case
        r"odd\.dot IN A 192.0.2.111",
        r"odd\032space IN A 192.0.2.112",
        r"\200bin IN A 192.0.2.113",
        "UPPER.Case IN TXT \"case\"",
        "unk IN TYPE65280 \\# 4 01020304",
        "ptr IN PTR www",
        "caa IN CAA 0 issue \"ca.example.net\"",
        "hinfo IN HINFO \"PC\" \"Linux\"",
        "fakesig IN TXT \"no signature here\"",
        # occluded data: beneath a delegation and beneath a DNAME
        "occluded.deleg IN A 192.0.2.120",
        "*.deleg IN A 192.0.2.121",
        "cocc IN CNAME occluded.deleg",
        "*.dnwild IN DNAME target.example.net.",
    ]
    for host in hosts:
        lines.append(f"{host} IN A 192.0.2.{rng.randint(1, 254)}")
        if rng.random() < 0.5:
            lines.append(f"{host} IN AAAA 2001:db8::{rng.randint(1, 65535):x}")
        if rng.random() < 0.3:
            lines.append(f"{host} IN TXT \"{host}\"")
    if i == 0 and zones > 1:  # a child zone delegated here and served alongside
        lines += ["child IN NS ns1.child", "ns1.child IN A 192.0.2.3",
                  "child IN DS 54321 13 2 " + "cd" * 32]
    names = sorted({line.split()[0] for line in lines[2:] if not line.startswith("$")})
    return "\n".join(lines) + "\n", names


def child_text() -> str:
    return (f"$ORIGIN child.{zone_name(0)}\n$TTL 300\n"
            "@ IN SOA ns1 hostmaster 1 7200 3600 1209600 60\n@ IN NS ns1\n"
            "ns1 IN A 192.0.2.3\nwww IN A 192.0.2.4\n")


# --- servers --------------------------------------------------------------------------


@attrs.frozen
class Server:
    name: str
    command: list[str]
    port: int


VALIS_SRC: Path | None = None
"""Another source tree whose ``valis`` to run (``--valis-src``), for a before and after."""


def valis_server(home: Path, zones: Sequence[tuple[str, Path]], port: int) -> Server:
    if VALIS_SRC is None:
        command = [str(Path(sys.executable).with_name("valis"))]
    else:
        command = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(VALIS_SRC)!r}); "
                   "sys.argv[0] = 'valis'; from valis_cli.main import main; sys.exit(main())"]
    args = [*command, "serve", "--listen", f"127.0.0.1:{port}"]
    for origin, path in zones:
        args += ["--zone", f"{origin}={path}"]
    return Server("valis", args, port)


def nsd_server(home: Path, zones: Sequence[tuple[str, Path]], port: int) -> Server:
    """NSD with minimal responses (no NS in a positive answer's authority) and no rate
    limit, as ``make bench`` runs it."""
    conf = nsd_conf(home, port, zones, "minimal-responses: yes", "hide-identity: yes")
    return Server("nsd", [which("nsd"), "-d", "-c", str(conf)], port)


def knot_server(home: Path, zones: Sequence[tuple[str, Path]], port: int) -> Server:
    """knotd with its defaults, serving the files as they are."""
    conf = knot_conf(home, port, zones)
    return Server("knot", [which("knotd"), "-c", str(conf)], port)


BUILDERS: dict[str, Callable[[Path, Sequence[tuple[str, Path]], int], Server]] = {
    "valis": valis_server, "nsd": nsd_server, "knot": knot_server,
}


def start(server: Server, home: Path, probe_zone: str) -> subprocess.Popen[bytes]:
    log_path = home / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(server.command, stdout=log, stderr=subprocess.STDOUT)
    limit = time.monotonic() + READY_LIMIT
    probe = dns.message.make_query(probe_zone, "SOA")
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"{server.name} exited early:\n{log_path.read_text()}")
            try:
                reply = dns.query.udp(probe, "127.0.0.1", port=server.port, timeout=0.2)
                if reply.rcode() == dns.rcode.NOERROR and reply.answer:
                    return process
            except (dns.exception.Timeout, OSError):
                pass
            if time.monotonic() > limit:
                raise SystemExit(f"{server.name} did not answer in {READY_LIMIT}s:\n"
                                 f"{log_path.read_text()}")
            time.sleep(0.1)
    except BaseException:
        stop(process)
        raise


# --- queries --------------------------------------------------------------------------


@attrs.frozen
class Query:
    """One query: its wire form and the tags that say what kind of query it is."""

    wire: bytes
    tags: tuple[str, ...]
    text: str


def random_label(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-") for _ in
                   range(rng.randint(1, 12))).strip("-") or "q"


def mix_case(rng: random.Random, name: str) -> str:
    return "".join(c.upper() if c.isalpha() and rng.random() < 0.5 else c for c in name)


def pick_name(rng: random.Random, zones: Sequence[tuple[str, list[str]]]) -> tuple[str, str]:
    """A question name and a tag saying how it was drawn."""
    origin, owners = rng.choice(zones)
    roll = rng.random()
    owner = rng.choice(owners)
    base = origin if owner == "@" else f"{owner}.{origin}"
    if roll < 0.45:
        return base, "existing"
    if roll < 0.55:
        return mix_case(rng, base), "case"
    if roll < 0.75:
        return f"{random_label(rng)}.{base}", "below"
    if roll < 0.85:
        return f"{random_label(rng)}.{origin}", "random"
    if roll < 0.9:
        return f"{random_label(rng)}.example.", "outside"
    if roll < 0.95:
        return rng.choice(["diff.test.", "test.", ".", "version.bind.", "child.z0.diff.test.",
                           "www.child.z0.diff.test."]), "special"
    return f"{random_label(rng)}.{random_label(rng)}.{base}", "deep"


def make_query(rng: random.Random, zones: Sequence[tuple[str, list[str]]]) -> Query:
    name, how = pick_name(rng, zones)
    rtype = rng.choice(COMMON_TYPES) if rng.random() < 0.5 else rng.choice(TYPES)
    tags = [how, f"type:{rtype}"]
    edns_roll = rng.random()
    edns: dict[str, object] = {}
    if edns_roll < 0.3:
        tags.append("no-edns")
        edns = {"use_edns": False}
    elif edns_roll < 0.55:
        edns = {"use_edns": 0, "payload": 1232}
    elif edns_roll < 0.7:
        edns = {"use_edns": 0, "payload": 1232, "want_dnssec": True}
        tags.append("do")
    elif edns_roll < 0.8:
        payload = rng.choice([0, 1, 511, 512, 513, 1220, 1400, 4096, 65535])
        edns = {"use_edns": 0, "payload": payload}
        tags.append(f"payload:{payload}")
    elif edns_roll < 0.82:
        edns = {"use_edns": rng.choice([1, 2, 255]), "payload": 1232}
        tags.append("edns-version")
    elif edns_roll < 0.85:
        edns = {"use_edns": 0, "payload": 1232,
                "ednsflags": rng.choice([0x0001, 0x4000, 0x7FFF, 0xFFFF])}
        tags.append("edns-z")
    else:
        option = rng.choice([
            ("cookie", dns.edns.GenericOption(10, bytes(rng.randrange(256) for _ in range(8)))),
            ("cookie-full", dns.edns.GenericOption(
                10, bytes(rng.randrange(256) for _ in range(24)))),
            ("cookie-bad", dns.edns.GenericOption(10, b"\x01\x02\x03")),
            ("nsid", dns.edns.GenericOption(3, b"")),
            ("unknown-option", dns.edns.GenericOption(65001, b"hello")),
            ("padding", dns.edns.GenericOption(12, b"\x00" * 16)),
            ("ecs", dns.edns.GenericOption(8, b"\x00\x01\x18\x00\xc0\x00\x02")),
            ("expire", dns.edns.GenericOption(9, b"")),
            ("keepalive", dns.edns.GenericOption(11, b"")),
        ])
        edns = {"use_edns": 0, "payload": 1232, "options": [option[1]]}
        tags.append(f"option:{option[0]}")
    try:
        message = dns.message.make_query(name, rtype, **edns)  # type: ignore[arg-type]
    except (dns.exception.DNSException, ValueError):
        message = dns.message.make_query("www." + zones[0][0], "A")
    message.id = rng.randrange(65536)
    flags = dns.flags.RD if rng.random() < 0.5 else 0
    if rng.random() < 0.15:
        flags |= dns.flags.CD
        tags.append("cd")
    if rng.random() < 0.1:
        flags |= dns.flags.AD
        tags.append("ad")
    if rng.random() < 0.05:
        flags |= dns.flags.TC
        tags.append("tc-set")
    if rng.random() < 0.05:
        flags |= dns.flags.AA | dns.flags.RA
        tags.append("aa-ra-set")
    if rng.random() < 0.03:
        flags |= 0x0040  # the Z bit
        tags.append("z-bit")
    message.flags = flags
    if flags & dns.flags.RD:
        tags.append("rd")
    rdclass = "IN"
    if rng.random() < 0.08:
        rdclass = rng.choice(["CH", "HS", "ANY", "NONE", "CLASS42"])
        message.question[0] = dns.rrset.RRset(
            message.question[0].name, dns.rdataclass.from_text(rdclass),
            message.question[0].rdtype)
        tags.append(f"class:{rdclass}")
    if rng.random() < 0.04:  # signed with a key no server holds
        message.use_tsig(KEYRING, keyname=KEY_NAME)
        tags.append("tsig")
    text = f"{name} {rdclass} {rtype} " + " ".join(t for t in tags[2:] if t != "rd")
    wire = message.to_wire()
    roll = rng.random()
    if roll < 0.06:
        opcode = rng.choice([1, 2, 4, 5, 3, 6, 15])
        wire = wire[:2] + bytes([(wire[2] & 0x87) | opcode << 3]) + wire[3:]
        named = dns.opcode.to_text(opcode) if opcode in (1, 2, 4, 5, 6) else str(opcode)
        tags.append(f"opcode:{named}")
    elif roll < 0.12:
        wire, how = malformed(rng, wire, message)
        tags.append(f"malformed:{how}")
    elif roll < 0.16:
        wire, how = extra_records(rng, message)
        tags.append(f"records:{how}")
    text = f"{text} {' '.join(t for t in tags if t.startswith(('opcode', 'malformed', 'records')))}"
    return Query(wire, tuple(tags), text.strip())


def malformed(rng: random.Random, wire: bytes, message: dns.message.Message) -> tuple[bytes, str]:
    """A broken form of ``wire`` and what is wrong with it."""
    kind = rng.choice(["qd0", "qd2", "qd2-same", "truncated", "trailing", "garbage",
                       "short-header", "qr-set", "bad-label", "pointer-question",
                       "opt-twice", "opt-not-root", "opt-bad-options", "an-count"])
    header = bytearray(wire[:12])
    if kind == "qd0":
        header[4:6] = b"\x00\x00"
        return bytes(header) + wire[12:], kind
    if kind in ("qd2", "qd2-same"):
        header[4:6] = b"\x00\x02"
        www = dns.name.Name((b"www", *message.question[0].name.labels))  # the root too
        second = dns.message.make_query(www, "A", use_edns=False).to_wire()[12:]
        qend = 12 + len(message.question[0].name.to_wire()) + 4
        extra = wire[12:qend] if kind == "qd2-same" else second
        return bytes(header) + wire[12:qend] + extra + wire[qend:], kind
    if kind == "truncated":
        return wire[: rng.randint(12, max(12, len(wire) - 1))], kind
    if kind == "trailing":
        return wire + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))), kind
    if kind == "garbage":
        return bytes(header) + bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))), kind
    if kind == "short-header":
        return wire[: rng.randint(0, 11)], kind
    if kind == "qr-set":
        header[2] |= 0x80
        return bytes(header) + wire[12:], kind
    if kind == "bad-label":
        return bytes(header) + b"\x41" + b"a" * 65 + b"\x00\x00\x01\x00\x01", kind
    if kind == "pointer-question":
        return bytes(header[:12]) + b"\xc0\x0c\x00\x01\x00\x01" + wire[12 + len(
            message.question[0].name.to_wire()) + 4:], kind
    qend = 12 + len(message.question[0].name.to_wire()) + 4
    opt = b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"
    if kind == "opt-twice":
        header[10:12] = b"\x00\x02"
        return bytes(header) + wire[12:qend] + opt + opt, kind
    if kind == "opt-not-root":
        header[10:12] = b"\x00\x01"
        return bytes(header) + wire[12:qend] + b"\x01x" + opt, kind
    if kind == "opt-bad-options":
        header[10:12] = b"\x00\x01"
        return bytes(header) + wire[12:qend] + opt[:-2] + b"\x00\x03\x00\x0a\x00", kind
    header[6:8] = b"\x00\x01"  # an-count with no answer record present
    return bytes(header) + wire[12:], kind


def extra_records(rng: random.Random, message: dns.message.Message) -> tuple[bytes, str]:
    """A query carrying records in a section a query leaves empty."""
    kind = rng.choice(["answer", "authority", "additional-a"])
    record = dns.rrset.from_text(message.question[0].name, 300, "IN", "A", "192.0.2.1")
    if kind == "answer":
        message.answer.append(record)
    elif kind == "authority":
        message.authority.append(record)
    else:
        message.additional.append(record)
    return message.to_wire(), kind


# --- asking and normalising -----------------------------------------------------------


def ask_udp(wire: bytes, ports: Sequence[int]) -> list[bytes | None]:
    """Send ``wire`` to every port at once and collect one datagram from each (or None)."""
    sockets = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.connect(("127.0.0.1", port))
        sockets.append(s)
    replies: list[bytes | None] = [None] * len(ports)
    try:
        for s in sockets:
            with contextlib.suppress(OSError):
                s.send(wire)
        deadline = time.monotonic() + UDP_TIMEOUT
        pending = {s: n for n, s in enumerate(sockets)}
        for _ in range(len(ports) * 4):
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                break
            ready, _, _ = select.select(list(pending), [], [], left)
            for s in ready:
                try:
                    replies[pending[s]] = s.recv(65535)
                    del pending[s]
                except OSError:
                    del pending[s]
    finally:
        for s in sockets:
            s.close()
    return replies


def ask_tcp(wire: bytes, port: int) -> bytes | None:
    """One exchange over a fresh TCP connection: the reply, or None if none came."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TCP_TIMEOUT) as s:
            s.sendall(struct.pack("!H", len(wire)) + wire)
            head = _read(s, 2)
            if head is None:
                return None
            return _read(s, struct.unpack("!H", head)[0])
    except OSError:
        return None


def _read(s: socket.socket, count: int) -> bytes | None:
    data = b""
    for _ in range(1000):
        if len(data) >= count:
            return data
        chunk = s.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return None


def normal(reply: bytes | None) -> tuple[str, ...]:
    """A reply as comparable lines: header fields, then each section's records sorted."""
    if reply is None:
        return ("no answer",)
    if len(reply) < 12:
        return (f"short reply of {len(reply)} octets",)
    flags = reply[2] << 8 | reply[3]
    try:
        message = dns.message.from_wire(reply, ignore_trailing=False, one_rr_per_rrset=True,
                                        keyring=_no_key)
    except Exception as error:  # a reply dnspython cannot read is compared by its header
        return (f"rcode={dns.rcode.to_text(flags & 0xF)}",
                f"unparsed reply: {type(error).__name__}", f"flags={_flag_text(flags)}",
                f"counts={reply[4:12].hex()}")
    lines = [f"rcode={dns.rcode.to_text(message.rcode())}",
             f"opcode={dns.opcode.to_text(message.opcode())}",
             f"flags={_flag_text(flags)}"]
    for section, rrsets in (("question", message.question), ("answer", message.answer),
                            ("authority", message.authority),
                            ("additional", message.additional)):
        items = sorted(_record_text(rrset, section == "question") for rrset in rrsets)
        lines += [f"{section}: {item}" for item in items]
    if message.edns >= 0:
        options = sorted(str(option.otype) for option in message.options)
        lines.append(f"opt: version={message.edns} flags={message.ednsflags:#06x} "
                     f"payload={message.payload} options={','.join(options) or '-'}")
    if message.tsig is not None:
        lines.append(f"tsig: error={message.tsig[0].error}")
    return tuple(lines)


def _no_key(message: dns.message.Message, name: dns.name.Name) -> bool:
    """A keyring that knows no key: dnspython then reads a TSIG without checking it."""
    return False


def _flag_text(flags: int) -> str:
    names = [name for bit, name in ((0x8000, "QR"), (0x0400, "AA"), (0x0200, "TC"),
                                    (0x0100, "RD"), (0x0080, "RA"), (0x0020, "AD"),
                                    (0x0010, "CD")) if flags & bit]
    return " ".join(names) or "-"


def _record_text(rrset: dns.rrset.RRset, question: bool) -> str:
    name = rrset.name.to_text().lower()
    kind = f"{dns.rdataclass.to_text(rrset.rdclass)} {dns.rdatatype.to_text(rrset.rdtype)}"
    if question:
        return f"{name} {kind}"
    return " | ".join(sorted(f"{name} {rrset.ttl} {kind} {rdata.to_text().lower()}"
                             for rdata in rrset))


# --- classification -------------------------------------------------------------------


@attrs.frozen
class Difference:
    query: Query
    transport: str
    answers: dict[str, tuple[str, ...]]

    def agreeing(self) -> str:
        """Which servers give equal answers: ``valis=nsd``, ``valis=knot``,
        ``nsd=knot`` (valis alone), or ``all differ``."""
        v, n, k = (self.answers[s] for s in SERVERS)
        if v == n:
            return "valis=nsd"
        if v == k:
            return "valis=knot"
        if n == k:
            return "nsd=knot"
        return "all differ"

    def field(self) -> str:
        """The first kind of line the answers differ in (rcode, flags, a section...)."""
        seen: set[str] = set()
        for server in SERVERS:
            for line in self.answers[server]:
                seen.add(line.split("=", 1)[0].split(":", 1)[0])
        order = ["no answer", "short reply of", "rcode", "unparsed reply", "opcode", "flags",
                 "question", "answer", "authority", "additional", "opt", "tsig"]
        for key in order:
            values = [tuple(line for line in self.answers[s]
                            if line.split("=", 1)[0].split(":", 1)[0] == key) for s in SERVERS]
            if len(set(values)) > 1:
                return key
        return "other"


Answers = dict[str, tuple[str, ...]]


@attrs.frozen
class Rule:
    """A class of differences: its verdict, when it applies, and how it evens out the
    answers it explains (what is left must be explained by another rule)."""

    name: str
    verdict: str
    applies: Callable[[Query, Answers], bool]
    even: Callable[[Query, Answers], Answers]


VALIS_WRONG = "valis wrong (fixed)"
QUIRK = "peer quirk"
CHOICE = "legitimate choice"
UNCLASSIFIED = "unclassified"
ERRORS = ("rcode=FORMERR", "rcode=NOTIMP", "rcode=REFUSED", "rcode=SERVFAIL", "rcode=NOTAUTH",
          "rcode=BADVERS")


def _tagged(*prefixes: str) -> Callable[[Query, Answers], bool]:
    return lambda q, a: any(t.startswith(prefixes) for t in q.tags)


def _each(edit: Callable[[str, str], str | None]) -> Callable[[Query, Answers], Answers]:
    """Edit every server's lines with ``edit(server, line)`` (None drops the line)."""
    def even(q: Query, a: Answers) -> Answers:
        out = {}
        for server, lines in a.items():
            edited = (edit(server, line) for line in lines)
            out[server] = tuple(line for line in edited if line is not None)
        return out
    return even


def _like(server: str, model: str, when: Callable[[Answers], bool] = lambda a: True,
          ) -> Callable[[Query, Answers], Answers]:
    """``server``'s answer taken as ``model``'s (the rule explains the whole of it)."""
    def even(q: Query, a: Answers) -> Answers:
        return {**a, server: a[model]} if when(a) else a
    return even


def _flags(lines: tuple[str, ...]) -> list[str]:
    return next((line[6:].split() for line in lines if line.startswith("flags=")), [])


def _error(lines: tuple[str, ...]) -> bool:
    return bool(lines) and lines[0] in ERRORS


def _flags_without(*names: str) -> Callable[[str, str], str]:
    def edit(server: str, line: str) -> str:
        if not line.startswith("flags="):
            return line
        kept = [f for f in line[6:].split() if f not in names]
        return "flags=" + (" ".join(kept) or "-")
    return edit


def _options_without(codes: Sequence[str], servers: Sequence[str] = SERVERS,
                     ) -> Callable[[str, str], str]:
    def edit(server: str, line: str) -> str:
        if server not in servers or not line.startswith("opt:"):
            return line
        head, options = line.rsplit("options=", 1)
        kept = [c for c in options.split(",") if c not in codes and c != "-"]
        return f"{head}options={','.join(kept) or '-'}"
    return edit


def _zone_of(q: Query) -> str:
    name = q.text.split()[0].lower()
    for label in name.split("."):
        if label.startswith("z") and label[1:].isdigit():
            return name[name.index(label + "."):]
    return name


def _within_question_zone(q: Query, a: Answers) -> Answers:
    """Every record whose owner is in another zone than the question's left out."""
    zone = _zone_of(q)
    def inside(line: str) -> bool:
        if not line.startswith(("answer:", "authority:", "additional:")):
            return True
        owner = line.split(": ", 1)[1].split(maxsplit=1)[0]
        return owner.endswith(zone) and not owner.endswith("child." + zone)
    return {s: tuple(line for line in lines if inside(line)) for s, lines in a.items()}


def _dedupe(q: Query, a: Answers) -> Answers:
    return {s: tuple(dict.fromkeys(lines)) for s, lines in a.items()}


def _has_duplicates(q: Query, a: Answers) -> bool:
    return any(len(set(lines)) < len(lines) for lines in a.values())


def _question_dropped(q: Query, a: Answers) -> bool:
    nsd = a["nsd"]
    return _error(nsd) and not any(line.startswith("question:") for line in nsd)


def _transfer_rcode(server: str, line: str) -> str:
    if line in ("rcode=REFUSED", "rcode=NOTAUTH", "rcode=NOTIMP"):
        return "rcode=(transfer refused)"
    return line


def _chain_prefix(q: Query, a: Answers) -> Answers:
    """Answers of a CNAME chain cut at the shortest server's length."""
    def answer_lines(lines: tuple[str, ...]) -> list[str]:
        return [line for line in lines if line.startswith("answer:")]
    shortest = min((answer_lines(lines) for lines in a.values()), key=len)
    return {s: tuple(line for line in lines if not line.startswith("answer:")
                     or line in shortest) for s, lines in a.items()}


CLASSES: list[Rule] = [
    Rule("CD cleared by NSD and Knot; RFC 4035 section 3.1.6 copies it (valis does)", QUIRK,
         _tagged("cd"), _each(_flags_without("CD"))),
    Rule("the same record more than once in a section (a DNAME met again down its own "
         "chain; over UDP the repeats truncated the answer); RFC 2181 section 5", VALIS_WRONG,
         lambda q, a: _has_duplicates(q, a) or (
             ".dnself." in q.text.lower() and "TC" in _flags(a["valis"])),
         lambda q, a: dict.fromkeys(a, ("(chain through a DNAME below itself)",))
         if ".dnself." in q.text.lower() else _dedupe(q, a)),
    Rule("NOTIMP to another opcode without an OPT though the query had one; RFC 6891 "
         "section 7 (Knot answers with one)", VALIS_WRONG,
         lambda q, a: _tagged("opcode:")(q, a) and not any(
             line.startswith("opt:") for line in a["valis"]) and any(
             line.startswith("opt:") for line in a["knot"]),
         _each(lambda s, line: None if line.startswith("opt:") else line)),
    Rule("NOTIMP to another opcode whose OPT has a version above 0; RFC 6891 section "
         "6.1.3 says BADVERS (Knot answers so)", VALIS_WRONG,
         lambda q, a: _tagged("opcode:")(q, a) and _tagged("edns-version")(q, a)
         and a["valis"][:1] == ("rcode=NOTIMP",) and a["knot"][:1] == ("rcode=BADVERS",),
         lambda q, a: dict.fromkeys(a, ("(version above 0)",))),
    Rule("NOTIMP or BADVERS to another opcode without an OPT from NSD though the query "
         "had one; RFC 6891 section 7 asks for one (valis and Knot answer with it)", QUIRK,
         lambda q, a: _tagged("opcode:")(q, a) and any(
             line.startswith("opt:") for line in a["valis"]) and not any(
             line.startswith("opt:") for line in a["nsd"]),
         _each(lambda s, line: None if line.startswith("opt:") else line)),
    Rule("UPDATE: Knot implements dynamic update (FORMERR for a zone section not of type "
         "SOA); valis and NSD answer NOTIMP (valis takes updates only on its owner port: NOTIMP "
         "signed or not, with an Extended DNS Error saying so when the query has EDNS)",
         CHOICE, lambda q, a: _tagged("opcode:UPDATE")(q, a) and _error(a["nsd"]),
         lambda q, a: dict.fromkeys(a, ("(update refused)",))),
    Rule("another opcode with an OPT of version above 0: NSD answers NOTIMP without "
         "reading the OPT; RFC 6891 section 6.1.3 says BADVERS (valis and Knot)", QUIRK,
         lambda q, a: _tagged("opcode:")(q, a) and _tagged("edns-version")(q, a)
         and a["nsd"][:1] == ("rcode=NOTIMP",) and a["valis"] == a["knot"],
         _like("nsd", "valis")),
    Rule("unsigned NOTIFY: NOTIMP from valis (it is nobody's secondary), NOTAUTH from "
         "Knot, NXDOMAIN or REFUSED from NSD (documented in dns/answer/_answer.py)", CHOICE,
         _tagged("opcode:NOTIFY"), lambda q, a: dict.fromkeys(a, ("(notify refused)",))),
    Rule("EDNS payload below 512: FORMERR from Knot; RFC 6891 section 6.2.5 says treat it "
         "as 512 (valis and NSD do)", QUIRK, _tagged("payload:0", "payload:1", "payload:511"),
         _like("knot", "valis", lambda a: a["knot"][:1] == ("rcode=FORMERR",))),
    Rule("RD cleared by NSD in FORMERR for QDCOUNT 0 or 2; valis copies it (RFC 1035 "
         "section 4.1.1), as Knot wherever it answers", QUIRK,
         lambda q, a: _tagged("malformed:qd")(q, a) and a["nsd"][:1] == ("rcode=FORMERR",),
         _each(_flags_without("RD"))),
    Rule("flags of the query (AA, TC, RA) copied by NSD into an error response", QUIRK,
         lambda q, a: _tagged("aa-ra-set", "tc-set")(q, a) and _error(a["nsd"]),
         _each(lambda s, line: _flags_without("AA", "TC", "RA")(s, line) if s == "nsd"
               else line)),
    Rule("Extended DNS Error (RFC 8914) added by NSD and Knot to REFUSED; valis adds none",
         CHOICE, lambda q, a: True, _each(_options_without(["15"]))),
    Rule("NSID and EXPIRE options answered by Knot (its defaults; RFC 5001 and 7314 make "
         "both optional); valis answers neither, as NSD", CHOICE,
         _tagged("option:nsid", "option:expire"), _each(_options_without(["3", "9"], ["knot"]))),
    Rule("question left out of error responses by NSD; valis echoes it, as Knot", CHOICE,
         _question_dropped,
         _each(lambda s, line: None if line.startswith("question:") else line)),
    Rule("signed transfer request under an unknown key: Knot answers it unsigned, without "
         "the TSIG carrying BADKEY that RFC 8945 section 5.2.1 asks for (NOTIMP for AXFR "
         "over UDP); valis and NSD answer NOTAUTH with BADKEY", QUIRK,
         lambda q, a: _tagged("tsig")(q, a) and _tagged("type:AXFR", "type:IXFR")(q, a)
         and not _tagged("opcode:")(q, a)
         and not any(line.startswith("tsig:") for line in a["knot"])
         and a["valis"][:1] == ("rcode=NOTAUTH",),
         _like("knot", "valis")),
    Rule("zone transfer refused: NOTAUTH from NSD and Knot, REFUSED from valis (NOTIMP "
         "for AXFR over UDP); RFC 5936 leaves the refusal's RCODE open", CHOICE,
         lambda q, a: _tagged("type:AXFR", "type:IXFR")(q, a) and not _tagged("opcode:")(q, a),
         _each(_transfer_rcode)),
    Rule("chain into another served zone followed by valis and NSD; Knot stops at the "
         "zone's edge (documented in dns/answer/_answer.py)", CHOICE,
         lambda q, a: q.text.split(".")[0].lower() in ("cother", "dnin", "cdn")
         or ".dnin." in q.text.lower() or ".cdn." in q.text.lower(),
         _within_question_zone),
    Rule("another class (CH, HS, ANY, NONE, unassigned): valis refuses it; NSD and Knot "
         "answer class ANY from IN data (documented in dns/answer/_answer.py)", CHOICE,
         _tagged("class:"), lambda q, a: dict.fromkeys(a, ("(another class)",))),
    Rule("malformed message dropped by Knot (and by NSD over TCP); valis answers FORMERR, "
         "as NSD over UDP", CHOICE,
         lambda q, a: a["knot"] == ("no answer",) and a["valis"][:1] == ("rcode=FORMERR",),
         lambda q, a: {s: a["valis"] if lines == ("no answer",) else lines
                       for s, lines in a.items()}),
    Rule("trailing bytes after the message: FORMERR from valis and Knot; NSD ignores them "
         "(documented in dns/answer/_answer.py)", CHOICE, _tagged("malformed:trailing"),
         _like("nsd", "valis", lambda a: a["valis"] == a["knot"])),
    Rule("records in a query's answer, authority or additional section, or an OPT not "
         "owned by the root: FORMERR from valis and NSD (NSD judges a transfer's access "
         "first); Knot answers as if they were not there", CHOICE,
         _tagged("records:", "malformed:an-count", "malformed:opt-not-root"),
         lambda q, a: dict.fromkeys(a, a["valis"]) if a["valis"][:1] == ("rcode=FORMERR",)
         else a),
    Rule("TYPE0 NOTIMP and TKEY FORMERR from Knot; valis answers them as data, as NSD",
         QUIRK, _tagged("type:TYPE0", "type:TKEY"),
         _like("knot", "valis", lambda a: a["knot"][:1] in (("rcode=NOTIMP",), ("rcode=FORMERR",))
               and (a["valis"] == a["nsd"] or not _error(a["valis"])))),
    Rule("DNAME owned by a wildcard name: Knot gives it the query's name as owner; valis "
         "and NSD its own, the DNAME being an ordinary record there (RFC 4592 section 4.4)",
         QUIRK, lambda q, a: ".dnwild." in q.text.lower() and a["valis"] == a["nsd"],
         _like("knot", "valis")),
    Rule("ANY: valis answers the lowest-numbered type, as Knot; NSD prefers the SOA at an "
         "apex (RFC 8482 lets the server pick)", CHOICE, _tagged("type:ANY"),
         _like("nsd", "valis", lambda a: a["valis"] == a["knot"])),
    Rule("MX/SRV target addresses in additional: valis adds them, as Knot; NSD with "
         "minimal-responses leaves them out", CHOICE,
         lambda q, a: a["valis"] == a["knot"] and set(a["nsd"]) <= set(a["valis"])
         and all(line.startswith("additional:") for line in set(a["valis"]) - set(a["nsd"])),
         _like("nsd", "valis")),
    Rule("addresses of an MX target beneath a delegation (glue): Knot adds them; valis "
         "adds only authoritative data, as NSD", CHOICE,
         lambda q, a: q.text.lower().startswith("mxdeleg.") and a["valis"] == a["nsd"],
         _like("knot", "valis")),
    Rule("NAPTR, SVCB and HTTPS additional data (RFC 3403 section 4.2, RFC 9460 section "
         "4.1): valis adds the targets' records; NSD and Knot add none", CHOICE,
         lambda q, a: q.text.lower().startswith(("naptr", "svc", "alias"))
         and a["nsd"] == a["knot"],
         lambda q, a: {**a, "valis": a["nsd"]}),
    Rule("RRSIG or NSEC3 asked at a CNAME in an unsigned zone: valis follows the CNAME "
         "(RFC 1034 section 3.6.2); Knot answers RRSIG and NSD answers NSEC3 from the "
         "node itself (NODATA)", CHOICE,
         lambda q, a: _tagged("type:RRSIG", "type:NSEC3", "type:NSEC")(q, a)
         and a["valis"] in (a["nsd"], a["knot"]),
         lambda q, a: dict.fromkeys(a, a["valis"])),
    Rule("signed (TSIG) query under an unknown key for a name outside every zone: Knot "
         "REFUSED before judging the key; valis NOTAUTH with BADKEY, as NSD (RFC 8945 "
         "section 5.2 judges the TSIG first)", CHOICE,
         lambda q, a: _tagged("tsig")(q, a) and a["knot"][:1] == ("rcode=REFUSED",)
         and a["valis"][:1] == ("rcode=NOTAUTH",),
         _like("knot", "valis")),
    Rule("signed message of an opcode neither implements (IQUERY, STATUS, unassigned): "
         "NSD and Knot NOTIMP; valis judges the TSIG first for every opcode but UPDATE "
         "(NOTAUTH, BADKEY), as both do for NOTIFY", CHOICE,
         lambda q, a: _tagged("tsig")(q, a) and _tagged("opcode:")(q, a)
         and a["valis"][:1] == ("rcode=NOTAUTH",),
         lambda q, a: dict.fromkeys(a, ("(signed, another opcode)",))),
    Rule("signed query under an unknown key with an EDNS version above 0: valis judges "
         "the key (NOTAUTH, BADKEY), Knot the version (BADVERS, unsigned), NSD both at "
         "once (extended RCODE 25); neither RFC orders the two checks", CHOICE,
         lambda q, a: _tagged("tsig")(q, a) and _tagged("edns-version")(q, a),
         lambda q, a: dict.fromkeys(a, ("(signed, version above 0)",))),
    Rule("CNAME or DNAME chain length: valis follows 12 links (one synthesis through a "
         "DNAME into its own subtree), Knot 5 and more, NSD stops after one synthesis "
         "(RFC 1034 lets a server stop anywhere)", CHOICE,
         lambda q, a: True, _chain_prefix),
]
"""Applied in order: each evens out what it explains, until the answers agree."""


def classify(d: Difference) -> tuple[list[Rule], bool]:
    """The rules that explain ``d`` and whether they explain all of it."""
    answers = dict(d.answers)
    used = []
    for rule in CLASSES:
        if not rule.applies(d.query, answers):
            continue
        evened = rule.even(d.query, answers)
        if evened != answers:
            used.append(rule)
            answers = evened
        if len(set(answers.values())) == 1:
            return used, True
    return used, False


def verdict(used: Sequence[Rule], whole: bool) -> str:
    if not whole:
        return UNCLASSIFIED
    for kind in (VALIS_WRONG, QUIRK, CHOICE):
        if any(rule.verdict == kind for rule in used):
            return kind
    return CHOICE


def category(query: Query) -> str:
    """The most unusual thing about a query, to group what no rule explains."""
    for prefix in ("malformed:", "opcode:", "records:", "class:", "edns-version",
                   "option:", "payload:"):
        for tag in query.tags:
            if tag.startswith(prefix):
                return tag
    return next(tag for tag in query.tags if tag.startswith("type:"))


# --- the run --------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zones", type=int, default=3, help="zones generated (at least 1)")
    parser.add_argument("--queries", type=int, default=3000, help="queries sent to each")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=600.0, help="stop asking after this")
    parser.add_argument("--examples", type=int, default=2, help="examples shown per class")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--valis-src", type=Path, metavar="DIR",
                        help="run the valis of another source tree (its src directory)")
    args = parser.parse_args(argv)
    global VALIS_SRC  # noqa: PLW0603 - set once, before any server starts
    VALIS_SRC = args.valis_src
    if args.zones < 1 or args.queries < 1:
        parser.error("--zones and --queries must be at least 1")
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="valis-differential-"))
    try:
        with serving(work, args.zones, rng) as (servers, zones):
            queries = (make_query(rng, zones) for _ in range(args.queries))
            differences, asked = run(queries, servers, args.seconds)
        report(differences, asked, args.examples)
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


Zones = list[tuple[str, list[str]]]
"""Each zone's origin and the owner names (relative) worth asking about."""


@contextlib.contextmanager
def serving(
    work: Path, count: int, rng: random.Random, names: Sequence[str] = SERVERS,
) -> Iterator[tuple[list[Server], Zones]]:
    """``count`` zones generated under ``work`` (with a child zone of the first when
    there are two or more) and served by each of ``names``, stopped on the way out."""
    files: list[tuple[str, Path]] = []
    zones: Zones = []
    for i in range(count):
        text, owners = zone_text(i, count, rng)
        path = work / f"{zone_name(i)}zone"
        path.write_text(text)
        files.append((zone_name(i), path))
        zones.append((zone_name(i), owners))
    if count > 1:
        path = work / "child.zone"
        path.write_text(child_text())
        files.append((f"child.{zone_name(0)}", path))
    work.chmod(0o755)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        servers = []
        for name in names:
            home = work / name
            home.mkdir()
            server = BUILDERS[name](home, files, free_port())
            processes.append(start(server, home, zone_name(0)))
            servers.append(server)
        yield servers, zones
    finally:
        for process in processes:
            stop(process)


def run(
    queries: Iterable[Query], servers: Sequence[Server], seconds: float,
) -> tuple[list[Difference], int]:
    """Ask every server each query over UDP and TCP until the queries or ``seconds`` run
    out: the exchanges whose answers differ, and how many queries were asked."""
    deadline = time.monotonic() + seconds
    differences: list[Difference] = []
    asked = 0
    ports = [s.port for s in servers]
    for query in queries:
        if time.monotonic() > deadline:
            print(f"stopped at --seconds after {asked} queries", flush=True)
            break
        udp = ask_udp(query.wire, ports)
        tcp = [ask_tcp(query.wire, port) for port in ports]
        asked += 1
        for transport, replies in (("udp", udp), ("tcp", tcp)):
            answers = {s.name: normal(r) for s, r in zip(servers, replies, strict=True)}
            if len(set(answers.values())) > 1:
                differences.append(Difference(query, transport, answers))
    return differences, asked


def report(differences: Sequence[Difference], asked: int, examples: int) -> None:
    """The verdicts (an exchange counts once, under its gravest rule), the classes (an
    exchange counts under every rule that explains part of it), then examples of what
    no rule explains."""
    verdicts: Counter[str] = Counter()
    classes: Counter[tuple[str, str]] = Counter()
    unexplained: dict[str, list[Difference]] = {}
    for d in differences:
        used, whole = classify(d)
        verdicts[verdict(used, whole)] += 1
        for rule in used:
            classes[(rule.verdict, rule.name)] += 1
        if not whole:
            key = f"{category(d.query)}: {d.field()} differs, {d.agreeing()}"
            unexplained.setdefault(key, []).append(d)
    print(f"\n{asked} queries, each over UDP and TCP to valis, NSD and Knot: "
          f"{len(differences)} exchanges of {2 * asked} differ\n")
    print("| verdict | exchanges |\n|---|---:|")
    for name in (VALIS_WRONG, UNCLASSIFIED, QUIRK, CHOICE):
        print(f"| {name} | {verdicts[name]} |")
    print("\n| verdict | class | exchanges |\n|---|---|---:|")
    for rule in CLASSES:
        print(f"| {rule.verdict} | {rule.name} | {classes[(rule.verdict, rule.name)]} |")
    for key, found in sorted(unexplained.items(), key=lambda kv: -len(kv[1])):
        print(f"\n## unclassified: {key} ({len(found)})")
        for d in found[:examples]:
            print(f"  query ({d.transport}): {d.query.text}  [{d.query.wire.hex()}]")
            for server in SERVERS:
                print(f"    {server}:")
                for line in d.answers[server]:
                    print(f"      {line}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
