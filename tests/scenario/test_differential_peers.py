"""A slice of the differential (``benchmarks/differential.py``): `valis serve`, NSD and
Knot serve the same generated zones on loopback and are asked the same queries over UDP
and TCP. Where valis answers otherwise than both peers, a known class must explain it,
and none of the classes where valis was wrong may come back: the operator's claim that
valis answers as the reference servers do, except where its docs say why not.

Malformed packets are left to the benchmark (a peer that drops one costs a timeout);
the queries here all get an answer from every server."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.opcode
import dns.update
import pytest

from tests.script_module import load_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SEED = 20261203
QUERIES = 150


differential = load_script(BENCHMARKS / "differential.py", "bench_differential")


@pytest.fixture
def peers(tmp_path: Path) -> Iterator[tuple[list[object], list[tuple[str, list[str]]]]]:
    for program in ("nsd", "knotd"):
        if shutil.which(program, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            message = f"{program} is not installed (make test installs nsd and knot)"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
    with differential.serving(tmp_path, 3, random.Random(SEED)) as served:
        yield served


def _fixed(zones: list[tuple[str, list[str]]]) -> list[object]:
    """The cases valis answered wrongly before, asked every time."""
    origin = zones[0][0]
    # A chain through a DNAME into its own subtree; the long name's 12 links overflowed
    # 512 octets into an empty TC answer.
    chained = (f"{first}.dnself.{origin}" for first in ("x", "y5aeuxw.d1kxm-vack"))
    out = [differential.Query(dns.message.make_query(name, "A").to_wire(),
                              ("existing", "type:A"), f"{name} A") for name in chained]
    for opcode, version in ((dns.opcode.NOTIFY, 0), (dns.opcode.STATUS, 0),
                            (dns.opcode.IQUERY, 1)):
        message = dns.message.make_query(origin, "SOA", use_edns=version,
                                         want_dnssec=True)
        message.set_opcode(opcode)
        message.flags &= ~dns.flags.RD
        tags = (f"opcode:{dns.opcode.to_text(opcode)}", "type:SOA", "do",
                *(("edns-version",) if version else ()))
        out.append(differential.Query(message.to_wire(), tags, f"{origin} SOA {tags[0]}"))
    # An UPDATE signed with a key (the owner key sent to :53): NOTIMP from valis, with an
    # Extended DNS Error naming the owner terminus; NSD and Knot judge the key first.
    update = dns.update.UpdateMessage(origin, keyring=differential.KEYRING,
                                      keyname=differential.KEY_NAME)
    update.use_edns(0)
    update.add(f"new.{origin}", 300, "A", "192.0.2.9")
    tags = ("opcode:UPDATE", "tsig", "type:SOA")
    out.append(differential.Query(update.to_wire(), tags, f"{origin} SOA opcode:UPDATE tsig"))
    return out


def test_valis_differs_from_nsd_and_knot_only_where_a_known_class_says_why(
    peers: tuple[list[object], list[tuple[str, list[str]]]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers, zones = peers
    # Every query here is answered by all three: a generous wait costs nothing.
    monkeypatch.setattr(differential, "UDP_TIMEOUT", 3.0)
    monkeypatch.setattr(differential, "TCP_TIMEOUT", 5.0)
    rng = random.Random(SEED)
    drawn = (differential.make_query(rng, zones) for _ in range(QUERIES * 2))
    wellformed = [q for q in drawn if not any(t.startswith("malformed:") for t in q.tags)]
    queries = [*_fixed(zones), *wellformed[:QUERIES]]
    differences, asked = differential.run(queries, servers, 300.0)
    assert asked == len(queries)
    unexplained = []
    for difference in differences:
        used, whole = differential.classify(difference)
        verdict = differential.verdict(used, whole)
        if verdict in (differential.UNCLASSIFIED, differential.VALIS_WRONG):
            unexplained.append((verdict, [rule.name for rule in used], difference))
    assert not unexplained, "\n".join(
        f"{verdict} {names} {d.transport} {d.query.text}: {d.answers}"
        for verdict, names, d in unexplained[:5])
