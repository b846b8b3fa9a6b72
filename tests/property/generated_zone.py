"""Small zones drawn at random under gen.test., for the properties any zone's signed
answers must have: an apex, then a few records at names chosen to meet wildcards,
delegations, glue and CNAMEs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import strategies as st

from valis_core.dns.wire.records import RecordRow

GEN = "gen.test."
NAMES = [f"{rel}.{GEN}" if rel else GEN for rel in (
    "", "a", "b", "*", "a.a", "*.a", "x.*.a", "d", "ns.d", "x.d", "m",
)]
"""The apex first, then the owners a record may be drawn at."""
RDATA = {
    "A": st.sampled_from(["192.0.2.1", "198.51.100.7"]),
    "TXT": st.sampled_from(['"one"', '"Two"']),
    "MX": st.sampled_from([f"10 A.{GEN}", "20 mail.example.net."]),
    "NS": st.sampled_from([f"ns.d.{GEN}", "ns.example.net."]),
    "DS": st.just("12345 13 2 " + "ab" * 32),
    "CNAME": st.sampled_from([f"a.{GEN}", f"nowhere.{GEN}"]),
}
BASE = [
    RecordRow(GEN, GEN, "SOA", 3600, f"ns1.{GEN} hostmaster.{GEN} 1 7200 3600 1209600 60"),
    RecordRow(GEN, GEN, "NS", 3600, f"ns1.{GEN}"),
]


@st.composite
def zone_rows(
    draw: st.DrawFn,
    names: Sequence[str] = NAMES,
    rdata: Mapping[str, st.SearchStrategy[str]] = RDATA,
    most: int = 10,
) -> list[RecordRow]:
    """BASE and up to ``most`` records, each at one of ``names`` past the apex with a
    type of ``rdata`` and a value it draws; the zone may be one the index refuses."""
    out = list(BASE)
    for _ in range(draw(st.integers(0, most))):
        owner = draw(st.sampled_from(names[1:]))
        rtype = draw(st.sampled_from(sorted(rdata)))
        out.append(RecordRow(GEN, owner, rtype, 300, draw(rdata[rtype])))
    return out
