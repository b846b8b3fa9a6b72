"""Replacing a few owners of a served zone (``ZoneIndex.with_owners_replaced``) gives
exactly the index a full build of the changed record set gives: the same records, empty
non-terminals, delegations, DNAMEs, wildcards, SOA, counts and answers, and a refusal
exactly when the full build refuses. Patches are applied one after another, as a running
zone source applies them, so the bookkeeping carried from version to version is tested
too.

The same holds for the answers of a node serving the patched versions as the resident
does: one ``IndexHolder`` swapped from version to version, its ``Signer`` kept across the
swaps (and now and then re-made carrying the last one, as ``SigningFollower`` does), so
signatures and NSEC3 chains made for an earlier version are served for the later one.
Every answer equals the answer of a signer made from scratch over a fresh build of the
same rows at the same wall time: byte for byte with Ed25519 keys, whose signatures are
deterministic (RFC 8032), so a kept signature equals the one a fresh signer makes exactly
when it covers the same data; with ECDSA P-256 (production's default), whose signatures
are random, byte for byte but for the signature fields, and every RRSIG verified over
the RRset it follows with dnspython's validator. Both compact denial and NSEC3, one
zone and several served zones whose answers reach into each other (CNAME and DNAME
chains, MX and SRV targets, a DS at a child apex answered by the parent): a patch of one
zone changes no answer in another one that a fresh build would not. These are issue
27's acceptance properties, to hold across a rewrite of the zone versions and caches."""

from __future__ import annotations

import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hypothesis_profiles import scaled
from tests.property.dnssec_check import validate
from tests.property.owner_patches import BASE, CHILD, NAMES, Z, key, patch, records_at
from tests.property.random_zones import make_valid
from valis_core.dns import dnssec
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import REFRESH, Signer
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.dnssec.zone_keys import file_zone
from valis_core.dns.wire.records import RecordRow, ZoneError
from valis_core.dns.zone import ServedZone, ZoneIndex
from valis_core.dns.zone import owners as owners_module
from valis_core.operator_state.zone_signing import ZoneSigning
from valis_core.resident.signing import signer_for


def build(rows: list[RecordRow]) -> ZoneIndex | ZoneError:
    """The full build; a zone left with no records at all is no zone to serve."""
    if not rows:
        return ZoneError(Z, Z, "no records")
    try:
        return ZoneIndex.from_records(rows)
    except ZoneError as exc:
        return exc


def state(zone: ServedZone) -> tuple[object, ...]:
    return (
        zone.origin,
        zone.apex,
        dict(zone.nodes),
        zone.empty_nonterminals,
        zone.cuts,
        zone.dnames,
        dict(zone.children),
        zone.wildcards,
        zone.has_wildcard,
        zone.soa,
        zone.negative_ttl,
        zone.record_count,
    )


def responses(index: ZoneIndex) -> list[bytes | None]:
    out = []
    for name in [*NAMES, f"q.b.a.{Z}", f"q.x.d.{Z}", f"nope.{Z}", f"q.q.{Z}"]:
        for rtype in ("A", "TXT", "NS", "DS"):
            query = dns.message.make_query(name, rtype, id=4242)
            out.append(answer(index, query.to_wire(), transport=Transport.TCP))
    return out


def assert_same(patched: ZoneIndex, built: ZoneIndex) -> None:
    assert patched.zones == built.zones
    assert patched.record_count == built.record_count
    for origin in built.zones:
        ours = patched.zone_for(key(origin))
        theirs = built.zone_for(key(origin))
        assert ours is not None
        assert theirs is not None
        assert state(ours) == state(theirs)
    assert responses(patched) == responses(built)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records_at(NAMES), st.lists(patch(), min_size=1, max_size=4))
def test_replacing_owners_equals_building_the_changed_zone(
    extra: list[RecordRow], patches: list[tuple[list[str], list[RecordRow]]]
) -> None:
    patch_and_compare(extra, patches)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records_at(NAMES), st.lists(patch(most=len(NAMES)), min_size=1, max_size=4))
def test_replacing_many_owners_in_many_shards_equals_building_the_changed_zone(
    extra: list[RecordRow], patches: list[tuple[list[str], list[RecordRow]]]
) -> None:
    """Change sets adding and removing any number of owners (empty non-terminals made
    and unmade, wildcards, cuts and DNAMEs coming and going), in tables of one owner a
    shard, so that every lookup, copy and split of the shards is in play."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(owners_module, "SHARD_OWNERS", 1)
        patch_and_compare(extra, patches)


def patch_and_compare(
    extra: list[RecordRow], patches: list[tuple[list[str], list[RecordRow]]]
) -> None:
    rows = BASE + extra
    served = build(rows)
    if isinstance(served, ZoneError):
        return  # nothing served, nothing to patch
    for owners, new_rows in patches:
        replaced = {key(owner) for owner in owners}
        changed = [row for row in rows if key(row.owner) not in replaced] + new_rows
        expected = build(changed)
        if isinstance(expected, ZoneError):
            with pytest.raises(ZoneError) as refused:
                served.with_owners_replaced(Z, owners, new_rows)
            assert refused.value.zone == Z
            continue  # the source keeps serving the last good version
        zone = served.zone_for(key(Z))
        assert zone is not None
        before = state(zone)
        patched = served.with_owners_replaced(Z, owners, new_rows)
        assert state(zone) == before  # the version being served is never touched
        assert_same(patched, expected)
        served, rows = patched, changed


def test_a_patch_leaves_other_zones_shared_and_the_old_version_untouched() -> None:
    rows = [
        *BASE,
        RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.1"),
        RecordRow(Z, CHILD, "NS", 300, f"ns.{CHILD}"),
        RecordRow(Z, f"ns.{CHILD}", "A", 300, "192.0.2.9"),
        RecordRow(CHILD, CHILD, "SOA", 300, f"ns.{CHILD} h.{CHILD} 1 1 1 1 1"),
        RecordRow(CHILD, CHILD, "NS", 300, f"ns.{CHILD}"),
        RecordRow(CHILD, f"ns.{CHILD}", "A", 300, "192.0.2.9"),
    ]
    old = ZoneIndex.from_records(rows)
    before = responses(old)
    new_www = RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.77")
    patched = old.with_owners_replaced(Z, [f"www.{Z}", f"x.y.{Z}"], [new_www])
    assert responses(old) == before  # a query on the old version sees only the old one
    expected = ZoneIndex.from_records([new_www if r.owner == f"www.{Z}" else r for r in rows])
    assert_same(patched, expected)
    child_old, child_new = old.zone_for(key(CHILD)), patched.zone_for(key(CHILD))
    assert child_old is not None
    assert child_new is not None
    assert child_new is child_old  # shared whole: a zone belongs to no index version
    assert patched.parent_of(child_new) is patched.zone_for(key(Z))
    assert old.parent_of(child_old) is old.zone_for(key(Z))


def test_a_row_outside_the_replaced_owners_is_a_caller_error() -> None:
    index = ZoneIndex.from_records(BASE)
    stray = RecordRow(Z, f"b.{Z}", "A", 300, "192.0.2.1")
    with pytest.raises(ValueError, match=r"not being replaced: b\.example\.com\."):
        index.with_owners_replaced(Z, [f"a.{Z}"], [stray])


def test_an_owner_outside_the_zone_is_refused() -> None:
    index = ZoneIndex.from_records(BASE)
    with pytest.raises(ZoneError, match="data outside the zone"):
        index.with_owners_replaced(Z, ["www.example.net."], [])


# -- signed answers, and answers across served zones -------------------------------------

NOW = 1_800_000_000
KEYS = {algorithm: dnssec.ZoneKey(dnssec.generate_key(algorithm))
        for algorithm in (dnssec.ED25519, dnssec.ECDSAP256SHA256)}
"""Ed25519: the same key signing the same data gives the same signature (RFC 8032);
ECDSA P-256: a new random signature each time (RFC 6605)."""
DENIALS = st.sampled_from([None, Nsec3Params(), Nsec3Params(1, b"\xab\xcd")])
"""How a signed zone denies: compactly (``None``) or with an NSEC3 chain."""


class Wall:
    """The wall clock both signers read: set by the test, between versions."""

    def __init__(self) -> None:
        self.now = float(NOW)

    def __call__(self) -> float:
        return self.now


def signer(
    signing: dict[str, Nsec3Params | None], served: list[str], clock: Wall,
    zone_key: dnssec.ZoneKey, carry: Signer | None = None,
) -> Signer | None:
    """The signer the resident makes (``signer_for``) for the zones ``signing`` names,
    each signed with ``zone_key`` and denying as it says."""
    rows = {zone: ZoneSigning(zone, zone_key.algorithm, zone_key.tag) for zone in signing}
    ring = {file_zone(zone): {zone_key.tag: zone_key} for zone in signing}
    nsec3 = {zone: params for zone, params in signing.items() if params is not None}
    made, _ = signer_for(rows, ring, served, nsec3, carry=carry, clock=clock)
    return made


def answers(snapshot: Snapshot, questions: list[tuple[str, str, bool]]) -> list[bytes | None]:
    out = []
    for name, rtype, do in questions:
        query = dns.message.make_query(name, rtype, want_dnssec=do, id=4242)
        out.append(answer(snapshot, query.to_wire(), transport=Transport.TCP))
    return out


def assert_answers_fresh(  # noqa: PLR0917 - the served state and what to ask of it
    holder: IndexHolder, rows: list[RecordRow], signing: dict[str, Nsec3Params | None],
    clock: Wall, questions: list[tuple[str, str, bool]], zone_key: dnssec.ZoneKey,
) -> None:
    """What ``holder`` answers now equals what a fresh build of ``rows`` answers with a
    signer made from scratch at the same time; question by question, to name the first
    that differs. ECDSA's signatures are compared as ``verified_apart`` says."""
    fresh = ZoneIndex.from_records(rows)
    scratch = Snapshot(fresh, signer=signer(signing, list(fresh.zones), clock, zone_key))
    served = holder.snapshot
    for question, ours, theirs in zip(
        questions, answers(served, questions), answers(scratch, questions), strict=True
    ):
        seen, fresh_one = ours, theirs
        if zone_key.algorithm == dnssec.ECDSAP256SHA256 and ours and theirs:
            seen = verified_apart(ours, zone_key, signing, clock.now)
            fresh_one = verified_apart(theirs, zone_key, signing, clock.now)
        assert seen == fresh_one, (
            question, ours and dns.message.from_wire(ours).to_text(),
            theirs and dns.message.from_wire(theirs).to_text())


def verified_apart(
    response: bytes, zone_key: dnssec.ZoneKey, signing: dict[str, Nsec3Params | None],
    now: float,
) -> bytes:
    """``response`` with every RRSIG's signature field zeroed, once each RRSIG is
    verified (dnspython's validator, ``zone_key`` as each signed zone's DNSKEY) over the
    RRset it covers in its section (an answer to a question for RRSIG carries none to
    verify over): what is left compares byte for byte."""
    message = dns.message.from_wire(response)
    dnskey = dns.rrset.from_rdata_list(dns.name.root, 3600, [dns.rdata.from_wire(
        dns.rdataclass.IN, dns.rdatatype.DNSKEY, zone_key.dnskey, 0, len(zone_key.dnskey))])
    keys = {dns.name.from_text(zone): dnskey for zone in signing}
    masked = response
    for section in (message.answer, message.authority, message.additional):
        for sigs in section:
            if sigs.rdtype != dns.rdatatype.RRSIG:
                continue
            for covered in section:
                if covered.name == sigs.name and covered.rdtype == sigs.covers:
                    validate(covered, sigs, keys, now=now)
            for sig in sigs:
                signature = sig.signature
                assert signature in response  # masked already if met before (a wildcard's
                masked = masked.replace(signature, bytes(len(signature)))  # RRSIG twice)
    return masked


@st.composite
def moment(draw: st.DrawFn) -> tuple[float, bool]:
    """What happens between two versions: how far the wall clock moves (a new refresh
    window now and then) and whether the signing is read again, making a new signer that
    carries the last one (``SigningFollower``)."""
    step = draw(st.sampled_from([0.0, 0.0, 7.0, float(REFRESH)]))
    return step, draw(st.integers(0, 3)) == 0


def serve_patches(  # noqa: PLR0917 - what is served, how it changes, what is asked
    rows: list[RecordRow],
    patches: list[tuple[str, list[str], list[RecordRow]]],
    moments: list[tuple[float, bool]],
    signing: dict[str, Nsec3Params | None],
    questions: list[tuple[str, str, bool]],
    zone_key: dnssec.ZoneKey,
) -> None:
    """Serve ``rows``, answer every question (filling the signer's and the snapshot's
    caches), then for each patch: patch, swap, and check every answer is a fresh one."""
    served = build(rows)
    if isinstance(served, ZoneError):
        return  # nothing served, nothing to patch
    clock = Wall()
    holder = IndexHolder(served, signer(signing, list(served.zones), clock, zone_key))
    answers(holder.snapshot, questions)
    for (zone, owners, new_rows), (step, remade) in zip(patches, moments, strict=False):
        replaced = {key(owner) for owner in owners}
        changed = [row for row in rows
                   if row.zone != zone or key(row.owner) not in replaced] + new_rows
        expected = build(changed)
        if isinstance(expected, ZoneError):
            with pytest.raises(ZoneError):
                served.with_owners_replaced(zone, owners, new_rows)
            continue  # the source keeps serving the last good version
        served, rows = served.with_owners_replaced(zone, owners, new_rows), changed
        holder.swap(served)  # as the zone source does; the signer stays
        clock.now += step
        if remade:
            holder.sign_with(
                signer(signing, list(served.zones), clock, zone_key, carry=holder.signer))
        assert_answers_fresh(holder, rows, signing, clock, questions, zone_key)


SIGNED_QNAMES = [*NAMES, f"q.b.a.{Z}", f"q.x.d.{Z}", f"nope.{Z}", f"q.q.{Z}", f"q.a.{Z}"]
"""The zone's names, names beneath a cut and a DNAME, and names only wildcards match (or
nothing, as the patches have it)."""
SIGNED_QUESTIONS = [
    *((name, rtype, True) for name in SIGNED_QNAMES
      for rtype in ("A", "TXT", "DS", "NS", "RRSIG", "NSEC")),
    *((name, rtype, False) for name in SIGNED_QNAMES for rtype in ("A", "NS")),
    (Z, "DNSKEY", True), (Z, "DNSKEY", False), (Z, "NSEC3PARAM", False), (Z, "SOA", True),
    (Z, "MX", True), (f"a.{Z}", "MX", True),
]


@pytest.mark.parametrize("algorithm", sorted(KEYS))
@settings(max_examples=scaled(0.3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(records_at(NAMES), st.lists(patch(), min_size=1, max_size=3),
       st.lists(moment(), min_size=3, max_size=3), DENIALS)
def test_signed_answers_after_patches_equal_a_signer_made_from_scratch(
    algorithm: int, extra: list[RecordRow], patches: list[tuple[list[str], list[RecordRow]]],
    moments: list[tuple[float, bool]], denial: Nsec3Params | None,
) -> None:
    serve_patches(BASE + extra, [(Z, owners, rows) for owners, rows in patches], moments,
                  {Z: denial}, SIGNED_QUESTIONS, KEYS[algorithm])


PARENT, CHILD_ZONE, BESIDE = "example.com.", "sub.example.com.", "example.net."
SERVED = (PARENT, CHILD_ZONE, BESIDE)
CROSS_NAMES = {
    zone: [f"{rel}.{zone}" if rel else zone for rel in ("", "a", "b", "*", "x.a", "*.a")]
    for zone in SERVED
}
"""Each served zone's owners: the apex, hosts, wildcards (``sub`` is the parent's cut)."""
CROSS_BASE = [
    row
    for zone in SERVED
    for row in (
        RecordRow(zone, zone, "SOA", 3600, f"ns.{zone} h.{zone} 1 7200 3600 1209600 60"),
        RecordRow(zone, zone, "NS", 3600, f"ns.{zone}"),
        RecordRow(zone, f"ns.{zone}", "A", 3600, "192.0.2.53"),
    )
] + [
    RecordRow(PARENT, CHILD_ZONE, "NS", 3600, f"ns.{CHILD_ZONE}"),
    RecordRow(PARENT, f"ns.{CHILD_ZONE}", "A", 3600, "192.0.2.53"),
]
TARGETS = st.sampled_from([
    *(name for names in CROSS_NAMES.values() for name in names if "*" not in name),
    f"q.{BESIDE}", f"q.a.{CHILD_ZONE}", f"nope.{CHILD_ZONE}", "elsewhere.test.",
])
"""Where a CNAME, MX, SRV or NS points: names in every served zone, names only a wildcard
there matches, names nothing matches, and a name served nowhere here."""
CROSS_RDATA = {
    "A": st.sampled_from(["192.0.2.1", "198.51.100.7"]),
    "TXT": st.sampled_from(['"one"', '"two"']),
    "CNAME": TARGETS,
    "DNAME": st.sampled_from([BESIDE, CHILD_ZONE, f"a.{BESIDE}", "elsewhere.test."]),
    "MX": TARGETS.map(lambda target: f"10 {target}"),
    "SRV": TARGETS.map(lambda target: f"0 1 53 {target}"),
    "NS": TARGETS,
    "DS": st.just("12345 15 2 " + "ab" * 32),
}
CROSS_TYPES = ["A"] * 4 + ["TXT", "CNAME", "CNAME", "CNAME", "DNAME", "MX", "SRV", "NS", "DS"]


@st.composite
def cross_records(draw: st.DrawFn, zone: str | None = None,
                  owners: list[str] | None = None) -> list[RecordRow]:
    """Records in the served zones (or at ``owners`` of ``zone``)."""
    rows = []
    for _ in range(draw(st.integers(0, 10 if zone is None else 4))):
        at = zone or draw(st.sampled_from(SERVED))
        owner = draw(st.sampled_from(owners or CROSS_NAMES[at]))
        rtype = draw(st.sampled_from(CROSS_TYPES))
        if owner == at and rtype in ("NS", "DS"):
            continue  # the apex keeps its NS; a DS there is the parent's
        rows.append(RecordRow(at, owner, rtype, 300, draw(CROSS_RDATA[rtype])))
    return rows


@st.composite
def cross_patch(draw: st.DrawFn) -> tuple[str, list[str], list[RecordRow]]:
    """One zone, some of its owners and every record they hold afterwards."""
    zone = draw(st.sampled_from(SERVED))
    owners = draw(st.lists(st.sampled_from(CROSS_NAMES[zone]), min_size=1, max_size=3,
                           unique=True))
    rows = draw(cross_records(zone, owners))
    if zone in owners and draw(st.integers(0, 9)):
        rows += [row for row in CROSS_BASE if row.zone == zone and row.owner == zone]
    return zone, owners, rows


SIGNED_OR_NOT = st.sampled_from([True, True, False])
"""Whether a served zone is signed: mostly, so chains cross from signed zones into
signed and unsigned ones."""
CROSS_QUESTIONS = [
    (name, rtype, do)
    for zone in SERVED
    for name in [*CROSS_NAMES[zone], f"q.{zone}", f"q.a.{zone}", f"q.b.{zone}"]
    for rtype in ("A", "CNAME", "MX", "SRV", "DS", "NS")
    for do in (True, False)
]


@pytest.mark.parametrize("algorithm", sorted(KEYS))
@settings(max_examples=scaled(0.3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cross_records(), st.lists(cross_patch(), min_size=1, max_size=3),
       st.lists(moment(), min_size=3, max_size=3),
       st.fixed_dictionaries({zone: st.tuples(SIGNED_OR_NOT, DENIALS) for zone in SERVED}))
def test_a_patch_of_one_zone_leaves_every_zones_answers_fresh(
    algorithm: int, extra: list[RecordRow], patches: list[tuple[str, list[str], list[RecordRow]]],
    moments: list[tuple[float, bool]],
    denials: dict[str, tuple[bool, Nsec3Params | None]],
) -> None:
    signing = {zone: denial for zone, (signed, denial) in denials.items() if signed}
    serve_patches(make_valid(CROSS_BASE + extra), patches, moments, signing, CROSS_QUESTIONS,
                  KEYS[algorithm])



def test_changed_from_names_exactly_the_zones_a_patch_replaced() -> None:
    rows = [
        *BASE,
        RecordRow(CHILD, CHILD, "SOA", 300, f"ns.{CHILD} h.{CHILD} 1 1 1 1 1"),
        RecordRow(CHILD, CHILD, "NS", 300, f"ns.{CHILD}"),
    ]
    first = ZoneIndex.from_records(rows)
    new_www = RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.77")
    patched = first.with_owners_replaced(Z, [f"www.{Z}"], [new_www])
    assert patched.changed_from(first) == {key(Z)}
    assert first.changed_from(patched) == {key(Z)}
    assert patched.changed_from(patched) == frozenset()
    only_child = ZoneIndex.from_records(rows[len(BASE):])
    assert only_child.changed_from(first) == {key(Z), key(CHILD)}  # Z dropped, CHILD rebuilt


def test_with_zone_adds_or_replaces_one_zone_and_the_index_follows_it() -> None:
    parent = ZoneIndex.from_records(BASE)
    child_rows = [
        RecordRow(CHILD, CHILD, "SOA", 300, f"ns.{CHILD} h.{CHILD} 1 1 1 1 1"),
        RecordRow(CHILD, CHILD, "NS", 300, f"ns.{CHILD}"),
    ]
    child = ZoneIndex.from_records(child_rows).zone_for(key(CHILD))
    assert child is not None
    both = parent.with_zone(child)
    assert both.zones == (Z, CHILD)
    assert parent.zones == (Z,)  # the index it was made from is as it was
    assert both.record_count == parent.record_count + child.record_count
    assert both.parent_of(child) is parent.zone_for(key(Z))
    assert both.changed_from(parent) == {key(CHILD)}
    assert both.with_zone(child) is both
    www = RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.8")
    later = both.with_owners_replaced(Z, [f"www.{Z}"], [www])
    assert later.parent_of(child) is later.zone_for(key(Z))  # the parent's new version
    assert later.parent_of(child) is not both.parent_of(child)
    assert later.changed_from(both) == {key(Z)}
    assert later.changed_from(parent) == {key(Z), key(CHILD)}
    assert_same(later, ZoneIndex.from_records([*BASE, www, *child_rows]))


def test_changed_from_across_many_versions_of_many_zones() -> None:
    """Indexes of many zones (a zone table of many shards) a few steps apart: each
    names exactly the zones replaced between the two, either way round."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(owners_module, "SHARD_OWNERS", 2)
        names = [f"z{i}.{Z}" for i in range(40)]
        rows = [
            row for name in names for row in (
                RecordRow(name, name, "SOA", 300, f"ns.{name} h.{name} 1 1 1 1 1"),
                RecordRow(name, name, "NS", 300, f"ns.{name}"),
            )
        ]
        versions = [ZoneIndex.from_records(rows)]
        replaced: list[set[bytes]] = []
        for step, name in enumerate([names[3], names[17], names[3], names[39]]):
            www = RecordRow(name, f"www.{name}", "A", 300, f"192.0.2.{step}")
            versions.append(versions[-1].with_owners_replaced(name, [f"www.{name}"], [www]))
            replaced.append({key(name)})
        for i, older in enumerate(versions):
            for j in range(i, len(versions)):
                expected = set().union(*replaced[i:j])
                assert versions[j].changed_from(older) == expected
                assert older.changed_from(versions[j]) == expected


@pytest.mark.parametrize("algorithm", sorted(KEYS))
def test_signed_and_cross_zone_answers_stay_fresh_in_many_shards(algorithm: int) -> None:
    """The signed and cross-zone properties below, in tables of one owner a shard."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(owners_module, "SHARD_OWNERS", 1)
        test_signed_answers_after_patches_equal_a_signer_made_from_scratch(algorithm=algorithm)
        test_a_patch_of_one_zone_leaves_every_zones_answers_fresh(algorithm=algorithm)
