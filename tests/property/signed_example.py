"""The signed example the signed-answer tests share: two zones (``Z`` signed, ``OTHER``
beside it) holding a bit of every shape an answer takes (wildcard, empty non-terminal,
secure and insecure delegations, DNAME, CNAME in and out of the zone), and the fixed
``NOW`` their signatures are made at."""

from __future__ import annotations

from valis_core.dns.wire.records import RecordRow
from valis_core.dns.zone import ZoneIndex

NOW = 1_800_000_000
Z = "example.test."
OTHER = "other.test."
SOA = f"ns1.{Z} hostmaster.{Z} 1 7200 3600 1209600 300"
BASE = [
    RecordRow(Z, Z, "SOA", 3600, SOA),
    RecordRow(Z, Z, "NS", 3600, f"ns1.{Z}"),
    RecordRow(Z, f"ns1.{Z}", "A", 3600, "192.0.2.53"),
    RecordRow(Z, Z, "MX", 300, f"10 Mail.{Z}"),
    RecordRow(Z, f"mail.{Z}", "A", 300, "192.0.2.25"),
    RecordRow(Z, f"www.{Z}", "A", 300, "192.0.2.80"),
    RecordRow(Z, f"www.{Z}", "AAAA", 300, "2001:db8::80"),
    RecordRow(Z, f"alias.{Z}", "CNAME", 300, f"www.{Z}"),
    RecordRow(Z, f"dangling.{Z}", "CNAME", 300, f"gone.{Z}"),
    RecordRow(Z, f"*.wild.{Z}", "TXT", 300, '"wild"'),
    RecordRow(Z, f"deep.ent.{Z}", "A", 300, "192.0.2.9"),
    RecordRow(Z, f"secure.{Z}", "NS", 3600, f"ns.secure.{Z}"),
    RecordRow(Z, f"secure.{Z}", "DS", 3600, "12345 13 2 " + "ab" * 32),
    RecordRow(Z, f"ns.secure.{Z}", "A", 3600, "192.0.2.54"),
    RecordRow(Z, f"insecure.{Z}", "NS", 3600, "ns.example.net."),
    RecordRow(Z, f"d.{Z}", "DNAME", 300, f"wild.{Z}"),
    RecordRow(Z, f"other.{Z}", "CNAME", 300, f"www.{OTHER}"),
    RecordRow(OTHER, OTHER, "SOA", 3600, f"ns1.{Z} hostmaster.{Z} 1 7200 3600 1209600 300"),
    RecordRow(OTHER, OTHER, "NS", 3600, f"ns1.{Z}"),
    RecordRow(OTHER, f"www.{OTHER}", "A", 300, "198.51.100.1"),
]
INDEX = ZoneIndex.from_records(BASE)
