"""The master reader's plain path reads the lines of the common types in C when it is
built (``_master.c``, ``master.compiled_run``) and every other line in Python
(``master.plain_line``), which stays the reference: from any reading state, a line reads
to the same record (or the same refusal) and leaves the same state both ways, hostile
lines included; a whole file gives the same records, lines and errors, and ``valis zone
check`` the same findings in the same order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import skip_here_fail_in_ci
from tests.hypothesis_profiles import scaled
from tests.property.master_lines import (
    CLASSES,
    ONE_LINES,
    OWNERS,
    RDATA,
    SPACES,
    TTLS,
    master_files,
    mostly,
    reading_states,
)
from valis_core.dns.wire import MasterFileError, master
from valis_core.dns.wire._reading import ReadingState
from valis_core.dns.wire.names import from_text
from valis_core.dns.zone import check, clean
from valis_core.dns.zone.check import check_zone_text

Record = tuple[bytes, int, int, bytes]

ADDRESSES = mostly(
    ("192.0.2.1", "0.0.0.0", "255.255.255.255", "10.1.2.3"),
    ("256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.", ".1.2.3", "1..2.3", "1.2.3.4 5",
     "1.2.3.٤", "-1.2.3.4", "1.2.3.4;x", "2001:db8::1", "99999999999.1.1.1", ""),
)
A_HOSTILE = st.text(alphabet=" \t;.@0123456789aAinINx-\x0b\x7f", max_size=30)
"""Characters an A line is made of, in any order."""


@st.composite
def a_lines(draw: st.DrawFn) -> str:
    """A lines as zones write them, with rare faults in every field."""
    owner = draw(OWNERS) or draw(st.sampled_from(["", " ", "\t"]))
    fields = [draw(TTLS), draw(CLASSES)]
    if draw(st.booleans()):
        fields.reverse()
    fields.append(draw(mostly(("A", "a"), ("AA", "A6", "TYPE1", "IN", "300"))))
    fields.append(draw(ADDRESSES))
    if draw(st.integers(0, 19)) == 0:
        fields.append(draw(st.sampled_from(["extra", "1.2.3.4", "IN"])))
    spacing = draw(SPACES)
    comment = draw(st.sampled_from(["", " ; note", ";x", ";é"]))
    return spacing.join(part for part in (owner, *fields) if part) + comment


IPV6 = st.one_of(
    mostly(("2001:db8::1", "::1", "::", "fe80::1:2", "1:2:3:4:5:6:7:8", "ABCD::ef"),
           ("1:2:3:4:5:6:7::", "::1:2:3:4:5:6:7", "1::2::3", ":1::", "1:", ":::", "12345::",
            "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", "::ffff:192.0.2.1", "g::1", "1::2%eth0")),
    st.text(alphabet="0123456789abcdefABCDEF:g.", max_size=42),
)
"""AAAA addresses: C reads the hex and colon ones as dnspython's ``inet_aton`` does, its
corner cases (a ``::`` at either end, eight groups beside one) among them."""
TYPED = {
    "AAAA": IPV6,
    "NS": mostly(("ns1", "ns1.example.net.", "@", "."), ("a..b", "ns1 ns2", "l" * 64, "")),
    "CNAME": mostly(("target", "t.example.net."), ("a..b", "t u")),
    "PTR": mostly(("host.example.com.", "h"), ("h..x.",)),
    "MX": mostly(("10 mail", "0 @", "65535 m.example.net.", "010 m"),
                 ("65536 m", "10", "x m", "-1 m", "10 a..b", "1 2 3")),
    "SRV": mostly(("0 5 53 srv", "65535 0 1 .", "1 2 3 t.example.net."),
                  ("0 5 65536 s", "0 5 s", "1 2 3 4 5", "a 1 2 s", "1 2 3 l..x")),
    "TXT": st.one_of(
        RDATA["TXT"],
        st.text(alphabet=' \t";ab', max_size=12),
        st.lists(st.sampled_from(['"x y"', "w", '""', f'"{"z" * 255}"']), max_size=70).map(
            " ".join
        ),
    ),
}


@st.composite
def typed_lines(draw: st.DrawFn) -> str:
    """Lines of every other type C reads, owners blank or stated, with rare faults (TXT
strings of any count and length, quotes and semicolons anywhere)."""
    owner = draw(OWNERS) or draw(st.sampled_from(["", " ", "\t"]))
    fields = [draw(TTLS), draw(CLASSES)]
    if draw(st.booleans()):
        fields.reverse()
    rtype = draw(st.sampled_from(sorted(TYPED)))
    fields.append(draw(mostly((rtype, rtype.lower()), ("TXT", "SOA", "A"))))
    fields.append(draw(TYPED[rtype]))
    spacing = draw(SPACES)
    comment = draw(st.sampled_from(["", " ; note", ";x"]))
    return spacing.join(part for part in (owner, *fields) if part) + comment


LINES = st.one_of(a_lines(), a_lines(), typed_lines(), typed_lines(), ONE_LINES, A_HOSTILE).filter(
    lambda line: "\n" not in line
)


@pytest.fixture
def compiled_runs() -> None:
    if not (master.COMPILED and check.COMPILED):
        skip_here_fail_in_ci(
            "this test needs the compiled plain lines and check run "
            "(valis_core.dns.wire._master, valis_core.dns.zone._check), not built in this "
            "tree: `make venv` (or `pip install -e .`) builds them")


pytestmark = pytest.mark.usefixtures("compiled_runs")


def _values(state: ReadingState) -> tuple[object, ...]:
    return tuple(getattr(state, slot) for slot in ReadingState.__slots__)


def _copy(state: ReadingState) -> ReadingState:
    copied = ReadingState(state.origin)
    for slot in ReadingState.__slots__:
        setattr(copied, slot, getattr(state, slot))
    return copied


@settings(max_examples=scaled(1.0), deadline=None)
@given(reading_states(), st.lists(LINES, min_size=1, max_size=4))
def test_lines_read_the_same_in_c_and_in_python(
    state: ReadingState, lines: list[str]
) -> None:
    """Whatever run of lines C reads, from any state, plain_line reads to the same records
    and leaves the same state; C stops at the first line it does not read."""
    lines = [line for line in lines if not master._DOUBTFUL.search(line)]
    compiled, python = _copy(state), _copy(state)
    records: list[Record] = []
    positions: list[int] = []
    after = master.compiled_run(lines, 0, len(lines), compiled, records.append, positions)
    expected = [master.plain_line(line, python) for line in lines[:after]]
    assert None not in expected
    assert records == [record for record in expected if record]
    assert positions == [number for number, record in enumerate(expected, 1) if record]
    assert _values(compiled) == _values(python)


def _read(text: str, origin: str | None) -> tuple[list[Record], list[str], list[int]]:
    records: list[Record] = []
    problems: list[MasterFileError] = []
    positions: list[int] = []
    master.read_master(text, origin, records.append, problems=problems, positions=positions)
    return records, [f"{p.where}: {p.reason}" for p in problems], positions


@st.composite
def a_files(draw: st.DrawFn) -> str:
    """Files of mostly lines C reads (the compiled path's bulk) among any other lines."""
    lines = draw(
        st.lists(st.one_of(a_lines(), a_lines(), typed_lines(), typed_lines(), LINES), max_size=14)
    )
    prelude = [
        draw(mostly(("$ORIGIN example.com.",), ("",))),
        draw(mostly(("$TTL 3600",), ("", "$TTL 4294967296"))),
        draw(st.sampled_from(["@ SOA ns1 hostmaster 1 2 3 4 5", "@ NS ns1", ""])),
    ]
    return "\n".join(prelude + lines) + draw(st.sampled_from(["", "\n"]))


CHECKED_NAMES = (
    "www", "WWW", "@", "www.example.com", "host.com", "a.b.net", "x.y", "mail.example.com.",
    "x.example.org.", "sub", "ns1.sub", "*.w", "example.com", "aexample.com.", "l.example.comx",
    "net\\007example.com.",
)
"""Owners and targets the check judges: relative ones that look undotted (the origin
written twice, a last label that is a TLD), names outside the zone, delegations, and a
name that ends with the apex's octets but not by whole labels."""


@st.composite
def checked_lines(draw: st.DrawFn) -> str:
    """Records the check's loop notes, warns of or refuses: owners seen again, TTLs that
    differ, duplicates, names that look undotted, data outside the zone, delegations."""
    owner = draw(st.sampled_from(CHECKED_NAMES))
    target = draw(st.sampled_from(CHECKED_NAMES))
    ttl = draw(st.sampled_from(["", "300", "60", "2147483648"]))
    rdata = draw(
        st.sampled_from([
            f"A 192.0.2.{draw(st.integers(1, 3))}", f"NS {target}", f"CNAME {target}",
            f"MX 10 {target}", f"SRV 0 5 53 {target}", f"PTR {target}", f"DNAME {target}",
            "AAAA ::1", '"t" TXT "x"', "TXT x", "TYPE65534 \\# 1 00", "NULL \\# 1 00",
        ])
    )
    return " ".join(part for part in (owner, ttl, rdata) if part)


SEEN = ("t1 MX 10 t1", "t2 CNAME t1", "t3 SRV 0 0 1 t1", "t4 PTR t1", "t5 TXT x", "t6 AAAA ::1",
        "t7 NS ns.t7", "ns.t7 A 192.0.2.7", "t8 DNAME t1")
"""A record of each type before the drawn ones: the check's C run takes only types the
loop has found servable, so a type's later records are the ones it takes."""


@st.composite
def checked_files(draw: st.DrawFn) -> str:
    lines = draw(st.lists(st.one_of(checked_lines(), a_lines(), typed_lines()), max_size=14))
    prelude = ["$ORIGIN example.com.", "$TTL 3600", "@ SOA ns1 hostmaster 1 2 3 4 5",
               draw(st.sampled_from(["@ NS ns1", "@ NS ns1.example.net.", ""])), *SEEN]
    return "\n".join(prelude + lines) + "\n"


FILES = st.one_of(master_files(), a_files(), checked_files())


@settings(max_examples=scaled(1.0), deadline=None)
@given(FILES, st.sampled_from(["example.com.", None]))
def test_a_file_reads_and_checks_the_same_in_c_and_in_python(
    text: str, origin: str | None
) -> None:
    compiled = _read(text, origin), check_zone_text(text, origin)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(master, "_plain_lines", None)
        patched.setattr(check, "_records_run", None)
        patched.setattr(clean, "_clean_count", None)
        python = _read(text, origin), check_zone_text(text, origin)
    assert compiled == python


def test_the_lines_big_zones_are_made_of_are_read_in_c() -> None:
    """The bulk of a large zone does take the compiled way (else this file tests nothing)."""
    lines = [
        "host1 300 A 192.0.2.1", "@ IN 60 a 10.0.0.1 ; c", "x.example.com. A 1.2.3.4", "",
        "; a comment", "host1 AAAA 2001:db8::1", "\tMX 10 mail", "www CNAME host1",
        "sub NS ns1.sub", "ns1.sub A 192.0.2.9", "_sip._tcp SRV 0 5 5060 host1",
        "1.2 PTR host1.example.com.",
        'host1 TXT "v=spf1 -all" word',
    ]
    state = ReadingState(from_text("example.com."))
    records: list[Record] = []
    assert master.compiled_run(lines, 0, len(lines), state, records.append, None) == len(lines)
    assert [rtype for _, rtype, _, _ in records] == [1, 1, 1, 28, 15, 5, 2, 1, 33, 12, 16]
    assert [ttl for _, _, ttl, _ in records] == [300] + [60] * 10
    assert records[4][0] == from_text("host1.example.com.")  # a blank owner's: the last


RUNS = (
    ("x 300 A 192.0.2.1", "y A 192.0.2.2", "z IN 60 A 192.0.2.3", "w A 192.0.2.4"),
    ("x A 192.0.2.1", "y 7 IN A 192.0.2.2", "z a 192.0.2.3"),
    ("x IN A 192.0.2.1", "$TTL 5", "y A 192.0.2.2", "z 9 A 192.0.2.3", "w A 192.0.2.4"),
)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("default_known", [False, True])
@pytest.mark.parametrize("from_soa", [False, True])
@pytest.mark.parametrize("last_known", [False, True])
def test_the_ttl_rules_hold_across_a_run(
    run: tuple[str, ...], default_known: bool, from_soa: bool, last_known: bool
) -> None:
    """Every state the RFC 2308 rule looks at, before a run of records that state their
    TTL or not (the TTLs all differ, so taking the wrong one shows): the whole file reads
    the same in C and in Python."""
    state = ReadingState(from_text("example.com."))
    state.default_ttl, state.default_ttl_known = 3600, default_known
    state.default_ttl_from_soa = from_soa
    state.last_ttl, state.last_ttl_known = 1800, last_known
    lines = list(run)
    compiled, python = _copy(state), _copy(state)
    records: list[Record] = []
    index = 0
    while index < len(lines):  # bounded: each pass reads one line or more
        after = master.compiled_run(lines, index, len(lines), compiled, records.append, None)
        if after == index:
            taken = master.plain_line(lines[index], compiled)
            if taken:
                records.append(taken)
            after = index + 1
        index = after
    expected = [master.plain_line(line, python) for line in lines]
    assert records == [record for record in expected if record]
    assert _values(compiled) == _values(python)
