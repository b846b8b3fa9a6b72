"""Rows of zones drawn for the properties of building zones from rows
(tests/property/test_zone_build_rows.py, test_zone_rows.py): good rows most of the time,
so that zones get built and compared whole, and hostile ones often enough that every
refusal is compared too."""

from __future__ import annotations

from hypothesis import strategies as st

from valis_core.dns.wire.records import MAX_TTL, RecordRow


def mostly(good: tuple[str, ...], bad: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Good text most of the time (so zones get built and compared whole), bad text
    often enough that every refusal is compared too."""
    return st.integers(0, 5).flatmap(lambda n: st.sampled_from(bad if n == 0 else good))


HOSTILE = st.text(alphabet=' \t;()"\\.@0123456789abcdefABCDEF:xé\n\x0b\x00#', max_size=24)
ZONES = mostly(("example.com.", "Example.COM.", "sub.example.com."),
               (".", "ex\\.ample.org.", "example.com", "a..b.", "é.example."))
LONG = f"{'a' * 63}.{'b' * 63}.{'c' * 63}"
RELATIVE = mostly(
    ("", "www.", "WWW.", "*.", "a.b.", "Mail.Host.", "ns1.", "_sip._tcp.", f"{'l' * 63}."),
    (f"{'l' * 64}.", "a..", ".", "\\065.", "w\\.x.", "é.", "a b.", "a;b.",
     f"{LONG}.{'d' * 48}.", f"{LONG}.{'d' * 49}.", f"{LONG}.{'d' * 50}."),
)
OTHER_OWNERS = st.sampled_from(("x.example.net.", "www", "", ".", "example.com..", "com."))
TARGETS = mostly(("ns1.example.com.", "Target.Example.NET.", ".", "a-b.c."),
                 ("ns1", "@", "a..b.", "t\\.x.", '"t".', "é.", f"{LONG}.{'d' * 60}.example."))
NUMBERS = mostly(("0", "10", "65535", "4294967295"), ("65536", "4294967296", "010", "1h", "-1"))


@st.composite
def rdata_for(draw: st.DrawFn, rtype: str) -> str:
    kind = rtype.strip().upper()
    if draw(st.integers(0, 9)) == 0:
        return draw(HOSTILE)
    if kind in ("A", "TYPE1"):
        return draw(mostly(("192.0.2.1", "10.0.0.255", "0.0.0.0"),
                           ("192.0.2.300", "01.2.3.4", "1.2.3", " 1.2.3.4", "1.2.3.4\n",
                            "1.2.3.٤", "\\# 4 c0000201", "1.2.3.4.")))
    if kind == "AAAA":
        return draw(mostly(("2001:db8::1", "::1", "::ffff:192.0.2.1"),
                           ("2001:db8::g", "1.2.3.4", " ::1", "1::2::3")))
    if kind in ("NS", "CNAME", "PTR"):
        return draw(TARGETS.map(lambda t: t if draw(st.booleans()) else f" {t} "))
    if kind == "MX":
        return f"{draw(NUMBERS)} {draw(TARGETS)}"
    if kind == "SRV":
        return f"{draw(NUMBERS)} {draw(NUMBERS)} {draw(NUMBERS)} {draw(TARGETS)}"
    if kind == "SOA":
        numbers = " ".join(draw(NUMBERS) for _ in range(draw(st.sampled_from((5, 5, 4, 6)))))
        return f"{draw(TARGETS)} {draw(TARGETS)} {numbers}"
    return draw(mostly(('"text"', "bare", "\\# 2 abcd"), ('"open', "a;b", "")))


TYPES = mostly(("A", "A", "A", "AAAA", "NS", "CNAME", "MX", "SOA", "SRV", "PTR", "TXT",
                "a", "Mx", "TYPE1"),
               ("TYPE65280", "BOGUS", "ANY", "OPT", " A", "ns ", ""))
TTLS = st.sampled_from((300, 0, 3600, MAX_TTL, MAX_TTL + 1, -1))


@st.composite
def rows(draw: st.DrawFn) -> list[RecordRow]:
    """A zone's apex records, then rows of the zone (or beside it) of every kind."""
    found = []
    for _ in range(draw(st.integers(1, 2))):
        zone = draw(ZONES)
        apex = zone.lower() if zone.endswith(".") else zone.lower() + "."
        if draw(st.integers(0, 9)):
            found.append(RecordRow(zone, apex, "SOA", 3600,
                                   f"ns1.{apex} h.{apex} 1 7200 3600 1209600 300"))
            found.append(RecordRow(zone, apex, "NS", 3600, f"ns1.{apex}"))
        for _ in range(draw(st.integers(0, 12))):
            if draw(st.integers(0, 7)):
                owner = draw(RELATIVE) + draw(st.sampled_from((zone, apex, apex.upper())))
            else:
                owner = draw(OTHER_OWNERS)
            rtype = draw(TYPES)
            found.append(RecordRow(zone, owner, rtype, draw(TTLS), draw(rdata_for(rtype))))
    return found


SERVABLE = {
    "A": ("192.0.2.1", "10.0.0.255", "0.0.0.0", "255.255.255.255"),
    "NS": ("ns1.example.com.", "NS.Example.NET.", ".", f"{LONG}.{'d' * 61}.",
           f"{LONG}.{'d' * 62}."),
    "PTR": ("host.example.net.", "_x-y.example."),
    "MX": ("0 mx.example.net.", "65535 Mx.Example.COM.", "10 ."),
    "SRV": ("0 5 5060 sip.example.", "65535 65535 65535 .", "1 2 3 t.example.com."),
    "AAAA": ("2001:db8::1",),
    "TXT": ('"text"',),
}
"""Rdata each type serves, for zones that mostly build."""


@st.composite
def servable_rows(draw: st.DrawFn) -> list[RecordRow]:
    """A zone that mostly builds: its apex records, then up to 60 rows of good owners
    (some holding several records, some aliases), types in any case and rdata, and now
    and then a row ``rows`` draws (mostly good, sometimes hostile)."""
    zone = apex = draw(st.sampled_from(("example.com.", "sub.example.com.")))
    found = [RecordRow(zone, apex, "SOA", 3600, f"ns1.{apex} h.{apex} 1 7200 3600 1209600 300"),
             RecordRow(zone, apex.upper(), "NS", 3600, f"ns1.{apex}")]
    longest = 62 - len(zone) - 1  # the label that makes an owner's wire form 255 octets
    relative = st.sampled_from(("", "www.", "WWW.", "*.", "a.b.", "Mail.Host.", "_sip._tcp.",
                                f"{'l' * 63}.", "x.y.z.", "*.w.", "\\065.", "w\\.x.",
                                f"{LONG}.{'d' * longest}."))
    ends = st.sampled_from((zone, zone.upper()))
    for _ in range(draw(st.integers(0, 60))):
        ttl = draw(st.sampled_from((300, 0, 3600, MAX_TTL)))
        if draw(st.integers(0, 29)) == 0:  # refused: an SOA, a name one octet too long
            owner = draw(st.sampled_from(("", "soa.", f"{LONG}.{'d' * (longest + 1)}.")))
            found.append(RecordRow(zone, owner + draw(ends), "SOA", ttl,
                                   f"ns1.{apex} h.{apex} 2 1 1 1 1"))
            continue
        if draw(st.integers(0, 9)) == 0:
            number = draw(st.integers(0, 3))
            found.append(RecordRow(zone, f"alias{number}.{draw(ends)}",
                                   draw(st.sampled_from(("CNAME", "cname"))), ttl,
                                   f"t{number}.Example.com."))
            continue
        rtype = draw(st.sampled_from(sorted(SERVABLE)))
        owner = draw(relative) + draw(ends)
        rdata = draw(st.sampled_from(SERVABLE[rtype]))
        if draw(st.integers(0, 19)) == 0:
            rdata = draw(rdata_for(rtype))
        spelled = draw(st.sampled_from((rtype, rtype.lower(), rtype.capitalize())))
        found.append(RecordRow(zone, owner, spelled, ttl, rdata))
    return found
