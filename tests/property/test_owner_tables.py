"""The persistent owner tables (``valis_core.dns.zone.owners``) behave as a plain dict
(``OwnerMap``) and a plain set (``OwnerSet``) under any sequence of writes, lookups and
walks, whatever their shard size; every version stays as it was made while later ones
are drafted from it (and from each other); ``differing`` names exactly the keys two
versions do not hold alike; and the compiled fast path finds a key in the shard Python
put it in."""

from __future__ import annotations

from collections.abc import Iterator

import dns.message
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from valis_core.dns.answer import Transport, answer, fastpath
from valis_core.dns.answer.snapshot import Snapshot
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex, owners
from valis_core.dns.zone.owners import OwnerMap, OwnerSet

KEYS = st.binary(min_size=0, max_size=3)
"""Few enough distinct keys that writes hit the same keys again; enough to split."""

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers(0, 3)),
        st.tuples(st.just("del"), KEYS, st.just(0)),
        st.tuples(st.just("get"), KEYS, st.just(0)),
        st.tuples(st.just("walk"), st.just(b""), st.just(0)),
        st.tuples(st.just("finish"), st.just(b""), st.integers(0, 1000)),
    ),
    max_size=60,
)


@pytest.fixture
def shard_owners(request: pytest.FixtureRequest) -> Iterator[int]:
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(owners, "SHARD_OWNERS", request.param)
        yield request.param


def same_map(table: OwnerMap[int], model: dict[bytes, int]) -> None:
    assert len(table) == len(model)
    assert dict(table.items()) == model
    assert sorted(table) == sorted(model)
    assert sorted(table.values()) == sorted(model.values())
    for key, value in model.items():
        assert key in table
        assert table[key] == value
        assert table.get(key) == value
    assert table == OwnerMap(model)


@pytest.mark.parametrize("shard_owners", [1, 2, 1024], indirect=True)
@settings(max_examples=scaled(1), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # one size a run
@given(st.dictionaries(KEYS, st.integers(0, 3), max_size=30), OPS)
def test_a_map_behaves_as_a_dict_and_no_version_ever_changes(
    shard_owners: int, start: dict[bytes, int], ops: list[tuple[str, bytes, int]]
) -> None:
    versions: list[tuple[OwnerMap[int], dict[bytes, int]]] = [(OwnerMap(start), dict(start))]
    table, model = versions[0]
    draft, drafted = table.draft(), dict(model)
    for op, key, value in ops:
        if op == "set":
            draft[key] = value
            drafted[key] = value
        elif op == "del":
            if key in drafted:
                del draft[key]
                del drafted[key]
            else:
                with pytest.raises(KeyError):
                    del draft[key]
        elif op == "get":
            assert draft.get(key) == drafted.get(key)
            assert (key in draft) == (key in drafted)
            assert len(draft) == len(drafted)
        elif op == "walk":
            same_map(table, model)
        else:  # finish this draft, and draft the next from any version made so far
            made = draft.finish_map()
            same_map(made, drafted)
            versions.append((made, dict(drafted)))
            table, model = versions[value % len(versions)]
            draft, drafted = table.draft(), dict(model)
    for version, held in versions:
        same_map(version, held)  # every version as it was made
    for one, one_held in versions:  # small ints are the same objects when equal
        for other, other_held in versions:
            assert one.differing(other) == {
                k for k in one_held.keys() | other_held.keys()
                if one_held.get(k, -1) != other_held.get(k, -1)
            }
            assert (one == other) == (one_held == other_held)


@pytest.mark.parametrize("shard_owners", [1, 3], indirect=True)
@settings(max_examples=scaled(1), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # one size a run
@given(st.sets(KEYS, max_size=30), st.lists(st.tuples(st.booleans(), KEYS), max_size=60))
def test_a_set_behaves_as_a_frozenset(
    shard_owners: int, start: set[bytes], writes: list[tuple[bool, bytes]]
) -> None:
    table = OwnerSet(start)
    draft = table.draft()
    model = set(start)
    for add, key in writes:
        if add:
            draft.add(key)
            model.add(key)
        else:
            draft.discard(key)
            model.discard(key)
    made = draft.finish_set()
    assert made == model
    assert model == made
    assert table == start  # the version drafted from is as it was
    assert made == OwnerSet(model)
    assert hash(made) == hash(frozenset(model))
    assert made ^ start == model ^ start
    assert made | {b"new"} == model | {b"new"}
    assert made.isdisjoint(start) == model.isdisjoint(start)
    assert all(key in made for key in model)
    assert made.differing(table) == model ^ start


@pytest.mark.parametrize("shard_owners", [1], indirect=True)
def test_the_compiled_path_finds_owners_in_their_shards(shard_owners: int) -> None:
    """A zone of a hundred owners in shards of one or two: C's flood answers (NXDOMAIN
    for a missing name, NODATA for a type missing at an existing name, at an empty
    non-terminal) equal Python's, after a patch too."""
    if not fastpath.COMPILED:
        pytest.skip("the compiled fast path is not built")
    zone = "example.com."
    rows = [
        RecordRow(zone, zone, "SOA", 3600, f"ns1.{zone} h.{zone} 1 7200 3600 1209600 300"),
        RecordRow(zone, zone, "NS", 3600, f"ns1.{zone}"),
        *(RecordRow(zone, f"h{i}.e{i % 7}.{zone}", "A", 300, "192.0.2.1") for i in range(100)),
    ]
    index = ZoneIndex.from_records(rows)
    served_zone = index.zone_for(b"\x07example\x03com\x00")
    assert served_zone is not None
    assert len(served_zone.nodes.shards) > 32
    new = RecordRow(zone, f"new.{zone}", "A", 300, "192.0.2.9")
    patched = index.with_owners_replaced(zone, [f"h1.e1.{zone}", f"new.{zone}"], [new])
    for served in (index, patched):
        snapshot = Snapshot(served)
        table = fastpath.table_for(snapshot)
        assert table is not None
        for name, rtype in [(f"h{i}.e{i % 7}.{zone}", "TXT") for i in range(100)] + [
            (f"nx{i}.{zone}", "A") for i in range(100)
        ] + [(f"e{i}.{zone}", "MX") for i in range(7)] + [(f"new.{zone}", "TXT")]:
            query = dns.message.make_query(name, rtype, id=7).to_wire()
            expected = answer(snapshot, query, transport=Transport.UDP)
            fast, key, wanted = table.ask(query)
            if fast is None:
                fastpath.learn(table, snapshot, key, wanted)
                fast, _, _ = table.ask(query)
            assert fast == expected, (name, rtype)


@pytest.mark.parametrize("shard_owners", [1, 1024], indirect=True)
@settings(max_examples=scaled(1), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # one size a run
@given(st.dictionaries(KEYS, st.integers(0, 3), max_size=30), st.lists(KEYS, max_size=10))
def test_the_compiled_probes_read_a_table_as_python_does(
    shard_owners: int, held: dict[bytes, int], asked: list[bytes]
) -> None:
    """``owner_get`` and ``owner_has`` (the answer path's probes, in C) find what the
    table's own ``get`` and ``in`` find, for keys held and not."""
    if not fastpath.COMPILED:
        pytest.skip("the compiled fast path is not built")
    from valis_core.dns.answer._fastpath import owner_get, owner_has

    table = OwnerMap(held)
    names = OwnerSet(held)
    for key in [*held, *asked]:
        assert owner_get(table.shards, key) == table.get(key)
        assert owner_has(names.shards, key) == (key in names)


def test_the_compiled_probes_refuse_what_is_not_an_owner_table() -> None:
    if not fastpath.COMPILED:
        pytest.skip("the compiled fast path is not built")
    from valis_core.dns.answer._fastpath import owner_get, owner_has

    bad: list[object] = [({}, {}, {}), (), ([],), [{}]]
    for shards in bad:
        with pytest.raises(TypeError):
            owner_get(shards, b"k")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            owner_has(shards, b"k")  # type: ignore[arg-type]
