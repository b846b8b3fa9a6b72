"""What replacing a zone's records would change, RRset by RRset, as plain values.

Two sets of rows are compared by RRset (owner, type): an RRset whose TTL or records
differ is one removed and one added. ``changed`` ignores the SOA serial, so a serial
policy can tell a real change from a re-import of the same data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from valis_core.dns.wire.records import RecordRow

RRsetKey = tuple[str, str]
RRsetValue = tuple[int, frozenset[str]]


@attrs.frozen
class ZoneDiff:
    zone: str
    removed: tuple[RecordRow, ...]
    added: tuple[RecordRow, ...]
    old_serial: int | None
    new_serial: int | None
    changed: bool
    """Whether anything but the SOA serial differs."""

    def lines(self) -> list[str]:
        """The change as an operator reads it: ``-``/``+`` records, then the serial."""
        out = [f"- {_text(row)}" for row in self.removed]
        out += [f"+ {_text(row)}" for row in self.added]
        old = "(none)" if self.old_serial is None else str(self.old_serial)
        new = "(none)" if self.new_serial is None else str(self.new_serial)
        out.append(f"serial {old} -> {new}" if old != new else f"serial {new} (unchanged)")
        if not self.changed:
            out.insert(0, f"zone {self.zone}: no records change")
        return out


def _text(row: RecordRow) -> str:
    return f"{row.owner}\t{row.ttl}\tIN\t{row.rtype}\t{row.rdata}"


def rrsets(rows: Iterable[RecordRow]) -> dict[RRsetKey, RRsetValue]:
    """Rows grouped by RRset, each with its lowest TTL (as the index serves it)."""
    ttls: dict[RRsetKey, int] = {}
    datas: dict[RRsetKey, set[str]] = {}
    for row in rows:
        key = (row.owner.lower(), row.rtype.upper())
        ttls[key] = min(row.ttl, ttls.get(key, row.ttl))
        datas.setdefault(key, set()).add(row.rdata)
    return {key: (ttls[key], frozenset(datas[key])) for key in ttls}


def soa_serial(rows: Iterable[RecordRow]) -> int | None:
    for row in rows:
        if row.rtype.upper() == "SOA":
            fields = row.rdata.split()
            return int(fields[2]) if len(fields) >= 3 and fields[2].isdigit() else None
    return None


def with_serial(row: RecordRow, serial: int) -> RecordRow:
    """An SOA row with its serial field replaced."""
    return attrs.evolve(row, rdata=_with_serial_text(row.rdata, serial))


def _serial_blind(value: RRsetValue | None) -> RRsetValue | None:
    """An SOA RRset with its serials masked."""
    if value is None:
        return None
    ttl, datas = value
    blind = set()
    for rdata in datas:
        fields = rdata.split()
        if len(fields) >= 3:
            fields[2] = "*"
        blind.add(" ".join(fields))
    return ttl, frozenset(blind)


def _key(row: RecordRow) -> RRsetKey:
    return (row.owner.lower(), row.rtype.upper())


def diff_zone(
    zone: str,
    old: Iterable[RecordRow],
    new: Iterable[RecordRow],
    *,
    serial: Callable[[bool], int] | None = None,
) -> ZoneDiff:
    """How ``new`` differs from ``old`` (the stored rows; empty for a new zone).

    ``serial``, given whether anything but the serial changed, returns the serial ``new``
    is to be stored with (an import's serial policy); the diff shows that serial. Only
    the RRsets some row of either side differs in are grouped, so re-importing a large
    zone with a few changes costs little more than comparing its rows."""
    old_rows, new_rows = tuple(old), tuple(new)
    # Written out rather than through _key: these two run once per row of a large zone.
    old_set = {(row.owner.lower(), row.rtype.upper(), row.ttl, row.rdata) for row in old_rows}
    new_set = {(row.owner.lower(), row.rtype.upper(), row.ttl, row.rdata) for row in new_rows}
    soa_key = (zone.lower(), "SOA")
    touched = {(owner, rtype) for owner, rtype, _, _ in old_set ^ new_set} | {soa_key}
    before = rrsets(row for row in old_rows if _key(row) in touched)
    after = rrsets(row for row in new_rows if _key(row) in touched)
    changed = any(
        before.get(key) != after.get(key) for key in touched if key != soa_key
    ) or _serial_blind(before.get(soa_key)) != _serial_blind(after.get(soa_key))
    new_serial = soa_serial(new_rows)
    if serial is not None and soa_key in after:
        chosen = serial(changed)
        if chosen != new_serial:
            ttl, datas = after[soa_key]
            after[soa_key] = (ttl, frozenset(_with_serial_text(d, chosen) for d in datas))
            new_serial = chosen
    removed: list[RecordRow] = []
    added: list[RecordRow] = []
    for key in sorted(touched, key=_order):
        if before.get(key) == after.get(key):
            continue
        for rows, side in ((removed, before), (added, after)):
            if key in side:
                ttl, datas = side[key]
                rows += [RecordRow(zone, key[0], key[1], ttl, rdata) for rdata in sorted(datas)]
    return ZoneDiff(
        zone=zone,
        removed=tuple(removed),
        added=tuple(added),
        old_serial=soa_serial(old_rows),
        new_serial=new_serial,
        changed=changed,
    )


def _with_serial_text(rdata: str, serial: int) -> str:
    fields = rdata.split()
    fields[2] = str(serial)
    return " ".join(fields)


def _order(key: RRsetKey) -> tuple[bool, tuple[str, ...], str]:
    labels = tuple(reversed(key[0].rstrip(".").split(".")))
    return (key[1] != "SOA", labels, key[1])
