"""The node's metrics say how many zones it signs, how many it fails closed for want of
their key, how many signatures it has made, found cached and keeps, and when the
signatures it serves expire; a node signing nothing shows none."""

from __future__ import annotations

import dns.message

from tests.property.node_views import views
from valis_core.dns import dnssec, wire
from valis_core.dns.answer import Transport, answer
from valis_core.dns.answer.signed import Signer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.zone import ZoneIndex
from valis_core.resident.views import NodeViews

ZONE_TEXT = """$ORIGIN example.test.
$TTL 300
@ IN SOA ns1 hostmaster 7 7200 900 1209600 300
@ IN NS ns1
ns1 IN A 192.0.2.53
"""


def dnssec_samples(node: NodeViews) -> dict[str, list[tuple[float, tuple[tuple[str, str], ...]]]]:
    return {
        family.name: [(sample.value, sample.labels) for sample in family.samples]
        for family in node.metric_families()
        if family.name.startswith("valis_dnssec_")
    }


def test_signing_is_counted_in_the_metrics() -> None:
    holder = IndexHolder(ZoneIndex.from_zone_text(ZONE_TEXT, "example.test."))
    node = views(holder)
    assert dnssec_samples(node) == {}
    key = dnssec.ZoneKey(dnssec.generate_key(15))
    holder.sign_with(Signer(
        {wire.from_text("example.test."): key, wire.from_text("lost.test."): None},
        clock=lambda: 1_800_000_000,
    ))
    query = dns.message.make_query("ns1.example.test.", "A", want_dnssec=True)
    answer(holder.snapshot, query.to_wire(), transport=Transport.UDP)
    assert dnssec_samples(node) == {
        "valis_dnssec_zones": [(1, (("state", "signing"),)), (1, (("state", "lacking_key"),))],
        # 1.8e9 is in the refresh window starting 1_799_971_200; valid 14 days from there.
        "valis_dnssec_signatures_not_after": [(1_799_971_200 + 14 * 86400,
                                               (("zone", "example.test."),))],
        "valis_dnssec_signature_validity_seconds": [(14 * 86400, ())],
        "valis_dnssec_signatures_made_total": [(1, ())],
        "valis_dnssec_transfer_signatures": [(0, (("of", "kept"),)),
                                             (2_000_000, (("of", "limit"),))],
        "valis_dnssec_transfer_signature_evictions_total": [(0, ())],
        "valis_dnssec_signature_cache_total": [(0, (("outcome", "hit"),)),
                                               (1, (("outcome", "miss"),))],
        "valis_dnssec_signatures_cached": [(1, (("zone", "example.test."),))],
    }


def test_each_zone_says_the_soa_refresh_its_secondaries_follow() -> None:
    """The SOA REFRESH served for each zone (the alerts compare a secondary's lag with
    it); a zone whose apex SOA is not answered says -1."""
    holder = IndexHolder(ZoneIndex.from_zone_text(ZONE_TEXT, "example.test."))
    node = views(holder)
    node.zones = ("example.test.", "absent.test.")
    (family,) = [f for f in node.metric_families() if f.name == "valis_zone_soa_refresh_seconds"]
    assert [(sample.value, sample.labels) for sample in family.samples] == [
        (7200, (("zone", "example.test."),)), (-1, (("zone", "absent.test."),)),
    ]
