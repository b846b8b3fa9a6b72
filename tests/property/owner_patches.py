"""Random patches of one small zone (``example.com.``): owners, present or not, and every
record they hold afterwards; the name space is small so generated zones are dense with
empty non-terminals, wildcards, delegations with glue, DNAMEs and names that come and go.
Shared by the patch properties (``test_zone_patch``) and the kept answers'
(``test_kept_answers``)."""

from __future__ import annotations

from hypothesis import strategies as st

from valis_core.dns import wire
from valis_core.dns.wire.records import RecordRow

Z = "example.com."
CHILD = "sub.example.com."
SOA_TEXT = f"ns1.{Z} hostmaster.{Z} 1 7200 3600 1209600 300"
BASE = [
    RecordRow(Z, Z, "SOA", 3600, SOA_TEXT),
    RecordRow(Z, Z, "NS", 3600, f"ns1.{Z}"),
]

# A small name space, so generated zones are dense with empty non-terminals, wildcards,
# delegations with glue, DNAMEs and names that come and go.
RELATIVE = ["", "a", "b", "*", "a.a", "b.a", "*.a", "x.*.a", "a.b.a", "ns.d", "d", "x.d"]
NAMES = [f"{rel}.{Z}" if rel else Z for rel in RELATIVE]

RDATA = {
    "A": st.sampled_from(["192.0.2.1", "192.0.2.2", "198.51.100.7"]),
    "AAAA": st.sampled_from(["2001:db8::1", "2001:db8::2"]),
    "TXT": st.sampled_from(['"one"', '"two"']),
    "MX": st.sampled_from([f"10 a.{Z}", "20 mail.example.net."]),
    "NS": st.sampled_from([f"ns.d.{Z}", f"ns1.{Z}", "ns.example.net."]),
    "DS": st.just("12345 8 2 " + "ab" * 32),
    "CNAME": st.sampled_from([f"a.{Z}", "www.example.net."]),
    "DNAME": st.sampled_from(["example.net.", f"b.{Z}"]),
    "SOA": st.just(f"ns1.{Z} hostmaster.{Z} 2 7200 3600 1209600 60"),
}
# Weighted towards the types that do not refuse a zone, so most examples build.
TYPES = ["A"] * 6 + ["AAAA", "TXT", "TXT", "MX", "NS", "NS", "DS", "CNAME", "DNAME", "SOA"]


@st.composite
def records_at(draw: st.DrawFn, owners: list[str]) -> list[RecordRow]:
    rows = []
    for _ in range(draw(st.integers(0, 6))):
        owner = draw(st.sampled_from(owners))
        if draw(st.booleans()):
            owner = owner.upper()  # owners compare case-insensitively
        rtype = draw(st.sampled_from(TYPES))
        ttl = draw(st.sampled_from([60, 300]))
        rows.append(RecordRow(Z, owner, rtype, ttl, draw(RDATA[rtype])))
    return rows


@st.composite
def patch(draw: st.DrawFn, most: int = 4) -> tuple[list[str], list[RecordRow]]:
    """Some owners (present or not; at most ``most``) and every record they hold
    afterwards."""
    owners = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=most, unique=True))
    rows = draw(records_at(owners))
    if Z in owners and draw(st.integers(0, 9)):
        rows += BASE  # the apex mostly keeps its SOA and NS
    return owners, rows


def key(name: str) -> bytes:
    return wire.from_text(name).lower()
