"""The seed corpus, made by real clients and the project's own writers.

``python -m tests.fuzz.seeds`` (re)writes ``corpus/<target>/seed-*``: queries built by
dnspython (plain, EDNS with options, TSIG-signed, other classes and opcodes), TCP
framings of them, UPDATEs signed with the owner TSIG key, a delivery made by
``build_delivery_bytes`` (gzip, and the tar inside it), and a backup set made by
``build_backup_bytes`` from a state directory laid out as a booted node's, and COPY
lines of the records table as the zone load reads them. Inputs are
fixed (fixed keys, fixed contents), so rewriting gives the same files, except that a
signed UPDATE carries the moment it was signed.
"""

from __future__ import annotations

import gzip
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import dns.edns
import dns.message
import dns.tsig
import dns.update

from tests.fuzz import corpus, generate
from valis_core.apply.delivery import build_delivery_bytes
from valis_core.dns.serve.tcp import framed
from valis_core.ops.backup import build_backup_bytes
from valis_core.store.manifest import Manifest, dumps

_KEY = dns.tsig.Key(generate.TSIG.name, generate.TSIG.secret, generate.TSIG.algorithm)


def queries() -> Iterator[bytes]:
    for name in generate.NAMES:
        yield dns.message.make_query(name, "A", id=1).to_wire()
    for name in ("example.com.", "x.wild.fuzz.example.", "deep.sub.fuzz.example.",
                 "a.dn.fuzz.example."):
        for rtype in ("AAAA", "MX", "ANY", "SOA", "NS", "TXT", "DS", "SRV"):
            yield dns.message.make_query(name, rtype, id=1).to_wire()
    yield dns.message.make_query("www.example.com.", "A", use_edns=0, payload=4096).to_wire()
    yield dns.message.make_query("big.fuzz.example.", "TXT", use_edns=0, payload=512).to_wire()
    yield dns.message.make_query("big.fuzz.example.", "TXT").to_wire()
    yield dns.message.make_query("wWw.ExAmPlE.CoM.", "A", want_dnssec=True).to_wire()
    yield dns.message.make_query("example.com.", "SOA", use_edns=1).to_wire()
    yield dns.message.make_query(
        "www.example.com.", "A", use_edns=0,
        options=[
            dns.edns.GenericOption(dns.edns.OptionType.COOKIE, b"\x01" * 8),
            dns.edns.ECSOption("192.0.2.0", 24),
        ],
    ).to_wire()
    yield dns.message.make_query("example.com.", "AXFR").to_wire()
    yield dns.message.make_query("example.com.", "IXFR").to_wire()
    yield dns.message.make_query("version.bind.", "TXT", rdclass="CH").to_wire()
    signed = dns.message.make_query("www.example.com.", "A")
    signed.use_tsig(_KEY)
    yield signed.to_wire()
    notify = dns.message.make_query("example.com.", "SOA")
    notify.set_opcode(dns.opcode.NOTIFY)
    yield notify.to_wire()
    yield dns.update.UpdateMessage("example.com.").to_wire()


def tcp_streams() -> Iterator[bytes]:
    wires = list(queries())[:12]
    yield b""
    yield framed(wires[0])
    yield b"".join(framed(wire) for wire in wires)
    yield framed(wires[1])[:-3]
    yield framed(b"") + framed(wires[2])
    yield b"\xff\xff" + wires[3]


def updates() -> Iterator[bytes]:
    update = dns.update.UpdateMessage("example.com.", keyring=_KEY)
    update.present("www")
    update.add("new", 300, "A", "192.0.2.9")
    update.delete("old", "TXT")
    yield update.to_wire()
    replace = dns.update.UpdateMessage("fuzz.example.", keyring=_KEY)
    replace.replace("mx", 60, "MX", "10 ns1")
    replace.absent("gone")
    yield replace.to_wire()
    yield dns.update.UpdateMessage("example.com.").to_wire()
    yield dns.update.UpdateMessage(
        "example.com.", keyring=dns.tsig.Key("someone-else.", b"k" * 32)
    ).to_wire()
    query = dns.message.make_query("www.example.com.", "A")
    query.use_tsig(_KEY)
    yield query.to_wire()


def deliveries() -> Iterator[bytes]:
    tarball = build_delivery_bytes(
        "0.1.0",
        {
            "bin/valis": (b"#!/bin/sh\nexec true\n", 0o755),
            "bin/fulcrum": (b"#!/bin/sh\nexec true\n", 0o755),
            "lib/systemd/system/valis.service": b"[Service]\nType=notify\n",
            "share/doc/valis/fulcrum.md": b"# fulcrum\n",
        },
    )
    yield tarball
    yield gzip.decompress(tarball)


def backup_sets() -> Iterator[bytes]:
    with tempfile.TemporaryDirectory() as name:
        state = Path(name)
        (state / "owner.key").write_bytes(generate.OWNER_SEED)
        (state / "store").mkdir()
        (state / "store" / "manifest.json").write_bytes(dumps(Manifest(generation=3)))
        (state / "config").mkdir()
        (state / "config" / "site-facts.env").write_text("VALIS_NODE_NAME=origin-a\n")
        (state / "edge").mkdir()
        (state / "edge" / "leaf.key").write_bytes(b"\x42" * 48)
        yield build_backup_bytes(state)[0]


def copy_lines() -> Iterator[bytes]:
    for seed in range(4):
        yield generate.copy_lines(random.Random(seed))


def master_files() -> Iterator[bytes]:
    repo = Path(__file__).resolve().parents[2]
    yield (repo / "tests" / "scenario" / "data" / "example.com.zone").read_bytes()
    yield (repo / "docs" / "examples" / "example.test.zone").read_bytes()
    for seed in range(4):
        yield generate.master_file(random.Random(seed))


SEEDS = {
    "answer": queries,
    "tcp_framer": tcp_streams,
    "owner_message": updates,
    "delivery": deliveries,
    "backup_set": backup_sets,
    "copy_rows": copy_lines,
    "master_file": master_files,
}


def main() -> None:
    for target, make in SEEDS.items():
        for data in make():
            corpus.save(target, data, prefix="seed-")


if __name__ == "__main__":
    main()
