"""The signature cache (``valis_core.dns.dnssec.signature_cache``) as the resident uses it: a
signer built because one zone's signing changed keeps every other zone's signatures (and
the counts, and the very ``SignedZone`` the last signer had, by which a cache of signed
answers knows the zone is signed as before), a zone whose key changed loses its own, a
key sharing another's key tag is never served the other's signatures; a second signed
transfer of an unchanged NSEC3 zone signs nothing, a changed one signs only what the
change touched, and a transfer never pushes the answer path's signatures out."""

from __future__ import annotations

from pathlib import Path

import dns.dnssec
import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from tests.dns_ask import ask
from tests.property.dnssec_check import validate_sections
from tests.property.signed_example import INDEX, NOW, OTHER, Z
from valis_core.dns import dnssec, wire
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.dnssec import ZoneKey, rollover, signature_cache
from valis_core.dns.dnssec.nsec3 import Nsec3Params
from valis_core.dns.dnssec.rollover import Timing
from valis_core.dns.dnssec.zone_keys import file_zone
from valis_core.dns.transfer.signed import signed_zone_records
from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex
from valis_core.operator_state.zone_signing import ZoneSigning
from valis_core.resident.signing import SigningFollower

A, B = wire.from_text(Z), wire.from_text(OTHER)
A_KEY, B_OLD, B_NEW = (ZoneKey(dnssec.generate_key(13)) for _ in range(3))
while len({A_KEY.tag, B_OLD.tag, B_NEW.tag}) < 3:  # pragma: no cover - a 16-bit tag twice
    B_NEW = ZoneKey(dnssec.generate_key(13))
A_NAMES = [(f"www.{Z}", "A"), (f"mail.{Z}", "A"), (Z, "MX"), (f"nope.{Z}", "A"),
           (f"x.wild.{Z}", "TXT"), (f"secure.{Z}", "DS")]
B_NAMES = [(f"www.{OTHER}", "A"), (OTHER, "SOA")]


def dnskeys(apex: bytes, *keys: ZoneKey) -> dict[dns.name.Name, dns.rrset.RRset]:
    name = dns.name.from_wire(apex, 0)[0]
    texts = [dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.DNSKEY, key.dnskey, 0,
                                 len(key.dnskey)).to_text() for key in keys]
    return {name: dns.rrset.from_text_list(name, 3600, "IN", "DNSKEY", texts)}


def rows(b_step: str | None, a_tag: int = A_KEY.tag) -> dict[str, ZoneSigning]:
    roll = None if b_step is None else rollover.Rollover(
        B_OLD.tag, B_NEW.tag, b_step, NOW - 5, Timing(dnskey_ttl=60))
    return {Z: ZoneSigning(Z, 13, a_tag, Timing(dnskey_ttl=60)),
            OTHER: ZoneSigning(OTHER, 13, B_OLD.tag, Timing(dnskey_ttl=60), roll)}


def sections(message: dns.message.Message) -> list[list[dns.rrset.RRset]]:
    return [message.answer, message.authority, message.additional]


def answers(holder: IndexHolder, names: list[tuple[str, str]]) -> list[dns.message.Message]:
    return [ask(holder.snapshot, name, rtype, do=True) for name, rtype in names]


def test_a_rollover_step_of_one_zone_leaves_the_others_signatures_and_counts(
    tmp_path: Path,
) -> None:
    ring = {file_zone(Z): {A_KEY.tag: A_KEY},
            file_zone(OTHER): {B_OLD.tag: B_OLD, B_NEW.tag: B_NEW}}
    follower = SigningFollower("", tmp_path, [Z, OTHER], clock=lambda: NOW)
    holder = IndexHolder(INDEX)
    follower._apply(holder, rows(None), ring)
    first = holder.signer
    assert first is not None
    before = [sections(message) for message in answers(holder, A_NAMES)]
    answers(holder, B_NAMES)
    made, cached = dict(first.cache.made), first.cached_by_zone()
    assert made[A] > 0
    assert made[B] > 0

    last = first
    for step in (rollover.DS_SUBMIT, rollover.PUBLISHED, rollover.SWITCHED):
        follower._apply(holder, rows(step), ring)
        signer = holder.signer
        assert signer is not None
        assert signer is not first
        assert signer.zones[A] is first.zones[A]  # signed as before
        assert signer.zones[B] is not last.zones[B]  # the step changed B's keys
        last = signer
        hits = signer.cache.hits.get(A, 0)
        # the very signatures made before (P-256 signs with a random nonce)
        assert [sections(message) for message in answers(holder, A_NAMES)] == before
        assert signer.cache.made[A] == made[A]
        assert signer.cache.hits[A] > hits
        assert signer.cached_by_zone()[A] == cached[A]
        for message in answers(holder, B_NAMES):
            validate_sections(message, dnskeys(B, B_OLD, B_NEW), now=NOW)
    assert signer is not None
    assert signer.made >= sum(made.values())  # the node's counts go on


def test_a_zone_whose_key_changed_loses_its_signatures_and_signs_anew(
    tmp_path: Path,
) -> None:
    a_new = ZoneKey(dnssec.generate_key(15))
    ring = {file_zone(Z): {A_KEY.tag: A_KEY, a_new.tag: a_new},
            file_zone(OTHER): {B_OLD.tag: B_OLD}}
    follower = SigningFollower("", tmp_path, [Z, OTHER], clock=lambda: NOW)
    holder = IndexHolder(INDEX)
    follower._apply(holder, rows(None), ring)
    first = holder.signer
    assert first is not None
    answers(holder, A_NAMES + B_NAMES)
    b_cached = first.cached_by_zone()[B]

    changed = rows(None, a_new.tag)
    changed[Z] = ZoneSigning(Z, 15, a_new.tag, Timing(dnskey_ttl=60))
    follower._apply(holder, changed, ring)
    signer = holder.signer
    assert signer is not None
    assert signer.cached_by_zone().get(A, 0) == 0
    assert signer.cached_by_zone()[B] == b_cached
    assert signer.zones[A] is not first.zones[A]
    assert signer.zones[B] is first.zones[B]
    made = signer.cache.made[A]
    for message in answers(holder, A_NAMES):
        validate_sections(message, dnskeys(A, a_new), now=NOW)
    assert signer.cache.made[A] > made


def test_a_key_sharing_another_keys_tag_is_never_served_its_signatures() -> None:
    first = ZoneKey(dnssec.generate_key(15))
    seen = {first.tag: first}
    second = None
    for _ in range(20_000):  # a 16-bit tag repeats within a few hundred keys
        candidate = ZoneKey(dnssec.generate_key(15))
        if candidate.tag in seen:
            first, second = seen[candidate.tag], candidate
            break
        seen[candidate.tag] = candidate
    assert second is not None
    assert second.dnskey != first.dnskey
    old = Signer({A: first}, clock=lambda: NOW)
    ask(Snapshot(INDEX, signer=old), f"www.{Z}", "A", do=True)
    new = Signer({A: second}, clock=lambda: NOW, carry=old)
    message = ask(Snapshot(INDEX, signer=new), f"www.{Z}", "A", do=True)
    assert validate_sections(message, dnskeys(A, second), now=NOW) >= 1


# --- signed transfers ------------------------------------------------------------------

N = "nsec3.test."
N_APEX = wire.from_text(N)


def nsec3_rows(count: int) -> list[RecordRow]:
    found = [
        RecordRow(N, N, "SOA", 3600, f"ns1.{N} hostmaster.{N} 1 7200 3600 1209600 300"),
        RecordRow(N, N, "NS", 3600, f"ns1.{N}"),
        RecordRow(N, f"ns1.{N}", "A", 3600, "192.0.2.1"),
        RecordRow(N, f"sub.{N}", "NS", 3600, f"ns.sub.{N}"),
        RecordRow(N, f"ns.sub.{N}", "A", 3600, "192.0.2.2"),
        RecordRow(N, f"x.ent.{N}", "A", 300, "192.0.2.3"),
    ]
    return found + [RecordRow(N, f"host{i}.{N}", "A", 300, f"198.51.100.{i % 250}")
                    for i in range(count)]


def transferred(zone_index: ZoneIndex, signer: Signer) -> list[tuple[bytes, int, int, bytes]]:
    (zone,) = zone_index.served()
    return list(signed_zone_records(zone, signer, signer.window()))


def test_a_second_transfer_of_an_unchanged_zone_signs_nothing() -> None:
    index = ZoneIndex.from_records(nsec3_rows(40))
    key = ZoneKey(dnssec.generate_key(15))
    signer = Signer({N_APEX: key}, clock=lambda: NOW, nsec3={N_APEX: Nsec3Params()})
    first = transferred(index, signer)
    made = signer.made
    assert made > 80
    assert transferred(index, signer) == first
    assert signer.made == made
    assert signer.hits >= made
    rebuilt = Signer({N_APEX: key}, clock=lambda: NOW, nsec3={N_APEX: Nsec3Params()},
                     carry=signer)  # as when another zone's signing changes
    assert transferred(index, rebuilt) == first
    assert rebuilt.made == made
    assert rebuilt.zones[N_APEX] is signer.zones[N_APEX]
    compact = Signer({N_APEX: key}, clock=lambda: NOW, carry=rebuilt)
    assert compact.cached_by_zone().get(N_APEX, 0) == 0  # no chain: nothing to transfer
    assert compact.zones[N_APEX] is not rebuilt.zones[N_APEX]  # it denies otherwise now


def test_a_changed_zone_transfers_as_signed_afresh_signing_only_what_changed() -> None:
    index = ZoneIndex.from_records(nsec3_rows(40))
    key = ZoneKey(dnssec.generate_key(15))  # Ed25519 signs deterministically
    signer = Signer({N_APEX: key}, clock=lambda: NOW, nsec3={N_APEX: Nsec3Params()})
    transferred(index, signer)
    made = signer.made
    changed = index.with_owners_replaced(
        N, [f"host3.{N}", f"new.{N}"], [RecordRow(N, f"new.{N}", "A", 300, "192.0.2.9")])
    sent = transferred(changed, signer)
    fresh = Signer({N_APEX: key}, clock=lambda: NOW, nsec3={N_APEX: Nsec3Params()})
    assert sent == transferred(changed, fresh)
    assert 0 < signer.made - made <= 6  # the new owner, and the NSEC3 records about it


def test_a_transfer_leaves_the_answer_paths_signatures_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(signature_cache, "SIGNATURE_ENTRIES", 10)
    index = ZoneIndex.from_records(nsec3_rows(40))
    key = ZoneKey(dnssec.generate_key(13))
    signer = Signer({N_APEX: key}, clock=lambda: NOW, nsec3={N_APEX: Nsec3Params()})
    hot = ask(Snapshot(index, signer=signer), f"host7.{N}", "A", do=True)
    made = signer.made
    assert len(transferred(index, signer)) > 150  # far more signatures than the cache holds
    assert signer.made > made
    made = signer.made
    again = ask(Snapshot(index, signer=signer), f"host7.{N}", "A", do=True)
    assert sections(again) == sections(hot)  # P-256: the same signature, not a new one
    assert signer.made == made


@pytest.mark.parametrize("denial", [Nsec3Params(), None])
def test_a_change_of_one_owner_re_signs_only_what_it_touched(denial: Nsec3Params | None) -> None:
    """Every question asked again after an owner is added, then another removed (a new
    snapshot each time, the signer kept): the only signatures made are over the new
    owner's RRset and the NSEC3 records whose next hash the change moved or that it
    added (compact denial: only the RRset)."""
    index = ZoneIndex.from_records(nsec3_rows(40))
    key = ZoneKey(dnssec.generate_key(13))
    holder = IndexHolder(index, Signer({N_APEX: key}, clock=lambda: NOW,
                                       nsec3={} if denial is None else {N_APEX: denial}))
    signer = holder.signer
    assert signer is not None
    names = [(f"host{i}.{N}", "A") for i in range(40)] + [(f"nx{i}.{N}", "A")
                                                          for i in range(60)]
    answers(holder, names)
    for owners, new, most in (
        ([f"new.{N}"], [RecordRow(N, f"new.{N}", "A", 300, "192.0.2.9")], 3),
        ([f"host3.{N}"], [], 1),
    ):
        index = index.with_owners_replaced(N, owners, new)
        holder.swap(index)
        made = signer.made
        answers(holder, [*names, (f"new.{N}", "A")])
        assert signer.made - made <= (most if denial is not None else 1)


def test_the_transfer_stores_keep_at_most_their_bound_dropping_the_zone_used_longest_ago(
) -> None:
    """Three NSEC3 zones transferred in turn under a bound two of them fit in: as each
    transfer ends the store of the zone transferred longest ago is dropped (LRU by
    zone), counted, and a zone dropped signs anew at its next transfer; a bound below
    one zone's size keeps nothing."""
    origins = [f"z{i}.test." for i in range(3)]
    rows = [RecordRow(origin, row.owner.replace(N, origin), row.rtype, row.ttl,
                      row.rdata.replace(N, origin))
            for origin in origins for row in nsec3_rows(30)]
    index = ZoneIndex.from_records(rows)
    apexes = [wire.from_text(origin) for origin in origins]
    signer = Signer({apex: ZoneKey(dnssec.generate_key(15)) for apex in apexes},
                    clock=lambda: NOW, nsec3={apex: Nsec3Params() for apex in apexes})
    zones = {zone.apex: zone for zone in index.served()}
    cache = signer.cache

    def send(apex: bytes) -> int:
        """Transfer ``apex``; the signatures it made."""
        made = signer.made
        list(signed_zone_records(zones[apex], signer, signer.window()))
        return signer.made - made

    sizes = [send(apex) for apex in apexes]
    assert min(sizes) > 60
    assert cache.transfer_zones() == tuple(apexes)  # within the default bound
    assert cache.transfer_evictions == 0
    a, b, c = apexes
    cache.transfer_limit = sum(sizes) - 1  # two zones fit, not three
    assert send(b) == 0  # kept: signs nothing, and is now the most recent
    assert cache.transfer_zones() == (c, b)  # a, used longest ago, dropped
    assert cache.transfer_evictions == 1
    assert cache.transfer_signatures() <= cache.transfer_limit
    assert send(c) == 0  # kept
    assert cache.transfer_zones() == (b, c)
    assert cache.transfer_evictions == 1
    assert send(a) == sizes[0]  # dropped before: signed anew; b is the oldest now
    assert cache.transfer_zones() == (c, a)
    assert cache.transfer_evictions == 2
    cache.transfer_limit = 1  # below one zone's size: nothing is kept
    assert send(c) == 0
    assert cache.transfer_zones() == ()
    assert (cache.transfer_evictions, cache.transfer_signatures()) == (4, 0)
