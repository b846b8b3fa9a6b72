"""Owner-level change notes and the zone source's incremental updates, against the private
cluster: the triggers name the owners a small change touches and fall back to the whole
zone for bulk or ambiguous changes; a running source replaces only the named owners, and
whatever path it takes, what it serves once caught up equals a full reload."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
import trio

from tests.scenario.operator_state_helpers import (
    answer_texts,
    import_zone,
    run_sql,
    zone_source,
)
from tests.scenario.pg import PgCluster, notes_so_far
from valis_core.dns import wire
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.zone_notes import CHANNEL, Note, parse_note
from valis_core.operator_state.zone_source import PgZoneSource
from valis_core.operator_state.zones import delete_zone, load_zone_rows

WAIT = 10.0  # bound on how long a test waits for the source to catch up; never timed
ORG = "example.org."
NET = "example.net."
EXTRA = (
    "www IN A 192.0.2.80\n"
    "www IN AAAA 2001:db8::80\n"
    "mail IN MX 10 www.example.org.\n"
    "*.wild IN TXT \"wildcard\"\n"
    "a.b.c IN A 192.0.2.3\n"
    "sub IN NS ns.sub.example.org.\n"
    "ns.sub IN A 192.0.2.4\n"
    "alias IN CNAME www.example.org.\n"
)


def _import(pg: PgCluster, dsn: str, zone: str, extra: str = EXTRA, serial: int = 1) -> None:
    import_zone(pg, dsn, zone, extra=extra, serial=serial)


def _insert(owner: str, rtype: str, rdata: str, zone: str = ORG) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) VALUES (%s, %s, %s, 300, %s)",
        (zone, owner, rtype, rdata),
    )


def _full_load(pg: PgCluster, dsn: str, zones: list[str]) -> ZoneIndex:
    """What a full reload serves now: every zone read afresh and built from scratch."""
    with pg.connect(dsn) as conn:
        rows = load_zone_rows(conn, zones)
    return ZoneIndex.from_records([row for held in rows.values() for row in held])


def contents(index: ZoneIndex) -> dict[str, tuple[object, ...]]:
    """Everything the answer path reads from each zone of an index."""
    out: dict[str, tuple[object, ...]] = {}
    for origin in index.zones:
        zone = index.zone_for(wire.from_text(origin))
        assert zone is not None
        out[origin] = (
            dict(zone.nodes),
            zone.empty_nonterminals,
            zone.cuts,
            zone.dnames,
            zone.has_wildcard,
            zone.soa,
            zone.negative_ttl,
            zone.record_count,
            getattr(index.parent_of(zone), "origin", None),
        )
    return out


LEGACY_CHANNEL = "valis_zone_changed"


@pytest.fixture
def listener(pg_cluster: PgCluster, state_dsn: str) -> Iterator[Callable[[str], list[str]]]:
    """A connection listening on the change channels; ``listener(channel)`` returns the
    payloads delivered on ``channel`` since the last call for that channel."""
    conn = pg_cluster.connect(state_dsn, autocommit=True)
    writer = pg_cluster.connect(state_dsn, autocommit=True)
    for channel in (CHANNEL, LEGACY_CHANNEL):
        conn.execute(f"LISTEN {channel}")
    held: dict[str, list[str]] = {CHANNEL: [], LEGACY_CHANNEL: []}

    def payloads(channel: str = CHANNEL) -> list[str]:
        for note in notes_so_far(conn, writer):
            held[note.channel].append(note.payload)
        out, held[channel] = held[channel], []
        return out

    try:
        yield payloads
    finally:
        writer.close()
        conn.close()


def test_a_small_change_is_noted_once_by_its_seal_naming_its_owners_lowercased(
    pg_cluster: PgCluster, state_dsn: str, listener: Callable[..., list[str]]
) -> None:
    _import(pg_cluster, state_dsn, ORG)
    listener()
    listener(LEGACY_CHANNEL)
    run_sql(
        pg_cluster,
        state_dsn,
        ("UPDATE records SET rdata = '192.0.2.81' WHERE owner = 'www.example.org.' "
         "AND rtype = 'A'", ()),
        _insert("New.Example.ORG.", "A", "192.0.2.9"),
    )
    # One note for the transaction (migration 0023), the apex among its owners: the seal
    # raised the serial.
    assert listener() == ["example.org.\nexample.org.\nnew.example.org.\nwww.example.org."]
    # The older channel still names the zone, for zone sources of older versions.
    assert listener(LEGACY_CHANNEL) == [ORG]


def test_bulk_and_ambiguous_changes_name_the_zone_only(
    pg_cluster: PgCluster, state_dsn: str, listener: Callable[..., list[str]]
) -> None:
    _import(pg_cluster, state_dsn, ORG)
    listener()
    listener(LEGACY_CHANNEL)
    # An import is always a whole-zone change (its upsert of the zone's row says so).
    _import(pg_cluster, state_dsn, ORG, serial=2)
    assert ORG in listener()
    # An owner spelled with an escape could be the same name as another row's owner.
    run_sql(pg_cluster, state_dsn, _insert("a\\066.example.org.", "TXT", '"escaped"'))
    assert listener() == [ORG]
    # One statement changing 65 owners: named, up to 256 a change.
    run_sql(pg_cluster, state_dsn, _many("h", 65))
    assert listener() == ["\n".join(
        [ORG, *sorted([ORG, *(f"h{i}.{ORG}" for i in range(1, 66))])]
    )]
    # One statement changing more than 256 owners.
    run_sql(pg_cluster, state_dsn, _many("k", 300))
    assert listener() == [ORG]
    # Many small statements in one transaction: never one note per row or statement.
    listener(LEGACY_CHANNEL)
    run_sql(pg_cluster, state_dsn, *[_insert(f"m{i}.example.org.", "A", "192.0.2.2")
                                  for i in range(400)])
    assert listener() == [ORG]
    assert listener(LEGACY_CHANNEL) == [ORG]
    # A transaction's notes do not carry over to the next one.
    run_sql(pg_cluster, state_dsn, _insert("late.example.org.", "A", "192.0.2.3"))
    assert listener() == ["example.org.\nexample.org.\nlate.example.org."]


def _many(prefix: str, count: int) -> tuple[str, tuple[()]]:
    """One statement inserting ``count`` owners of example.org."""
    return (
        "INSERT INTO records (zone, owner, rtype, ttl, rdata) SELECT 'example.org.', "
        f"'{prefix}' || i || '.example.org.', 'A', 300, '192.0.2.1' "
        f"FROM generate_series(1, {count}) i",
        (),
    )


def test_a_note_naming_owners_is_read_with_doubt_resolved_towards_the_whole_zone() -> None:
    assert parse_note("") == Note(everything=True)
    assert parse_note(ORG) == Note(zone=ORG)
    assert parse_note(f"{ORG}\nwww.{ORG}\nWWW.a.{ORG}") == Note(
        zone=ORG, owners=(f"www.{ORG}", f"www.a.{ORG}")
    )
    for owner in (f"a\\066.{ORG}", f"é.{ORG}", "www.example.net.", "a..b.", ".", "x\ty."):
        assert parse_note(f"{ORG}\n{owner}") == Note(zone=ORG), owner


async def _caught_up(pg: PgCluster, dsn: str, holder: IndexHolder, zones: list[str]) -> None:
    """Wait until the served index equals a full reload of the database as it is now."""
    full = contents(await trio.to_thread.run_sync(_full_load, pg, dsn, zones))
    with trio.fail_after(WAIT):
        while contents(holder.current) != full:
            await trio.sleep(0.01)


async def _followed(
    pg: PgCluster, dsn: str, zones: list[str], changes: Iterable[Callable[[], object]],
    **options: Any,
) -> tuple[PgZoneSource, IndexHolder]:
    """A source that loaded ``zones`` (made with ``options``), following while each change
    runs (in a thread), caught up after each."""
    source = zone_source(pg, dsn, zones, **options)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        for change in changes:
            await trio.to_thread.run_sync(change)
            await _caught_up(pg, dsn, holder, zones)
        nursery.cancel_scope.cancel()
    return source, holder


async def test_owner_changes_are_applied_incrementally_and_equal_a_full_reload(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    _import(pg_cluster, state_dsn, ORG)
    _import(pg_cluster, state_dsn, NET)
    zones = [ORG, NET]
    source = zone_source(pg_cluster, state_dsn, zones)
    holder = IndexHolder(await source.load())
    changes: list[tuple[tuple[str, tuple[Any, ...]], ...]] = [
        # An address changes.
        (("UPDATE records SET rdata = '192.0.2.81' WHERE owner = 'www.example.org.' "
          "AND rtype = 'A'", ()),),
        # The only owner beneath two empty non-terminals goes, and they with it.
        (("DELETE FROM records WHERE owner = 'a.b.c.example.org.'", ()),),
        # A new owner beneath new empty non-terminals, and a new wildcard.
        (_insert("x.y.z.example.org.", "A", "192.0.2.7"), _insert("*.example.org.", "TXT", '"*"')),
        # The wildcard that was there goes; the new one stays.
        (("DELETE FROM records WHERE owner = '*.wild.example.org.'", ()),),
        # A new delegation with glue, and the old one's NS removed (its glue stays).
        (_insert("deleg.example.org.", "NS", "ns.deleg.example.org."),
         _insert("ns.deleg.example.org.", "A", "192.0.2.8"),
         ("DELETE FROM records WHERE owner = 'sub.example.org.'", ())),
        # The apex: a new SOA serial and negative TTL, in both zones at once.
        (("UPDATE records SET rdata = replace(rdata, ' 1 7200 3600 1209600 300', "
          "' 2 7200 3600 1209600 60') WHERE rtype = 'SOA'", ()),),
        # An owner changes its case only, and one gains a second type.
        (("UPDATE records SET owner = 'MAIL.example.org.' WHERE owner = 'mail.example.org.'",
          ()),
         _insert("mail.example.org.", "TXT", '"v=spf1 -all"')),
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        untouched = holder.current.zone_for(wire.from_text(NET))
        for statements in changes:
            change = functools.partial(run_sql, pg_cluster, state_dsn, *statements)
            await trio.to_thread.run_sync(change)
            await _caught_up(pg_cluster, state_dsn, holder, zones)
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.81"}
        assert answer_texts(holder.current, "anything.example.org.", "TXT") == {'"*"'}
        nursery.cancel_scope.cancel()
    # Every change was applied owner by owner: no zone was re-read whole.
    assert source.stats.rebuilt_zones == 0
    assert source.stats.patched_zones >= len(changes)
    assert source.stats.failed_reloads == 0
    # Only the apex change touched the other zone.
    net = holder.current.zone_for(wire.from_text(NET))
    assert net is not None
    assert untouched is not None
    assert net.nodes is not untouched.nodes
    assert dict(net.nodes).keys() == dict(untouched.nodes).keys()


async def test_a_change_s_rows_come_with_its_note_and_are_not_read_back(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """The seal's rows note (migration 0022) carries what the changed owners and the apex
    hold after the commit: the source applies it without reading them back."""
    _import(pg_cluster, state_dsn, ORG)
    changes = (
        (("UPDATE records SET rdata = '192.0.2.81' WHERE owner = 'www.example.org.' "
          "AND rtype = 'A'", ()),),
        (_insert("New.Example.ORG.", "A", "192.0.2.9"),
         ("DELETE FROM records WHERE owner = 'alias.example.org.'", ())),
        (("DELETE FROM records WHERE owner = 'New.Example.ORG.'", ()),),
    )
    source, holder = await _followed(pg_cluster, state_dsn, [ORG], [
        functools.partial(run_sql, pg_cluster, state_dsn, *statements)
        for statements in changes
    ])
    assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.81"}
    assert source.stats.owner_reads == 0
    assert source.stats.carried_owners >= 2 * len(changes)  # each owner, and the apex
    assert source.stats.rebuilt_zones == 0


async def test_updates_are_logged_each_at_debug_and_at_most_once_a_second_at_info(
    pg_cluster: PgCluster, state_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A zone taking a change every few milliseconds costs the node no INFO line each: the
    next line at INFO, a second on, tells how many updates it held back."""
    _import(pg_cluster, state_dsn, ORG)
    now = [100.0]

    def change(address: str, later: float) -> Callable[[], None]:
        def run() -> None:
            now[0] += later
            run_sql(pg_cluster, state_dsn, ("UPDATE records SET rdata = %s WHERE owner = "
                                            "'www.example.org.' AND rtype = 'A'", (address,)))
        return run

    with caplog.at_level(logging.DEBUG, logger="valis.zone_source"):
        await _followed(pg_cluster, state_dsn, [ORG], [
            change("192.0.2.81", 0.0), change("192.0.2.82", 0.3), change("192.0.2.83", 0.3),
            change("192.0.2.84", 0.5),
        ], ticks=lambda: now[0])
    lines = [(record.levelno, record.getMessage()) for record in caplog.records
             if record.getMessage().startswith("zone source: updated")]
    infos = [i for i, (level, _) in enumerate(lines) if level == logging.INFO]
    assert len(infos) == 2, lines
    assert infos[0] == 0, lines
    assert all(level == logging.DEBUG for level, _ in lines[1:infos[1]]), lines
    held = infos[1] - 1
    assert held >= 2  # the two changes inside the second
    assert lines[infos[1]][1].endswith(f" ({held} more update(s) since the last line)")
    assert "more update" not in lines[0][1]


def _interleaved(pg: PgCluster, dsn: str) -> None:
    """Two transactions change one owner at once: the first to write commits last."""
    with pg.connect(dsn) as first, pg.connect(dsn) as second:
        first.execute("UPDATE records SET rdata = '192.0.2.90' WHERE owner = 'www.example.org.'"
                      " AND rtype = 'A'")
        second.execute(*_insert("www.example.org.", "TXT", '"second"'))
        second.commit()
        first.execute(*_insert("www.example.org.", "TXT", '"first"'))
        first.commit()


async def test_rows_notes_of_interleaved_changes_end_as_a_read_would(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """Each seal reads its owners' rows holding the zone's lock to its commit, so the
    notes, applied in commit order, leave the owner as it was committed last."""
    _import(pg_cluster, state_dsn, ORG)
    source, holder = await _followed(pg_cluster, state_dsn, [ORG], [
        functools.partial(_interleaved, pg_cluster, state_dsn)
    ])
    assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.90"}
    assert answer_texts(holder.current, "www.example.org.", "TXT") == {'"first"', '"second"'}
    assert source.stats.owner_reads == 0


async def test_an_owner_whose_rows_do_not_fit_a_note_is_read_back(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """Rows beyond a note's size: the seal sends no rows note, and the owners the change
    named are read, as before migration 0022; what is served still equals a full read."""
    _import(pg_cluster, state_dsn, ORG)
    zones = [ORG]
    long = '"' + "x" * 250 + '"'
    run_sql(pg_cluster, state_dsn,
            *(_insert("big.example.org.", "TXT", long[:-1] + f"{i}\"") for i in range(40)))
    source, holder = await _followed(pg_cluster, state_dsn, zones, [functools.partial(
        run_sql, pg_cluster, state_dsn, _insert("big.example.org.", "TXT", '"one more"'))])
    assert source.stats.owner_reads == 1
    assert len(answer_texts(holder.current, "big.example.org.", "TXT")) == 41
    assert source.stats.rebuilt_zones == 0


async def test_an_owner_carried_then_changed_beyond_a_note_is_read_in_the_same_batch(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    """The first change's rows come with its note; the second, to the same owner, does
    not fit one. Folded into one batch (both commit before the source reads), the owner
    is read back, not taken from the first note."""
    _import(pg_cluster, state_dsn, ORG)
    zones = [ORG]
    source = zone_source(pg_cluster, state_dsn, zones)
    holder = IndexHolder(await source.load())
    run_sql(pg_cluster, state_dsn, ("UPDATE records SET rdata = '192.0.2.91' "
                                    "WHERE owner = 'www.example.org.' AND rtype = 'A'", ()))
    run_sql(pg_cluster, state_dsn, *(
        _insert("www.example.org.", "TXT", '"' + "y" * 250 + f'{i}"') for i in range(40)))
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        nursery.cancel_scope.cancel()
    assert len(answer_texts(holder.current, "www.example.org.", "TXT")) == 40
    assert source.stats.owner_reads == 1


async def test_bulk_changes_and_imports_reload_the_zone_whole_and_end_right(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    _import(pg_cluster, state_dsn, ORG)
    zones = [ORG]
    source = zone_source(pg_cluster, state_dsn, zones)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        # 400 rows in one statement.
        await trio.to_thread.run_sync(lambda: run_sql(pg_cluster, state_dsn, (
            "INSERT INTO records (zone, owner, rtype, ttl, rdata) SELECT 'example.org.', "
            "'h' || i || '.a.example.org.', 'A', 300, '192.0.2.1' "
            "FROM generate_series(1, 400) i", ())))
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        assert source.stats.rebuilt_zones == 1
        # 300 one-row statements in one transaction (more than the 256 owners a
        # transaction may name).
        await trio.to_thread.run_sync(lambda: run_sql(pg_cluster, state_dsn, *[
            ("DELETE FROM records WHERE owner = %s", (f"h{i}.a.example.org.",))
            for i in range(1, 301)
        ]))
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        assert source.stats.rebuilt_zones == 2
        # `valis zone import`: delete and insert, the zone replaced whole.
        await trio.to_thread.run_sync(
            lambda: _import(pg_cluster, state_dsn, ORG, "only IN A 192.0.2.99\n", serial=5)
        )
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        assert answer_texts(holder.current, "www.example.org.", "A") == set()
        assert answer_texts(holder.current, "only.example.org.", "A") == {"192.0.2.99"}
        # And a small change after all that is applied owner by owner again.
        patched = source.stats.patched_zones
        await trio.to_thread.run_sync(lambda: run_sql(
            pg_cluster, state_dsn, _insert("after.example.org.", "A", "192.0.2.5")
        ))
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        assert source.stats.patched_zones == patched + 1
        nursery.cancel_scope.cancel()


async def test_many_owner_notes_in_one_batch_reload_the_zone_whole(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    _import(pg_cluster, state_dsn, ORG)
    zones = [ORG]
    source = zone_source(pg_cluster, state_dsn, zones, max_patch_owners=3)
    holder = IndexHolder(await source.load())
    # Five owners change in one transaction while the source listens but does not read
    # yet: their notes are sent together at the commit and wait as one batch naming five
    # owners, more than it patches. (Five transactions' notes may arrive in two reads.)
    run_sql(pg_cluster, state_dsn,
            *(_insert(f"n{i}.example.org.", "A", "192.0.2.6") for i in range(5)))
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        nursery.cancel_scope.cancel()
    assert source.stats.rebuilt_zones == 1
    assert source.stats.patched_zones == 0


async def test_an_owner_spelled_two_ways_keeps_its_zone_on_whole_reloads(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    _import(pg_cluster, state_dsn, ORG, "aa IN A 192.0.2.1\n")
    zones = [ORG]
    source = zone_source(pg_cluster, state_dsn, zones)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        # The same DNS name as aa.example.org., spelled with an escape.
        await trio.to_thread.run_sync(lambda: run_sql(
            pg_cluster, state_dsn, _insert("a\\097.example.org.", "TXT", '"same name"')
        ))
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        rebuilt = source.stats.rebuilt_zones
        # A plain change to that name: reading rows by 'aa.example.org.' would miss the
        # escaped row, so the zone is read whole while it holds one.
        await trio.to_thread.run_sync(lambda: run_sql(
            pg_cluster, state_dsn, ("DELETE FROM records WHERE owner = 'aa.example.org.'", ())
        ))
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        assert source.stats.rebuilt_zones == rebuilt + 1
        assert answer_texts(holder.current, "aa.example.org.", "TXT") == {'"same name"'}
        nursery.cancel_scope.cancel()


async def test_a_failed_owner_update_is_not_lost_when_a_later_one_fixes_it(
    pg_cluster: PgCluster, state_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    _import(pg_cluster, state_dsn, ORG)
    zones = [ORG]
    source = zone_source(pg_cluster, state_dsn, zones)
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        with caplog.at_level(logging.ERROR, logger="valis.zone_source"):
            # One transaction: a good change and a CNAME beside data (unservable).
            await trio.to_thread.run_sync(lambda: run_sql(
                pg_cluster, state_dsn,
                _insert("good.example.org.", "A", "192.0.2.10"),
                _insert("www.example.org.", "CNAME", "good.example.org."),
            ))
            with trio.fail_after(WAIT):
                while source.stats.failed_reloads < 1:
                    await trio.sleep(0.01)
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.80"}
        assert "www.example.org.: CNAME beside other data" in caplog.text
        # Fixing www alone must still bring good.example.org. in.
        await trio.to_thread.run_sync(lambda: run_sql(
            pg_cluster, state_dsn, ("DELETE FROM records WHERE rtype = 'CNAME' "
                                    "AND owner = 'www.example.org.'", ())
        ))
        await _caught_up(pg_cluster, state_dsn, holder, zones)
        assert answer_texts(holder.current, "good.example.org.", "A") == {"192.0.2.10"}
        nursery.cancel_scope.cancel()


async def test_a_deleted_zone_keeps_its_last_version_and_a_recreated_one_is_served(
    pg_cluster: PgCluster, state_dsn: str
) -> None:
    _import(pg_cluster, state_dsn, ORG)
    _import(pg_cluster, state_dsn, NET)
    source = zone_source(pg_cluster, state_dsn, [ORG, NET])
    holder = IndexHolder(await source.load())
    async with trio.open_nursery() as nursery:
        await nursery.start(source.run, holder)
        with pg_cluster.connect(state_dsn) as conn:
            assert delete_zone(conn, ORG)
        with trio.fail_after(WAIT):
            while source.stats.failed_reloads < 1:
                await trio.sleep(0.01)
        assert answer_texts(holder.current, "www.example.org.", "A") == {"192.0.2.80"}
        await trio.to_thread.run_sync(
            lambda: _import(pg_cluster, state_dsn, ORG, "back IN A 192.0.2.50\n", serial=9)
        )
        await _caught_up(pg_cluster, state_dsn, holder, [ORG, NET])
        assert answer_texts(holder.current, "back.example.org.", "A") == {"192.0.2.50"}
        # And owner-level changes follow the recreated zone.
        await trio.to_thread.run_sync(lambda: run_sql(
            pg_cluster, state_dsn, ("UPDATE records SET rdata = '192.0.2.51' "
                                    "WHERE owner = 'back.example.org.'", ())
        ))
        await _caught_up(pg_cluster, state_dsn, holder, [ORG, NET])
        nursery.cancel_scope.cancel()
