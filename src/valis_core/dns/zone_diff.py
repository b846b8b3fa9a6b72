"""What replacing a zone's records would change, RRset by RRset, as plain values.

Two sets of rows are compared by RRset (owner, type): an RRset whose TTL or records
differ is one removed and one added. ``changed`` ignores the SOA serial, so a serial
policy can tell a real change from a re-import of the same data.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from valis_core.dns.records import RecordRow

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
    fields = row.rdata.split()
    fields[2] = str(serial)
    return attrs.evolve(row, rdata=" ".join(fields))


def _serial_blind(sets: dict[RRsetKey, RRsetValue]) -> dict[RRsetKey, RRsetValue]:
    out = dict(sets)
    for key, (ttl, datas) in sets.items():
        if key[1] == "SOA":
            blind = set()
            for rdata in datas:
                fields = rdata.split()
                if len(fields) >= 3:
                    fields[2] = "*"
                blind.add(" ".join(fields))
            out[key] = (ttl, frozenset(blind))
    return out


def diff_zone(zone: str, old: Iterable[RecordRow], new: Iterable[RecordRow]) -> ZoneDiff:
    """How ``new`` differs from ``old`` (the stored rows; empty for a new zone)."""
    old_rows, new_rows = tuple(old), tuple(new)
    before, after = rrsets(old_rows), rrsets(new_rows)
    removed: list[RecordRow] = []
    added: list[RecordRow] = []
    for key in sorted(before.keys() | after.keys(), key=_order):
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
        new_serial=soa_serial(new_rows),
        changed=_serial_blind(before) != _serial_blind(after),
    )


def _order(key: RRsetKey) -> tuple[bool, tuple[str, ...], str]:
    labels = tuple(reversed(key[0].rstrip(".").split(".")))
    return (key[1] != "SOA", labels, key[1])
