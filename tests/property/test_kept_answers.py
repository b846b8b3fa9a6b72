"""Answers kept across swaps (issue 27: caches per zone version, not per snapshot).

A holder's snapshots share what they found (``_cache.KeptAnswers``) and one compiled
table (``fastpath.shared_table``), moved from version to version by what each swap
changed. Over random zones (a parent, a served child beneath it, a zone beside them;
CNAME and DNAME chains, delegations, wildcards, MX and SRV targets reaching across
them, chains leaving the served zones) and random versions of them (owners replaced in
one zone, a zone added or dropped beside or beneath the others, other zones shared
whole; a zone turning signed or unsigned), after every swap:

- every answer kept in Python that the new version takes (``KeptAnswers.take``) is the
  entry a fresh index of the same records resolves, byte for byte;
- whatever the table, carried from the last version, answers in C is what a fresh
  snapshot answers, and so is every answer the holder gives (UDP and TCP, DO=0 and 1);
- the snapshot served before the swap still answers its own version, asked after the
  new one filled the kept answers with its own.

And the point of it: a swap that changes one zone leaves every other zone's answers in
the table (answered in C with no Python), and the table is the same one, never refilled.
"""

from __future__ import annotations

import dns.message
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.property import owner_patches
from tests.property.random_zones import CHILD, OTHER, PARENT, queries, zones
from tests.property.two_zones import PLAIN, SIGNED, TWO_ZONES
from valis_core.dns import dnssec
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer._cache import CACHE_ENTRIES, ResponseCache
from valis_core.dns.answer._lookup import resolve
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.wire import from_text
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ServedZone, ZoneIndex

pytestmark = pytest.mark.usefixtures("compiled")  # the table is asked too

UDP, TCP = Transport.UDP, Transport.TCP
NOW = 1_800_000_000
KEY = dnssec.ZoneKey(dnssec.generate_key(dnssec.ED25519))
"""Ed25519: a kept signature equals the one a fresh signer makes (RFC 8032)."""
LABELS = ("a", "b", "www", "*", "sub", "x", "ns", "big")


def apex_of(origin: str) -> bytes:
    return from_text(origin).lower()


def signer_of(signed: frozenset[str], carry: Signer | None = None) -> Signer | None:
    if not signed:
        return None
    return Signer({apex_of(zone): KEY for zone in signed}, clock=lambda: NOW, carry=carry)


def fresh_snapshot(rows: list[RecordRow], signed: frozenset[str]) -> Snapshot:
    index = ZoneIndex.from_records(rows)
    return Snapshot(index, signer=signer_of(signed & set(index.zones)))


def teach(table: fastpath.Table | None, snapshot: Snapshot, query: bytes) -> bytes | None:
    """As the serve loop: C's answer, else Python's, which the table then learns."""
    if table is not None:
        fast, key, wanted = table.ask(query)
        if fast is not None:
            return fast
    response = answer(snapshot, query, transport=UDP)
    if table is not None:
        fastpath.learn(table, snapshot, key, wanted)
    return response


def rows_of(rows: list[RecordRow], origin: str) -> list[RecordRow]:
    """``origin``'s rows among ``rows``, or a zone of its own (SOA, NS, its address)."""
    held = [row for row in rows if row.zone == origin]
    return held or [
        RecordRow(origin, origin, "SOA", 3600, f"ns.{origin} h.{origin} 1 2 3 4 60"),
        RecordRow(origin, origin, "NS", 3600, f"ns.{origin}"),
        RecordRow(origin, f"ns.{origin}", "A", 3600, "192.0.2.53"),
    ]


def zone_alone(rows: list[RecordRow]) -> ServedZone:
    (zone,) = ZoneIndex.from_records(rows).served()
    return zone


def pointed_at(rows: list[RecordRow]) -> list[str]:
    """The names the rows' CNAME, DNAME, MX, SRV and NS records point at: the owners a
    change must reach for an answer read across zones to go stale."""
    return sorted({row.rdata.split()[-1].lower() for row in rows
                   if row.rtype in ("CNAME", "DNAME", "MX", "SRV", "NS")})


PATCH_RECORDS = st.one_of(
    st.sampled_from([f"www.{OTHER}", f"a.{PARENT}", f"x.{CHILD}", "elsewhere.test."]).map(
        lambda target: [("CNAME", target)]),
    st.lists(st.sampled_from([
        ("A", "192.0.2.7"), ("A", "198.51.100.9"), ("TXT", '"new"'), ("MX", f"10 a.{PARENT}"),
        ("MX", f"10 www.{OTHER}"), ("SRV", f"0 1 53 x.{CHILD}"),
    ]), max_size=3),
)
"""What an owner holds after a patch: a CNAME alone, or data (none: the owner goes)."""


@st.composite
def change(
    draw: st.DrawFn, served: list[str], targets: list[str]
) -> tuple[str, str, list[str], list[RecordRow]]:
    """One change: owners of a served zone replaced (``patch``; often the names other
    records point at), a zone dropped or added (``toggle``: the other zones shared), or
    a zone's signing turned (``sign``)."""
    kind = draw(st.sampled_from(["patch", "patch", "patch", "toggle", "sign"]))
    pointed = sorted({max((zone for zone in served if name.endswith(zone)), key=len)
                      for name in targets if any(name.endswith(zone) for zone in served)})
    zones = st.sampled_from(served)  # mostly a zone another record points into
    origin = draw(st.one_of(zones, st.sampled_from(pointed), st.sampled_from(pointed))
                  if pointed and kind == "patch" else zones if kind == "patch"
                  else st.sampled_from([PARENT, CHILD, OTHER]))
    inside = [name for name in targets if name == origin or name.endswith("." + origin)]
    relative = st.lists(st.sampled_from(LABELS), max_size=2).map(
        lambda labels: "".join(label + "." for label in labels) + origin)
    owners = sorted(set(draw(st.lists(
        st.one_of(relative, st.sampled_from(inside)) if inside else relative,
        min_size=1, max_size=3))))
    owners = [owner for owner in owners if owner != origin] or [f"x.{origin}"]  # its SOA stays
    rows = [RecordRow(origin, owner, rtype, 300, rdata)
            for owner in owners for rtype, rdata in draw(PATCH_RECORDS)]
    return kind, origin, owners, rows


def applied(
    holder: IndexHolder, rows: list[RecordRow], served: list[RecordRow],
    step: tuple[str, str, list[str], list[RecordRow]], signed: frozenset[str],
) -> tuple[list[RecordRow], frozenset[str]] | None:
    """Apply one change to ``holder`` as a zone source or the signing follower would
    (``None``: refused, nothing served changes); the rows now served and the zones
    signed."""
    kind, origin, owners, new = step
    index = holder.current
    if kind == "sign":
        signed = signed ^ {origin}
        holder.sign_with(signer_of(signed & set(index.zones), carry=holder.signer))
        return served, signed
    if kind == "toggle":
        apex = apex_of(origin)
        held = [zone for zone in index.served() if zone.apex != apex]
        if len(held) == len(index.served()):  # added, beside or beneath the others
            back = rows_of(rows, origin)
            now = [row for row in served if row.zone != origin] + back
            held.append(zone_alone(back))
        else:  # dropped
            if not held:
                return None
            now = [row for row in served if row.zone != origin]
        holder.swap(ZoneIndex(held, sum(zone.record_count for zone in held)))
        holder.sign_with(signer_of(signed & set(holder.current.zones), carry=holder.signer))
        return now, signed
    if origin not in index.zones:
        return None
    replaced = {from_text(owner).lower() for owner in owners}
    now = [row for row in served
           if row.zone != origin or from_text(row.owner).lower() not in replaced] + new
    try:
        holder.swap(index.with_owners_replaced(origin, owners, new))
    except ZoneError:
        return None
    return now, signed


def assert_kept_entries_fresh(snapshot: Snapshot, fresh_index: ZoneIndex) -> None:
    """Every unsigned answer kept that ``snapshot`` would take is the fresh one."""
    kept = snapshot.cache.kept
    for key, (_entry, _names, _refs, signing, _mark, _reads) in list(kept.answers.items()):
        if signing is not None:
            continue
        taken = kept.take(key, snapshot.index)
        if taken is not None:
            assert taken == resolve(fresh_index, ResponseCache(), key[:-2],
                                    int.from_bytes(key[-2:], "big"))[0], key


@settings(max_examples=scaled(0.5), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_answers_kept_across_swaps_are_every_versions_fresh_answers(data: st.DataObject) -> None:
    rows = data.draw(zones())
    origins = sorted({row.zone for row in rows} | {CHILD, OTHER})
    signed = frozenset(data.draw(st.sets(st.sampled_from(origins), max_size=2)))
    served = rows
    holder = IndexHolder(ZoneIndex.from_records(rows))
    holder.sign_with(signer_of(signed & set(holder.current.zones)))
    asked = [wire for wire, _limit, _transport in data.draw(
        st.lists(queries(rows), min_size=4, max_size=12))]
    asked += [dns.message.make_query(f"x.{origin}", "A", want_dnssec=do).to_wire()
              for origin in origins for do in (False, True)]
    asked += [dns.message.make_query(row.owner, rtype).to_wire()  # chains, targets, DS
              for row in rows if row.rtype in ("CNAME", "DNAME", "MX", "NS", "SRV")
              for rtype in ("A", row.rtype, "DS")]
    table = fastpath.shared_table(holder.snapshot)
    assert table is not None
    for query in asked:
        teach(table, holder.snapshot, query)
    for _ in range(data.draw(st.integers(1, 4))):
        step = data.draw(change(list(holder.current.zones), pointed_at(rows)))
        before, before_rows, before_signed = holder.snapshot, served, signed
        done = applied(holder, rows, served, step, signed)
        if done is None:
            continue
        served, signed = done
        fresh = fresh_snapshot(served, signed)
        snapshot = holder.snapshot
        moved = fastpath.shared_table(snapshot)
        assert moved is table  # carried over, never made again
        for query in asked:  # what C kept, asked before Python answers anything
            fast, _key, _wanted = table.ask(query)
            if fast is not None:
                assert fast == answer(fresh, query, transport=UDP), query.hex()
        assert_kept_entries_fresh(snapshot, fresh.index)
        for query in asked:
            assert teach(table, snapshot, query) == answer(fresh, query, transport=UDP)
            assert answer(snapshot, query, transport=TCP) == answer(fresh, query,
                                                                     transport=TCP)
        old = fresh_snapshot(before_rows, before_signed)
        for query in asked:  # the last version, asked after the new one kept its answers
            assert answer(before, query, transport=UDP) == answer(old, query, transport=UDP)


def test_a_swap_keeps_every_other_zones_answers_in_c_and_answers_the_changed_ones_again(
) -> None:
    """The other zone's answers stay in C as they were; the changed owner's answer is
    answered again by Python in the move (``fastpath.ANSWERED_AGAIN``), so C holds the
    new one before anyone asks."""
    holder = IndexHolder(ZoneIndex.from_records(TWO_ZONES))
    table = fastpath.shared_table(holder.snapshot)
    assert table is not None
    asked = {name: dns.message.make_query(name, "A").to_wire()
             for name in (f"www.{SIGNED}", f"www.{PLAIN}", f"ns.{PLAIN}")}
    for query in asked.values():
        teach(table, holder.snapshot, query)
        assert table.ask(query)[0] is not None
    new = RecordRow(SIGNED, f"www.{SIGNED}", "A", 3600, "198.51.100.80")
    holder.swap(holder.current.with_owners_replaced(SIGNED, [f"www.{SIGNED}"], [new]))
    assert fastpath.shared_table(holder.snapshot) is table
    fresh = Snapshot(holder.current)
    assert table.ask(asked[f"www.{SIGNED}"])[0] == answer(fresh, asked[f"www.{SIGNED}"],
                                                          transport=UDP)
    assert b"\xc6\x33\x64\x50" in (table.ask(asked[f"www.{SIGNED}"])[0] or b"")  # .80
    for name in (f"www.{PLAIN}", f"ns.{PLAIN}"):  # the other zone's, still in C
        fast = table.ask(asked[name])[0]
        assert fast is not None
        assert fast == answer(fresh, asked[name], transport=UDP)
    kept = holder.snapshot.cache.kept.answers[asked[f"www.{PLAIN}"][12:-2]]
    assert asked[f"www.{PLAIN}"][12:-2] not in holder.snapshot.cache  # not in the new
    # snapshot's own cache,
    answer(holder.snapshot, asked[f"www.{PLAIN}"], transport=UDP)
    assert holder.snapshot.cache[asked[f"www.{PLAIN}"][12:-2]] is kept[0]  # and takes it


def test_a_cname_into_a_changed_zone_is_answered_afresh() -> None:
    """The trap: an answer read from two zones is stale when either changes."""
    rows = [*TWO_ZONES, RecordRow(PLAIN, f"alias.{PLAIN}", "CNAME", 300, f"www.{SIGNED}")]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    table = fastpath.shared_table(holder.snapshot)
    query = dns.message.make_query(f"alias.{PLAIN}", "A").to_wire()
    teach(table, holder.snapshot, query)
    new = RecordRow(SIGNED, f"www.{SIGNED}", "A", 3600, "198.51.100.80")
    holder.swap(holder.current.with_owners_replaced(SIGNED, [f"www.{SIGNED}"], [new]))
    assert fastpath.shared_table(holder.snapshot) is table
    assert table is not None
    assert table.ask(query)[0] is None
    fresh = Snapshot(ZoneIndex.from_records(
        [row for row in rows if row.owner != f"www.{SIGNED}"] + [new]))
    assert teach(table, holder.snapshot, query) == answer(fresh, query, transport=UDP)
    assert b"\xc6\x33\x64\x50" in (table.ask(query)[0] or b"")  # 198.51.100.80, now in C


INSIDE_QNAMES = [*owner_patches.NAMES, *(f"{rel}.{owner_patches.Z}"
                                        for rel in ("q.b.a", "q.x.d", "nope", "q.a", "q.d"))]
INSIDE_TYPES = ("A", "AAAA", "MX", "NS", "TXT", "CNAME", "DS", "SOA")


def with_serial(rows: list[RecordRow], serial: int) -> tuple[list[str], list[RecordRow]]:
    """The apex's records again with the SOA's serial moved to ``serial``, as the zone
    source bumps it with every change."""
    apex = owner_patches.key(owner_patches.Z)
    held = [row for row in rows if owner_patches.key(row.owner) == apex]
    moved = [row if row.rtype != "SOA" else
             RecordRow(row.zone, row.owner, "SOA", row.ttl,
                       " ".join([*row.rdata.split()[:2], str(serial), *row.rdata.split()[3:]]))
             for row in held]
    return [owner_patches.Z], moved


@settings(max_examples=scaled(1), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(owner_patches.records_at(owner_patches.NAMES), min_size=1, max_size=3),
       st.lists(st.tuples(owner_patches.patch(most=2), st.booleans()), min_size=1, max_size=6))
def test_answers_kept_inside_a_patched_zone_equal_a_fresh_snapshots(
    extras: list[list[RecordRow]],
    patches: list[tuple[tuple[list[str], list[RecordRow]], bool]],
) -> None:
    """Owners of the queried zone replaced (its serial moved with most changes, as the
    zone source moves it): every answer kept across the patch, in Python and in the
    carried table, is a fresh snapshot's, byte for byte."""
    rows = [*owner_patches.BASE, *(row for extra in extras for row in extra)]
    try:
        holder = IndexHolder(ZoneIndex.from_records(rows))
    except ZoneError:
        return
    table = fastpath.shared_table(holder.snapshot)
    assert table is not None
    asked = [dns.message.make_query(name, rtype).to_wire()
             for name in INSIDE_QNAMES for rtype in INSIDE_TYPES]
    for query in asked:
        teach(table, holder.snapshot, query)
    for serial, ((drawn, drawn_rows), bump) in enumerate(patches, start=2):
        owners, new = drawn, drawn_rows
        if bump and owner_patches.Z not in owners:
            apex_owners, apex_rows = with_serial(rows, serial)
            owners, new = [*owners, *apex_owners], [*new, *apex_rows]
        replaced = {owner_patches.key(owner) for owner in owners}
        try:
            holder.swap(holder.current.with_owners_replaced(owner_patches.Z, owners, new))
        except ZoneError:
            continue
        rows = [row for row in rows if owner_patches.key(row.owner) not in replaced] + new
        fresh = Snapshot(ZoneIndex.from_records(rows))
        assert fastpath.shared_table(holder.snapshot) is table
        for query in asked:  # what C kept, asked before Python answers anything
            fast = table.ask(query)[0]
            if fast is not None:
                assert fast == answer(fresh, query, transport=UDP), query.hex()
        assert_kept_entries_fresh(holder.snapshot, fresh.index)
        for query in asked:
            assert teach(table, holder.snapshot, query) == answer(fresh, query, transport=UDP)


def test_a_patch_keeps_the_answers_it_cannot_affect_inside_the_changed_zone_in_c() -> None:
    """One owner of a zone replaced and its serial moved, as the zone source does: the
    zone's answers that read neither stay in the table, answered in C; its NXDOMAIN and
    NODATA answers are given again with the new SOA in the move itself, and the changed
    owners' own questions (the apex's NS) answered again by Python in the move (answered
    in C at once, no question handed to Python); an answer that read a changed owner
    elsewhere (the MX naming ``mail``) goes to Python at its next question."""
    rows = [*TWO_ZONES, RecordRow(PLAIN, f"mail.{PLAIN}", "A", 3600, "192.0.2.25"),
            RecordRow(PLAIN, f"mx.{PLAIN}", "MX", 3600, f"10 mail.{PLAIN}")]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    table = fastpath.shared_table(holder.snapshot)
    assert table is not None
    asked = {(name, rtype): dns.message.make_query(f"{name}{PLAIN}", rtype).to_wire()
             for name, rtype in (("www.", "A"), ("ns.", "A"), ("mx.", "MX"), ("", "NS"),
                                 ("nope.", "A"), ("www.", "TXT"))}
    for query in asked.values():
        teach(table, holder.snapshot, query)
        teach(table, holder.snapshot, query)
        assert table.ask(query)[0] is not None
    apex = [row for row in rows if row.owner == PLAIN]
    new = [RecordRow(PLAIN, f"mail.{PLAIN}", "A", 3600, "198.51.100.25"),
           *(row if row.rtype != "SOA" else RecordRow(PLAIN, PLAIN, "SOA", 3600,
                                                      row.rdata.replace(" 1 ", " 2 "))
             for row in apex)]
    holder.swap(holder.current.with_owners_replaced(PLAIN, [f"mail.{PLAIN}", PLAIN], new))
    assert fastpath.shared_table(holder.snapshot) is table
    fresh = Snapshot(ZoneIndex.from_records(
        [row for row in rows if row.owner not in (PLAIN, f"mail.{PLAIN}")] + new))
    for kept in (("www.", "A"), ("ns.", "A"),  # read nothing the patch changed
                 ("nope.", "A"), ("www.", "TXT"),  # negative: the new SOA given in the move
                 ("", "NS")):  # at a changed owner: answered again in the move
        fast = table.ask(asked[kept])[0]
        assert fast is not None, kept
        assert fast == answer(fresh, asked[kept], transport=UDP)
    for gone in (("mx.", "MX"),):
        assert table.ask(asked[gone])[0] is None, gone  # mail's address, the SOA, the apex
        assert teach(table, holder.snapshot, asked[gone]) == answer(
            fresh, asked[gone], transport=UDP)


def test_a_serial_raised_alone_keeps_the_apex_answers_that_hold_no_soa_in_c() -> None:
    """Every change raises the apex's serial: the answers that read the apex but hold no
    SOA (its NS, its MX, a CNAME to it) stay in C across such a move, each the new
    version's; its SOA answer and a chain that ends in no data (an SOA in authority) go
    to Python. A move that changed more of the apex than its SOA takes them all.
    (``ANSWERED_AGAIN`` 0: what ``moved`` marks shows.)"""
    z = owner_patches.Z
    rows = [*owner_patches.BASE, RecordRow(z, z, "MX", 3600, f"10 a.{z}"),
            RecordRow(z, f"a.{z}", "A", 3600, "192.0.2.1"),
            RecordRow(z, f"c.{z}", "CNAME", 3600, z)]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    table = fastpath.shared_table(holder.snapshot)
    assert table is not None
    asked = {what: dns.message.make_query(name, rtype).to_wire()
             for what, (name, rtype) in {"ns": (z, "NS"), "mx": (z, "MX"),
                                         "alias mx": (f"c.{z}", "MX"), "soa": (z, "SOA"),
                                         "alias txt": (f"c.{z}", "TXT")}.items()}
    for query in asked.values():
        teach(table, holder.snapshot, query)
        teach(table, holder.snapshot, query)
        assert table.ask(query)[0] is not None
    kept, gone = ("ns", "mx", "alias mx"), ("soa", "alias txt")
    with pytest.MonkeyPatch.context() as patching:
        patching.setattr(fastpath, "ANSWERED_AGAIN", 0)
        for serial, mx in ((2, "10"), (3, "10"), (4, "20")):  # the last moves its MX too
            owners, apex_rows = with_serial(rows, serial)
            apex_rows = [row if row.rtype != "MX" else
                         RecordRow(z, z, "MX", 3600, f"{mx} a.{z}") for row in apex_rows]
            holder.swap(holder.current.with_owners_replaced(z, owners, apex_rows))
            assert fastpath.shared_table(holder.snapshot) is table
            rows = [row for row in rows if row.owner != z] + apex_rows
            fresh = Snapshot(ZoneIndex.from_records(rows))
            for what in (gone if mx == "10" else (*kept, *gone)):
                assert table.ask(asked[what])[0] is None, what
            for what in kept if mx == "10" else ():
                fast = table.ask(asked[what])[0]
                assert fast is not None, what
                assert fast == answer(fresh, asked[what], transport=UDP), what
            for query in asked.values():
                assert teach(table, holder.snapshot, query) == answer(
                    fresh, query, transport=UDP)
                teach(table, holder.snapshot, query)


def test_a_bulk_patch_drops_the_zone_from_the_table_and_answers_stay_fresh() -> None:
    """More owners replaced than a move compares (``MOVED_OWNERS``): the zone is dropped
    and given again, and what C then answers is the new version's."""
    hosts = [RecordRow(PLAIN, f"h{i}.{PLAIN}", "A", 3600, "192.0.2.9")
             for i in range(fastpath.MOVED_OWNERS + 1)]
    rows = [*TWO_ZONES, *hosts]
    holder = IndexHolder(ZoneIndex.from_records(rows))
    table = fastpath.shared_table(holder.snapshot)
    assert table is not None
    asked = [dns.message.make_query(row.owner, "A").to_wire() for row in rows]
    for query in asked:
        teach(table, holder.snapshot, query)
    new = [RecordRow(PLAIN, row.owner, "A", 3600, "198.51.100.9") for row in hosts]
    holder.swap(holder.current.with_owners_replaced(PLAIN, [row.owner for row in hosts], new))
    assert fastpath.shared_table(holder.snapshot) is table
    fresh = Snapshot(ZoneIndex.from_records([*TWO_ZONES, *new]))
    for query in asked:
        fast = table.ask(query)[0]
        if fast is not None:
            assert fast == answer(fresh, query, transport=UDP)
        assert teach(table, holder.snapshot, query) == answer(fresh, query, transport=UDP)
    assert table.ask(dns.message.make_query(f"www.{PLAIN}", "A").to_wire())[0] is not None


@pytest.mark.parametrize("entries", [CACHE_ENTRIES, 4])
def test_a_patch_marks_stale_exactly_the_entries_that_read_a_changed_owner(entries: int) -> None:
    """``Table.moved`` finds the entries that read a changed owner (or an ancestor of
    one) through the names each entry read; in a table of 4 entries whose entries read
    more names than it lists (5 here), by walking its slots instead. Either way the
    entries that read the changed owner or its ancestor go to Python, the others stay
    in C, each answer the new version's. (The changed owners' questions are not
    answered again in the move here: ``ANSWERED_AGAIN`` 0, so what ``moved`` marks
    shows.)"""
    rows = [*TWO_ZONES, *(RecordRow(PLAIN, f"{name}.{PLAIN}", "A", 3600, "192.0.2.25")
                          for name in ("p.b", "q.b", "r.c"))]
    with pytest.MonkeyPatch.context() as patching:
        patching.setattr(fastpath, "CACHE_ENTRIES", entries)
        holder = IndexHolder(ZoneIndex.from_records(rows))
        table = fastpath.shared_table(holder.snapshot)
    assert table is not None
    with pytest.MonkeyPatch.context() as patching:
        patching.setattr(fastpath, "ANSWERED_AGAIN", 0)
        marked_stale_exactly(holder, table, rows)


def marked_stale_exactly(holder: IndexHolder, table: fastpath.Table,
                         rows: list[RecordRow]) -> None:
    asked = {name: dns.message.make_query(f"{name}.{PLAIN}", "A").to_wire()
             for name in ("p.b", "q.b", "r.c")}
    for query in asked.values():
        teach(table, holder.snapshot, query)
        teach(table, holder.snapshot, query)
        assert table.ask(query)[0] is not None
    for changed, kept, gone in (("q.b", ("p.b", "r.c"), ("q.b",)),
                                ("b", ("r.c",), ("p.b", "q.b"))):
        new = [RecordRow(PLAIN, f"{changed}.{PLAIN}", "TXT" if changed == "b" else "A", 3600,
                         '"b"' if changed == "b" else "198.51.100.25")]
        holder.swap(holder.current.with_owners_replaced(PLAIN, [f"{changed}.{PLAIN}"], new))
        assert fastpath.shared_table(holder.snapshot) is table
        rows = [row for row in rows if row.owner != f"{changed}.{PLAIN}"] + new
        fresh = Snapshot(ZoneIndex.from_records(rows))
        for name in kept:
            fast = table.ask(asked[name])[0]
            assert fast is not None, name
            assert fast == answer(fresh, asked[name], transport=UDP)
        for name in gone:
            assert table.ask(asked[name])[0] is None, name
        for query in asked.values():
            assert teach(table, holder.snapshot, query) == answer(fresh, query, transport=UDP)
            teach(table, holder.snapshot, query)
