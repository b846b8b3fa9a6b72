"""The DNS-01 record's place and the updates that publish and withdraw it, decided by
the owner terminus's own update logic (no database: rows in, rows out)."""

from __future__ import annotations

import pytest
from dns.rcode import Rcode
from hypothesis import given
from hypothesis import strategies as st

from valis_core.dns.wire.records import RecordRow
from valis_core.edge.challenge import (
    ChallengeError,
    challenge_name,
    challenge_zone,
    publish_request,
    withdraw_request,
)
from valis_core.owner.update import apply_update

ZONE = "example.test."
SOA = RecordRow(ZONE, ZONE, "SOA", 3600,
                "ns1.example.test. hostmaster.example.test. 7 3600 900 604800 300")
labels = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)


@given(st.lists(labels, min_size=0, max_size=3))
def test_the_record_lies_in_the_deepest_served_zone_enclosing_the_domain(
    prefix: list[str],
) -> None:
    domain = ".".join([*prefix, "doh", "example", "test"])
    served = ["test.", "example.test.", "other.example."]
    assert challenge_zone(domain, served) == "example.test."
    assert challenge_zone(domain, [*served, "doh.example.test"]) == "doh.example.test."
    assert challenge_name(domain) == f"_acme-challenge.{domain}."


def test_a_domain_outside_every_served_zone_is_refused_naming_the_site_fact() -> None:
    with pytest.raises(ChallengeError, match="VALIS_SERVED_DOMAIN"):
        challenge_zone("doh.example.net", ["example.test."])


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
               min_size=1, max_size=64))
def test_publishing_adds_the_txt_and_moves_the_serial_and_withdrawing_removes_it(
    value: str,
) -> None:
    name = challenge_name("doh.example.test")
    stale = RecordRow(ZONE, name, "TXT", 60, '"stale"')
    published = apply_update(publish_request(ZONE, "doh.example.test", value), ZONE,
                             [SOA, stale])
    assert published.rcode == Rcode.NOERROR
    assert published.serial == 8
    txt = [row for row in published.adds if row.rtype == "TXT"]
    assert [(row.owner.lower(), row.rdata) for row in txt] == [(name, f'"{value}"')]
    assert stale in published.deletes
    after = [row for row in [SOA, stale] if row not in published.deletes]
    after += list(published.adds)
    withdrawn = apply_update(withdraw_request(ZONE, "doh.example.test"), ZONE, after)
    assert withdrawn.rcode == Rcode.NOERROR
    assert [row.rtype for row in withdrawn.deletes if row.rtype == "TXT"] == ["TXT"]
    assert not [row for row in withdrawn.adds if row.rtype == "TXT"]
