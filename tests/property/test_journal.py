"""The journal's condensed difference takes a secondary from any version the journal
reaches back to onto the newest, and the IXFR built from it says the same on the wire."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import dns.message
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.tsig
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from valis_core.dns import wire
from valis_core.dns.transfer import (
    Grant,
    incremental_records,
    transfer_messages,
    zone_records,
)
from valis_core.dns.transfer.journal import Entry, apply, chain, condense, record_key
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.journal import DEFAULT_MAX_AGE, DEFAULT_MAX_RECORDS
from valis_core.operator_state.site_facts import (
    JOURNAL_MAX_AGE_KEY,
    JOURNAL_MAX_RECORDS_KEY,
    SiteFactsError,
    check_site_facts,
)
from valis_core.resident.journal import JournalLimits

ZONE = "j.test."
KEY = dns.tsig.Key("k.", b"0123456789abcdef0123456789abcdef", "hmac-sha256")

records = st.builds(
    lambda owner, ttl, last: RecordRow(ZONE, f"{owner}.{ZONE}", "A", ttl, f"192.0.2.{last}"),
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from([60, 300]),
    st.integers(1, 4),
)
versions = st.lists(st.frozensets(records, max_size=6), min_size=2, max_size=6)


def soa(serial: int) -> RecordRow:
    return RecordRow(ZONE, ZONE, "SOA", 300, f"ns.{ZONE} h.{ZONE} {serial} 1 1 1 1")


def zone_at(data: frozenset[RecordRow], serial: int) -> tuple[RecordRow, ...]:
    keyed = {(*record_key(r)[:2], record_key(r)[3]): r for r in sorted(data, key=repr)}
    return (soa(serial), RecordRow(ZONE, ZONE, "NS", 300, f"ns.{ZONE}"),
            RecordRow(ZONE, f"ns.{ZONE}", "A", 300, "192.0.2.53"), *keyed.values())


def journal_of(zones: list[tuple[RecordRow, ...]]) -> list[Entry]:
    entries = []
    for serial, (old, new) in enumerate(itertools.pairwise(zones), 1):
        before, after = set(old), set(new)
        entries.append(Entry(serial, serial + 1, tuple(before - after), tuple(after - before)))
    return entries


@given(versions, st.data())
def test_condensed_journal_applied_to_an_old_version_yields_the_newest(
    data: list[frozenset[RecordRow]], draw: st.DataObject
) -> None:
    zones = [zone_at(d, serial) for serial, d in enumerate(data, 1)]
    entries = journal_of(zones)
    start = draw.draw(st.integers(1, len(zones) - 1))
    steps = chain([(e.old_serial, e.new_serial) for e in entries], start, len(zones))
    assert steps is not None
    difference = condense([entries[i] for i in steps])
    assert difference is not None
    assert difference.old_soa == soa(start)
    assert apply(zones[start - 1], difference, soa(len(zones))) == {
        record_key(r) for r in zones[-1]
    }


@given(versions)
def test_a_serial_the_journal_does_not_reach_has_no_chain(data: list[frozenset[RecordRow]]) -> None:
    zones = [zone_at(d, serial) for serial, d in enumerate(data, 1)]
    pairs = [(e.old_serial, e.new_serial) for e in journal_of(zones)]
    assert chain(pairs[1:], 1, len(zones)) is None
    assert chain(pairs, len(zones), len(zones)) is None
    assert chain(pairs, 999, len(zones)) is None


@given(versions)
def test_the_ixfr_on_the_wire_is_soa_old_deletions_soa_new_additions(
    data: list[frozenset[RecordRow]],
) -> None:
    zones = [zone_at(d, serial) for serial, d in enumerate(data, 1)]
    entries = journal_of(zones)
    difference = condense(entries)
    assert difference is not None
    served = ZoneIndex.from_records(zones[-1]).zone_for(b"\x01j\x04test\x00")
    assert served is not None
    query = dns.message.make_query(ZONE, dns.rdatatype.IXFR)
    query.use_tsig(KEY)
    signed = dns.message.from_wire(query.to_wire(), keyring={KEY.name: KEY})
    assert signed.tsig is not None
    grant = Grant(served, signed, KEY, True, incremental_records(served, difference))
    rrs = []
    ctx = None
    mac = signed.mac
    for sent in transfer_messages(grant, now=signed.tsig[0].time_signed):
        message = dns.message.from_wire(
            sent, keyring={KEY.name: KEY}, request_mac=mac, xfr=True, multi=ctx is not None,
            tsig_ctx=ctx, one_rr_per_rrset=True,
        )
        ctx, mac = message.tsig_ctx, b""
        rrs += [(rrset.name.to_text().lower(), rrset.rdtype, rrset.ttl, rrset[0].to_text())
                for rrset in message.answer]
    soas = [i for i, rr in enumerate(rrs) if rr[1] == dns.rdatatype.SOA]
    new, old = soa(len(zones)).rdata, soa(1).rdata
    assert [rrs[i][3] for i in soas] == [new, old, new, new]
    assert secondary_after(as_served(zones[0]), rrs[soas[1] + 1 : soas[2]],
                           rrs[soas[2] + 1 : soas[3]]) == as_served(zones[-1])


Text = tuple[str, int, int, str]
"""A record as dnspython reads it off the wire: owner (lowercased), type, TTL, rdata."""


def as_served(rows: Sequence[RecordRow]) -> dict[tuple[str, int, str], int]:
    """The records a zone of ``rows`` serves, SOA aside, each with the TTL served."""
    served = ZoneIndex.from_records(rows).zone_for(b"\x01j\x04test\x00")
    assert served is not None
    return {
        (wire.to_text(owner).lower(), rtype, dns.rdata.from_wire(
            dns.rdataclass.IN, dns.rdatatype.RdataType.make(rtype), rdata, 0, len(rdata)
        ).to_text()): ttl
        for owner, rtype, ttl, rdata in zone_records(served) if rtype != dns.rdatatype.SOA
    }


def secondary_after(
    held: dict[tuple[str, int, str], int], removals: Sequence[Text], additions: Sequence[Text]
) -> dict[tuple[str, int, str], int]:
    """A secondary's records after an IXFR's removals (matched by data, not TTL) and
    additions (each with its TTL)."""
    after = dict(held)
    for owner, rtype, _, rdata in removals:
        after.pop((owner, rtype, rdata), None)
    for owner, rtype, ttl, rdata in additions:
        after[(owner, rtype, rdata)] = ttl
    return after


def as_text(records: Sequence[tuple[bytes, int, int, bytes]]) -> list[Text]:
    return [(wire.to_text(owner).lower(), rtype, ttl, dns.rdata.from_wire(
        dns.rdataclass.IN, dns.rdatatype.RdataType.make(rtype), rdata, 0, len(rdata)).to_text())
        for owner, rtype, ttl, rdata in records]


spelled = st.builds(
    lambda owner, last, spelling, ttl: RecordRow(
        ZONE, f"{owner}.{ZONE}", "AAAA", ttl,
        (f"2001:db8::{last}", f"2001:0db8:0000::{last}", f"2001:DB8:0:0::{last}")[spelling]),
    st.sampled_from(["a", "b"]),
    st.integers(1, 3),
    st.integers(0, 2),
    st.sampled_from([60, 300]),
)
"""Rows as an operator may write them: one address spelled in several ways, each spelling a
row of its own (the rows differ as text; the zone served holds the record once), and TTLs
that differ within an RRset (the zone serves the lowest)."""


@given(st.lists(st.frozensets(spelled, max_size=6), min_size=2, max_size=5))
def test_an_ixfr_takes_a_secondary_onto_the_records_served_however_the_rows_spell_them(
    data: list[frozenset[RecordRow]],
) -> None:
    """The journal nets rows as text: a row removed while another spelling of its record
    stays leaves the record served, and a row's TTL is not the TTL its RRset is served
    with; the IXFR takes the secondary to what is served all the same."""
    zones = [(soa(serial), RecordRow(ZONE, ZONE, "NS", 300, f"ns.{ZONE}"),
              RecordRow(ZONE, f"ns.{ZONE}", "A", 300, "192.0.2.53"),
              *{(r.owner, r.rdata): r for r in sorted(d, key=repr)}.values())
             for serial, d in enumerate(data, 1)]
    difference = condense(journal_of(zones))
    assert difference is not None
    served = ZoneIndex.from_records(zones[-1]).zone_for(b"\x01j\x04test\x00")
    assert served is not None
    rrs = incremental_records(served, difference)
    soas = [i for i, rr in enumerate(rrs) if rr[1] == dns.rdatatype.SOA]
    assert len(soas) == 4
    removals = rrs[soas[1] + 1 : soas[2]]
    assert len({(owner.lower(), rtype, rdata) for owner, rtype, _, rdata in removals}) == \
        len(removals)
    assert secondary_after(as_served(zones[0]), as_text(removals),
                           as_text(rrs[soas[2] + 1 : soas[3]])) == as_served(zones[-1])


def in_one_rrset(ttl: int, last: int) -> RecordRow:
    return RecordRow(ZONE, f"a.{ZONE}", "A", ttl, f"192.0.2.{last}")


one_rrset = st.builds(in_one_rrset, st.sampled_from([60, 300]), st.integers(1, 3))
"""Rows of one RRset, their TTLs differing (the zone serves the lowest)."""


@given(st.lists(st.frozensets(one_rrset, max_size=3), min_size=2, max_size=4))
@example([frozenset({in_one_rrset(300, 1)}),
          frozenset({in_one_rrset(300, 1), in_one_rrset(60, 2)})])  # a lower TTL added
def test_an_ixfr_takes_one_rrset_to_its_ttl_served_through_any_changes(
    data: list[frozenset[RecordRow]],
) -> None:
    """Every change to one RRset moves the TTL it is served with, or may: the IXFR takes
    the secondary there, whether it sends the difference as it is or the RRset whole."""
    zones = [zone_at(d, serial) for serial, d in enumerate(data, 1)]
    for start in range(len(zones) - 1):
        difference = condense(journal_of(zones[start:]))
        assert difference is not None
        served = ZoneIndex.from_records(zones[-1]).zone_for(b"\x01j\x04test\x00")
        assert served is not None
        rrs = as_text(incremental_records(served, difference))
        soas = [i for i, rr in enumerate(rrs) if rr[1] == dns.rdatatype.SOA]
        assert secondary_after(as_served(zones[start]), rrs[soas[1] + 1 : soas[2]],
                               rrs[soas[2] + 1 : soas[3]]) == as_served(zones[-1])


def test_a_change_a_row_says_exactly_is_sent_as_it_is_not_its_rrset_whole() -> None:
    """One record of ten changed at the TTL the RRset is served with: one removal and one
    addition, not the ten records twice."""
    base = (soa(2), RecordRow(ZONE, ZONE, "NS", 300, f"ns.{ZONE}"),
            RecordRow(ZONE, f"ns.{ZONE}", "A", 300, "192.0.2.53"))
    texts = [RecordRow(ZONE, f"t.{ZONE}", "TXT", 300, f'"{i}"') for i in range(10)]
    changed = RecordRow(ZONE, f"t.{ZONE}", "TXT", 300, '"new"')
    zone = ZoneIndex.from_records((*base, *texts[1:], changed)).zone_for(b"\x01j\x04test\x00")
    assert zone is not None
    difference = condense([Entry(1, 2, (soa(1), texts[0]), (soa(2), changed))])
    assert difference is not None
    rrs = as_text(incremental_records(zone, difference))
    assert rrs[2:-1] == [(f"t.{ZONE}", dns.rdatatype.TXT, 300, '"0"'), rrs[0],
                         (f"t.{ZONE}", dns.rdatatype.TXT, 300, '"new"')]


@given(st.one_of(st.integers(max_value=0), st.integers(min_value=2**31)).map(str)
       | st.sampled_from(["", "7d", "1.5", " 60", "+60"]))
def test_the_journal_limits_are_whole_numbers_of_the_site_facts(value: str) -> None:
    facts = {"VALIS_NODE_NAME": "n", "VALIS_LOCATION": "l", "VALIS_SERVED_ZONES": ZONE,
             "VALIS_OPERATOR_STATE_DSN": "postgresql:///valis"}
    assert JournalLimits.from_facts(facts) == JournalLimits(DEFAULT_MAX_AGE, DEFAULT_MAX_RECORDS)
    check_site_facts({**facts, JOURNAL_MAX_AGE_KEY: "3600", JOURNAL_MAX_RECORDS_KEY: "50"})
    for key in (JOURNAL_MAX_AGE_KEY, JOURNAL_MAX_RECORDS_KEY):
        with pytest.raises(SiteFactsError, match=key):
            check_site_facts({**facts, key: value})
