"""The plain lines' type numbers (``plain_types``, declared without dnspython so the
master reader need not import it) are dnspython's, and ``records`` re-exports them."""

from __future__ import annotations

import dns.rdatatype

from valis_core.dns.wire import plain_types, records


def test_every_plain_type_is_dnspython_s_and_records_one() -> None:
    names = [name for name in vars(plain_types) if name.isupper()]
    assert sorted(names) == ["A", "AAAA", "CNAME", "MX", "NS", "PTR", "SOA", "SRV", "TXT"]
    for name in names:
        assert getattr(plain_types, name) == int(dns.rdatatype.RdataType[name])
        assert getattr(records, name, getattr(plain_types, name)) == getattr(plain_types, name)
