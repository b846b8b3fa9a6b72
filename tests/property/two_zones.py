"""Two zones side by side, one to be signed (``SIGNED``) and one plain (``PLAIN``), each with
an apex, a name server and a host: what the fast path must keep apart; and one such zone
alone (``EXAMPLE_ROWS``), the compiled path's smallest example."""

from __future__ import annotations

from valis_core.dns.wire.records import RecordRow

SIGNED = "signed.example."
PLAIN = "plain.example."
TWO_ZONES = [
    RecordRow(origin, name, rtype, 3600, rdata)
    for origin in (SIGNED, PLAIN)
    for name, rtype, rdata in (
        (origin, "SOA", f"ns.{origin} h.{origin} 1 2 3 4 300"),
        (origin, "NS", f"ns.{origin}"),
        (f"ns.{origin}", "A", "192.0.2.53"),
        (f"www.{origin}", "A", "192.0.2.80"),
    )
]

EXAMPLE_ROWS = [
    RecordRow("example.com.", "example.com.", "SOA", 3600,
              "ns.example.com. h.example.com. 1 2 3 4 300"),
    RecordRow("example.com.", "example.com.", "NS", 3600, "ns.example.com."),
    RecordRow("example.com.", "ns.example.com.", "A", 3600, "192.0.2.53"),
    RecordRow("example.com.", "www.example.com.", "A", 300, "192.0.2.80"),
]
