"""RFC 2136 UPDATE, decided: a request and the zone's current records in, the rcode and
the row changes out. No sockets, no database; the terminus does the IO around it.

The steps and their order are the RFC's:

1. zone section (§3.1): the zone must be one this node serves, in class IN, named by its
   apex — otherwise NOTAUTH (``target_zone``, before anything is read);
2. prerequisites (§3.2): each is checked against the zone as it stands; FORMERR for a
   malformed one, NOTZONE for a name outside the zone, and YXDOMAIN, YXRRSET, NXDOMAIN
   or NXRRSET for one that does not hold;
3. prescan (§3.4.1): every update RR is checked before anything is applied (FORMERR for
   a bad class, type, TTL or rdata; NOTZONE outside the zone);
4. apply (§3.4.2), RR by RR in order: add to an RRset (a duplicate RR replaces the zone's
   one); delete an RRset; delete every RRset of a name; delete one RR. At the apex the SOA
   and NS RRsets are never deleted whole, the SOA is never deleted and the last NS is
   never deleted — those update RRs are ignored, as the RFC says. An SOA replaces the
   zone's only when its serial is higher (RFC 1982); an SOA anywhere but the apex is
   ignored. A CNAME is ignored at a name holding other data, other data is ignored at a
   name holding a CNAME, and a CNAME replaces a CNAME.
5. serial (§3.6): when the zone changed and the update did not replace the SOA, the
   serial goes up by the zone's serial policy (``dns.serial.raised_serial``): by one in
   RFC 1982 arithmetic (0 is skipped, as BIND does) unless the policy is ``unixtime`` or
   ``dateserial``.

Two choices the RFC leaves open: adding an RR to an RRset with another TTL gives the
whole RRset the new TTL (RFC 2181 §5.2 wants one TTL per RRset; BIND does the same), and
the result must be servable: ``check`` (the zone index's own validation of the changed
owners, ``ZoneIndex.with_owners_replaced``) refuses, for example, data beneath a DNAME or
a second DNAME, and then the answer is REFUSED with nothing written.

A name "is in use" (§2.4.4) when it owns at least one RR; an empty non-terminal does not
count. RRs are compared by type and rdata in canonical form (names in rdata compared
without regard to case); TTLs never take part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs
import dns.exception
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.SOA
from dns.rcode import Rcode

from valis_core.dns import wire
from valis_core.dns.wire.records import ANY as ANY_TYPE
from valis_core.dns.wire.records import CLASS_ANY as ANY
from valis_core.dns.wire.records import CLASS_NONE as NONE
from valis_core.dns.wire.records import (
    CNAME,
    IN,
    MAX_TTL,
    NS,
    NSEC,
    RRSIG,
    SOA,
    RecordRow,
    ZoneError,
    rdata_bytes,
)
from valis_core.dns.zone.serial import raised_serial, serial_gt

_BESIDE_CNAME = frozenset({CNAME, RRSIG, NSEC})
_NEVER_DELETED = (SOA, NS)


@attrs.frozen
class UpdateRR:
    """One RR of a prerequisite or update section, as it came on the wire.

    ``name`` is absolute presentation text, ``rclass`` the RR's class as sent (IN, ANY or
    NONE mean what RFC 2136 says), ``rdata`` its rdata in uncompressed wire form, or
    ``None`` when the RR carried none (RDLENGTH 0 under class ANY or NONE).
    """

    name: str
    rclass: int
    rtype: int
    ttl: int
    rdata: bytes | None = None


@attrs.frozen
class UpdateRequest:
    """An UPDATE message's zone section and its prerequisite and update sections."""

    zone: str
    zone_class: int = IN
    prerequisites: tuple[UpdateRR, ...] = ()
    updates: tuple[UpdateRR, ...] = ()


@attrs.frozen
class UpdateOutcome:
    """The rcode to answer with and the row changes to make (none unless NOERROR).

    ``serial`` is the zone's SOA serial after the change, when anything changed.
    """

    rcode: Rcode
    reason: str = ""
    deletes: tuple[RecordRow, ...] = ()
    adds: tuple[RecordRow, ...] = ()
    serial: int | None = None

    @property
    def changed(self) -> bool:
        return bool(self.deletes or self.adds)


Check = Callable[[tuple[str, ...], tuple[RecordRow, ...]], None]
"""Raises ``ZoneError`` unless the zone with these owners holding exactly these rows
can be served."""


def _refuse(rcode: Rcode, reason: str) -> UpdateOutcome:
    return UpdateOutcome(rcode=rcode, reason=reason)


def _name_key(text: str) -> bytes:
    """The lowercased wire form of an absolute name (``wire.BadName`` if it is not one)."""
    return wire.from_text(text).lower()


def _zone_key(zone: str) -> bytes:
    """A served zone's key; ``VALIS_SERVED_ZONES`` may leave off the trailing dot."""
    return _name_key(zone if zone.endswith(".") else zone + ".")


def target_zone(request: UpdateRequest, served: Iterable[str]) -> str | UpdateOutcome:
    """The served zone ``request`` updates (lowercase, trailing dot), or its refusal."""
    if request.zone_class != IN:
        shown = dns.rdataclass.to_text(dns.rdataclass.RdataClass.make(request.zone_class))
        return _refuse(Rcode.NOTAUTH, f"zone class {shown}; this node serves class IN only")
    try:
        apex = _name_key(request.zone)
    except wire.BadName as exc:
        return _refuse(Rcode.FORMERR, f"bad zone name: {exc}")
    if apex not in {_zone_key(zone) for zone in served}:
        return _refuse(Rcode.NOTAUTH, f"zone {request.zone} is not served by this node")
    return wire.to_text(apex)


def owners_to_read(request: UpdateRequest, zone: str) -> tuple[str, ...]:
    """The owners whose rows ``apply_update`` needs: the apex and every well-formed name
    at or below it that the request mentions, as lowercased text (ASCII lowercasing)."""
    apex = _name_key(zone)
    found = {apex: None}
    for rr in (*request.prerequisites, *request.updates):
        try:
            owner = _name_key(rr.name)
        except wire.BadName:
            continue
        if wire.is_at_or_below(owner, apex):
            found[owner] = None
    return tuple(wire.to_text(owner) for owner in found)


class _Refusal(Exception):
    def __init__(self, rcode: Rcode, reason: str) -> None:
        super().__init__(reason)
        self.outcome = _refuse(rcode, reason)


def _rdata_key_from_text(rtype: int, text: str) -> bytes:
    try:
        return rdata_bytes(_parse_text(rtype, text), canonical=True)
    except (dns.exception.DNSException, ValueError, UnicodeError):
        return b"\xff" + text.encode("utf-8", "surrogateescape")


def _parse_text(rtype: int, text: str) -> dns.rdata.Rdata:
    kind = dns.rdatatype.RdataType.make(rtype)
    return dns.rdata.from_text(dns.rdataclass.IN, kind, text, origin=None)


def _parse_wire(rtype: int, data: bytes) -> dns.rdata.Rdata:
    kind = dns.rdatatype.RdataType.make(rtype)
    return dns.rdata.from_wire(dns.rdataclass.IN, kind, data, 0, len(data))


def _is_meta(rtype: int) -> bool:
    return rtype == 0 or dns.rdatatype.is_metatype(dns.rdatatype.RdataType.make(rtype))


def _type_text(rtype: int) -> str:
    return dns.rdatatype.to_text(dns.rdatatype.RdataType.make(rtype))


@attrs.define
class _Zone:
    """The touched part of the zone while an update is applied: rows by owner and type,
    each keyed by its rdata in canonical form."""

    zone: str
    apex: bytes
    excluded: tuple[bytes, ...]
    sets: dict[bytes, dict[int, dict[bytes, RecordRow]]] = attrs.field(factory=dict)
    spelled: dict[tuple[bytes, int, bytes], tuple[RecordRow, list[RecordRow]]] = attrs.field(
        factory=dict)
    """Rows that spell a record another row of ``sets`` holds (``2001:0db8::53`` beside
    ``2001:db8::53``; the zone serves it once), by the record, with that row."""

    def load(self, rows: Iterable[RecordRow]) -> None:
        for row in rows:
            try:
                owner = _name_key(row.owner)
                rtype = int(dns.rdatatype.from_text(row.rtype))
            except (wire.BadName, dns.exception.DNSException, ValueError):
                continue  # not a row the zone index could ever have served
            held = self.sets.setdefault(owner, {}).setdefault(rtype, {})
            key = _rdata_key_from_text(rtype, row.rdata)
            first = held.setdefault(key, row)
            if first is not row:
                self.spelled.setdefault((owner, rtype, key), (first, []))[1].append(row)

    def spellings_gone(self) -> list[RecordRow]:
        """The rows spelling a record the update deleted or replaced (a new TTL): they go
        with it, or the zone would still serve it, or serve it with the TTL it had."""
        return [row for (owner, rtype, key), (first, rows) in self.spelled.items()
                if self.rrset(owner, rtype).get(key) is not first for row in rows]

    def rows(self) -> list[RecordRow]:
        return [row for by_type in self.sets.values() for held in by_type.values()
                for row in held.values()]

    def rrset(self, owner: bytes, rtype: int) -> dict[bytes, RecordRow]:
        return self.sets.get(owner, {}).get(rtype, {})

    def in_use(self, owner: bytes) -> bool:
        return any(self.sets.get(owner, {}).values())

    def types(self, owner: bytes) -> list[int]:
        return [rtype for rtype, held in self.sets.get(owner, {}).items() if held]

    def owner_of(self, rr: UpdateRR) -> bytes:
        try:
            owner = _name_key(rr.name)
        except wire.BadName as exc:
            raise _Refusal(Rcode.FORMERR, f"bad owner name: {exc}") from None
        if not wire.is_at_or_below(owner, self.apex) or any(
            wire.is_at_or_below(owner, child) for child in self.excluded
        ):
            raise _Refusal(Rcode.NOTZONE, f"{rr.name} is not in zone {self.zone}")
        return owner

    def put(self, owner: bytes, rtype: int, held: dict[bytes, RecordRow]) -> None:
        by_type = self.sets.setdefault(owner, {})
        if held:
            by_type[rtype] = held
        else:
            by_type.pop(rtype, None)


def _wire_key(rr: UpdateRR) -> bytes:
    try:
        return _parse_wire(rr.rtype, rr.rdata or b"").to_digestable()
    except (dns.exception.DNSException, ValueError, UnicodeError) as exc:
        raise _Refusal(
            Rcode.FORMERR, f"{rr.name} {_type_text(rr.rtype)}: rdata does not parse ({exc})"
        ) from None


def _check_prerequisites(state: _Zone, prerequisites: Sequence[UpdateRR]) -> None:
    """RFC 2136 §3.2.5."""
    wanted: dict[tuple[bytes, int], set[bytes]] = {}
    for rr in prerequisites:
        shown = f"prerequisite {rr.name} {_type_text(rr.rtype)}"
        if rr.ttl != 0:
            raise _Refusal(Rcode.FORMERR, f"{shown}: TTL must be 0")
        owner = state.owner_of(rr)
        if rr.rclass in (ANY, NONE):
            if rr.rdata:
                raise _Refusal(Rcode.FORMERR, f"{shown}: class ANY/NONE carries no rdata")
            present = state.in_use(owner) if rr.rtype == ANY_TYPE else bool(
                state.rrset(owner, rr.rtype)
            )
            if rr.rclass == ANY and not present:
                rcode = Rcode.NXDOMAIN if rr.rtype == ANY_TYPE else Rcode.NXRRSET
                raise _Refusal(rcode, f"{shown}: required to exist, but does not")
            if rr.rclass == NONE and present:
                rcode = Rcode.YXDOMAIN if rr.rtype == ANY_TYPE else Rcode.YXRRSET
                raise _Refusal(rcode, f"{shown}: required not to exist, but does")
        elif rr.rclass == IN:
            if _is_meta(rr.rtype):
                raise _Refusal(Rcode.FORMERR, f"{shown}: not a data type")
            wanted.setdefault((owner, rr.rtype), set()).add(_wire_key(rr))
        else:
            raise _Refusal(Rcode.FORMERR, f"{shown}: class {rr.rclass} is not IN, ANY or NONE")
    for (owner, rtype), keys in wanted.items():
        if set(state.rrset(owner, rtype)) != keys:
            raise _Refusal(
                Rcode.NXRRSET,
                f"prerequisite {wire.to_text(owner)} {_type_text(rtype)}: the RRset differs",
            )


_NEVER_UPDATED = frozenset(
    {dns.rdatatype.AXFR, dns.rdatatype.IXFR, dns.rdatatype.MAILA, dns.rdatatype.MAILB}
)


def _prescan(state: _Zone, updates: Sequence[UpdateRR]) -> list[tuple[bytes, UpdateRR, bytes]]:
    """RFC 2136 §3.4.1: every update RR checked before any is applied; each comes back
    with its owner key and its rdata key (empty when it carries none)."""
    scanned = []
    for rr in updates:
        shown = f"update {rr.name} {_type_text(rr.rtype)}"
        owner = state.owner_of(rr)
        meta = _is_meta(rr.rtype)
        key = b""
        if rr.rclass == IN:
            if meta:
                raise _Refusal(Rcode.FORMERR, f"{shown}: not a data type")
            if not 0 <= rr.ttl <= MAX_TTL:
                raise _Refusal(Rcode.FORMERR, f"{shown}: TTL outside 0..{MAX_TTL}")
            key = _wire_key(rr)
        elif rr.rclass == ANY:
            if rr.ttl != 0 or rr.rdata:
                raise _Refusal(Rcode.FORMERR, f"{shown}: a deletion has TTL 0 and no rdata")
            if rr.rtype in _NEVER_UPDATED or (meta and rr.rtype != ANY_TYPE):
                raise _Refusal(Rcode.FORMERR, f"{shown}: not a data type")
        elif rr.rclass == NONE:
            if rr.ttl != 0:
                raise _Refusal(Rcode.FORMERR, f"{shown}: a deletion has TTL 0")
            if meta:
                raise _Refusal(Rcode.FORMERR, f"{shown}: not a data type")
            key = _wire_key(rr)
        else:
            raise _Refusal(Rcode.FORMERR, f"{shown}: class {rr.rclass} is not IN, ANY or NONE")
        scanned.append((owner, rr, key))
    return scanned


def _soa_serial(row: RecordRow) -> int | None:
    try:
        rdata = _parse_text(SOA, row.rdata)
    except (dns.exception.DNSException, ValueError, UnicodeError):
        return None
    assert isinstance(rdata, dns.rdtypes.ANY.SOA.SOA)
    return int(rdata.serial)


def _add(state: _Zone, owner: bytes, rr: UpdateRR, key: bytes) -> bool:
    """RFC 2136 §3.4.2.2 for one RR; whether it replaced the SOA."""
    row = RecordRow(
        zone=state.zone,
        owner=rr.name,
        rtype=_type_text(rr.rtype),
        ttl=rr.ttl,
        rdata=_parse_wire(rr.rtype, rr.rdata or b"").to_text(),
    )
    types = state.types(owner)
    if rr.rtype == SOA:
        current = list(state.rrset(owner, SOA).values())
        if owner != state.apex or len(current) != 1:
            return False
        old, new = _soa_serial(current[0]), _soa_serial(row)
        if old is None or new is None or not serial_gt(new, old):
            return False
        state.put(owner, SOA, {key: attrs.evolve(row, owner=current[0].owner)})
        return True
    if rr.rtype == CNAME:
        if any(rtype not in _BESIDE_CNAME for rtype in types):
            return False
        state.put(owner, CNAME, {key: row})
        return False
    if CNAME in types and rr.rtype not in _BESIDE_CNAME:
        return False
    held = dict(state.rrset(owner, rr.rtype))
    if key not in held or held[key].ttl != rr.ttl:
        held[key] = row
    state.put(owner, rr.rtype, {k: attrs.evolve(r, ttl=rr.ttl) if r.ttl != rr.ttl else r
                                for k, r in held.items()})
    return False


def _delete(state: _Zone, owner: bytes, rr: UpdateRR, key: bytes) -> None:
    """RFC 2136 §3.4.2.3 and §3.4.2.4 for one RR."""
    at_apex = owner == state.apex
    if rr.rclass == ANY:
        doomed = state.types(owner) if rr.rtype == ANY_TYPE else [rr.rtype]
        for rtype in doomed:
            if not (at_apex and rtype in _NEVER_DELETED):
                state.put(owner, rtype, {})
        return
    held = dict(state.rrset(owner, rr.rtype))
    if key not in held or (at_apex and rr.rtype == SOA):
        return
    if at_apex and rr.rtype == NS and len(held) == 1:
        return
    del held[key]
    state.put(owner, rr.rtype, held)


def _bump_serial(state: _Zone, policy: str | None, now: float) -> int | None:
    held = state.rrset(state.apex, SOA)
    if len(held) != 1:
        return None
    ((key, row),) = held.items()
    rdata = _parse_text(SOA, row.rdata)
    assert isinstance(rdata, dns.rdtypes.ANY.SOA.SOA)
    serial = raised_serial(policy, int(rdata.serial), now=now)
    bumped = attrs.evolve(row, rdata=rdata.replace(serial=serial).to_text())
    state.put(state.apex, SOA, {key: bumped})
    return serial


def apply_update(
    request: UpdateRequest,
    zone: str,
    rows: Iterable[RecordRow],
    *,
    served: Iterable[str] = (),
    check: Check | None = None,
    policy: str | None = None,
    now: float = 0.0,
) -> UpdateOutcome:
    """Decide ``request`` against ``zone`` (from ``target_zone``) holding ``rows``.

    ``rows`` must be every record of the owners ``owners_to_read`` names (more rows do no
    harm). ``served`` are the node's zones: a name inside another served zone beneath
    this one is NOTZONE. ``check`` validates the changed owners' resulting rows.
    ``policy`` is the zone's serial policy and ``now`` the UNIX time it may use.
    """
    apex = _name_key(zone)
    excluded = tuple(
        key for key in (_zone_key(z) for z in served)
        if key != apex and wire.is_at_or_below(key, apex)
    )
    before = tuple(rows)
    state = _Zone(zone=zone, apex=apex, excluded=excluded)
    state.load(before)
    loaded = set(state.rows())
    try:
        _check_prerequisites(state, request.prerequisites)
        scanned = _prescan(state, request.updates)
    except _Refusal as refusal:
        return refusal.outcome
    soa_replaced = False
    for owner, rr, key in scanned:
        if rr.rclass == IN:
            soa_replaced = _add(state, owner, rr, key) or soa_replaced
        else:
            _delete(state, owner, rr, key)
    after = state.rows()
    if set(after) == loaded:
        return UpdateOutcome(rcode=Rcode.NOERROR, reason="nothing to change")
    serial = None if soa_replaced else _bump_serial(state, policy, now)
    after = state.rows()
    after_set = set(after)
    deletes = (*(row for row in before if row in loaded and row not in after_set),
               *state.spellings_gone())
    adds = tuple(row for row in after if row not in loaded)
    if serial is None:
        serial = next(
            (s for row in state.rrset(apex, SOA).values() if (s := _soa_serial(row)) is not None),
            None,
        )
    changed = {_name_key(row.owner) for row in (*deletes, *adds)}
    if check is not None:
        owners = tuple(sorted(wire.to_text(owner) for owner in changed))
        kept = tuple(row for row in after if _name_key(row.owner) in changed)
        try:
            check(owners, kept)
        except ZoneError as exc:
            return _refuse(Rcode.REFUSED, str(exc))
    return UpdateOutcome(
        rcode=Rcode.NOERROR,
        reason=f"{len(adds)} record(s) added, {len(deletes)} deleted",
        deletes=deletes,
        adds=adds,
        serial=serial,
    )
