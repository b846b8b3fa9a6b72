"""The compiled row reader of a bulk zone load (``_rows.c``): rows of PostgreSQL's COPY
text format added to the zones' builders in C, one after another as they come.

``RowReader`` holds the zones of one load (the zone column's bytes, in the order
asked). Once a zone's first row has gone through ``Builder.add_fields`` (which makes the
zone's parts), ``arm`` hands C that zone's parts, and from then on C adds each line
whose every field ``add_fields`` would read its short way (a plainly written owner
inside the zone; A, NS, CNAME, SOA, PTR, MX or SRV rdata that ``master.row_rdata``
reads; a TTL in range) exactly as ``add_fields`` adds it. Every other line is handed
back (``line`` answers false, ``read`` returns it): the caller splits and unescapes it
and adds it the Python way, which stays the reference
(``tests/property/test_zone_rows.py`` holds the two to the same zones, refusals and
errors). A refused zone's lines are skipped (``refuse``).

``read`` takes the lines straight from libpq (``PQgetCopyData`` on the connection
psycopg holds, asynchronously), so a row costs no Python call at all: ``use_libpq``
names the libpq psycopg loaded (the one whose ``PGconn`` it is). Measured at 10^6 rows
of one zone on two busy cores, taking the rows from libpq one Python call each costs
0.8 to 0.9 s of this process's CPU before anything is done with them, and adding them
through ``add_fields`` 1.7 s more; C does both in about 0.3 s.

``COMPILED`` says whether the extension is built; without it every line goes the
Python way, as before it existed.
"""

from __future__ import annotations

from collections.abc import Sequence

from valis_core.dns.zone.build import Builder

try:
    from valis_core.dns.zone import _rows
except ImportError:  # not built: every row goes the Python way
    COMPILED = False
else:
    COMPILED = True

WAIT, LINE, BUDGET, DONE, FAILED = 0, 1, 2, 3, 4
"""What ``read`` stopped at: libpq holds no whole row (wait for the socket, consume
input, read again); a line handed back; ``budget`` rows taken; the COPY is over; libpq
failed (its error is in its results)."""


class RowReader:
    """The compiled reader of one load's zones, each at its position in ``zones``
    (``COMPILED`` must be true)."""

    __slots__ = ("_loader",)

    def __init__(self, zones: Sequence[bytes], *, zone_column: bool = True) -> None:
        """``zone_column=False``: the lines leave their zone out (the load is of one)."""
        positions = {zone: at for at, zone in enumerate(zones)}
        self._loader = _rows.Loader(positions, zone_column=zone_column)

    def arm(self, position: int, builder: Builder, zone: str) -> bool:
        """Let C add the rows of the zone at ``position`` (``zone`` as its rows name it)
        into ``builder``; false when every row of it must go the Python way (a zone name
        not written plainly, or the root)."""
        target = builder.row_target(zone)
        if target is None:
            return False
        self._loader.arm(position, *target)
        return True

    def refuse(self, position: int) -> None:
        """Skip the rows of the zone at ``position`` from now on."""
        self._loader.refuse(position)

    def line(self, data: bytes) -> bool:
        """Add one COPY line (its newline included); false when it is the caller's."""
        return self._loader.line(data)

    def read(self, pgconn_ptr: int, budget: int) -> tuple[int, int, bytes | None]:
        """Take up to ``budget`` lines from libpq: what it stopped at (``WAIT`` ...),
        how many lines it took (or skipped), and the line handed back (``LINE``)."""
        return self._loader.read(pgconn_ptr, budget)


def use_libpq(path: str) -> int:
    """Read rows through the libpq at ``path``, which this process has loaded already;
    its version (``PQlibVersion``). ``OSError`` if it is not loaded or not libpq."""
    return _rows.use_libpq(path)
