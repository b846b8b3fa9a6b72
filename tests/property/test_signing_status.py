"""What a node says of its signed zones: ``/status`` and ``valis status`` give each zone's
algorithm, key tags, denial, signature validity and refresh and the signatures kept, and a
roll's step by the name its state gives; the metrics count signatures found cached and
made, and say when a rolling zone's timed step ends."""

from __future__ import annotations

from typing import Any

from tests.dns_ask import ask as ask_source
from tests.property.node_views import views
from tests.property.rolling_keys import NEW, OLD, signer_at
from tests.property.signed_example import INDEX, NOW, Z
from valis_cli.commands.status import render_status
from valis_core.dns import dnssec, wire
from valis_core.dns.answer import Transport
from valis_core.dns.answer.signed import REFRESH, VALIDITY, Signer
from valis_core.dns.answer.snapshot import IndexHolder
from valis_core.dns.dnssec import rollover
from valis_core.dns.dnssec.rollover import Timing
from valis_core.resident.status_document import STATUS
from valis_core.resident.views import NodeViews

LOST = "lost.test."
KEY = dnssec.ZoneKey(dnssec.generate_key(13))


def signing_node() -> tuple[NodeViews, Signer]:
    holder = IndexHolder(INDEX)
    signer = Signer({wire.from_text(Z): KEY, wire.from_text(LOST): None}, clock=lambda: NOW)
    holder.sign_with(signer)
    node = views(holder)
    node.zones = (Z,)
    return node, signer


def ask(node: NodeViews, name: str) -> None:
    ask_source(node.holder.snapshot, name, "A", do=True, transport=Transport.UDP)


def samples(node: NodeViews, name: str) -> list[tuple[float, dict[str, str]]]:
    (family,) = [family for family in node.metric_families() if family.name == name]
    return [(sample.value, dict(sample.labels)) for sample in family.samples]


def test_each_signed_zone_is_described_in_status_and_in_one_line() -> None:
    node, signer = signing_node()
    for name in (f"www.{Z}", f"nope.{Z}", f"nope.{Z}"):  # a denial is made per query
        ask(node, name)
    assert signer.hits >= 1
    assert signer.made >= 2
    status = node.status()
    assert STATUS.unstructure(status)["signed_zones"] == [
        {"zone": LOST, "key_held": False},
        {
            "zone": Z, "key_held": True, "algorithm": 13, "key_tag": KEY.tag,
            "dnskey_tags": [KEY.tag], "denial": "compact",
            "signature_validity_seconds": VALIDITY, "signature_refresh_seconds": REFRESH,
            "signatures_cached": signer.made, "rollover_step": None,
        },
    ]
    lines = render_status(status, NOW).splitlines()
    assert (
        f"zone {Z}: signed with algorithm 13, key tag {KEY.tag} (DNSKEY {KEY.tag}), compact "
        f"denial; signatures valid 14d, made again every 1d, {signer.made} cached"
    ) in lines
    assert (
        f"zone {LOST}: signed in operator state, but this node lacks its key: answered "
        "SERVFAIL until the key is restored from the backup set"
    ) in lines


def test_the_metrics_count_cache_hits_and_misses_and_signatures_kept() -> None:
    node, signer = signing_node()
    ask(node, f"nope.{Z}")
    ask(node, f"nope.{Z}")
    assert samples(node, "valis_dnssec_signature_cache_total") == [
        (signer.hits, {"outcome": "hit"}), (signer.made, {"outcome": "miss"}),
    ]
    assert signer.hits >= 2  # the second denial's NSEC and SOA signatures were kept
    assert samples(node, "valis_dnssec_signatures_cached") == [(signer.made, {"zone": Z})]


def test_a_rolling_zone_shows_its_step_its_keys_and_when_the_next_step_is_due() -> None:
    holder = IndexHolder(INDEX)
    holder.sign_with(signer_at(rollover.PUBLISHED))
    node = views(holder)
    node.zones = (Z,)
    (zone,) = STATUS.unstructure(node.status())["signed_zones"]
    assert (zone["key_tag"], zone["dnskey_tags"]) == (OLD.tag, [OLD.tag, NEW.tag])
    assert zone["rollover_step"] == "published"
    due = NOW - 5 + Timing().propagation_delay + 60  # the DNSKEY TTL signer_at gives
    assert samples(node, "valis_dnssec_rollover_step") == [
        (rollover.step_number("published"), {"zone": Z, "step": "published"}),
    ]
    assert samples(node, "valis_dnssec_rollover_step_due") == [(due, {"zone": Z})]
    text = render_status(node.status(), NOW)
    assert f"(DNSKEY {OLD.tag} {NEW.tag})" in text
    assert "key rollover at step published for 0h00m05s, next step in 0h05m55s (at " in text


def test_every_step_has_its_own_number_and_any_step_name_is_shown_as_given() -> None:
    numbers = [rollover.step_number(step) for step in rollover.ALL_STEPS]
    assert len(set(numbers)) == len(numbers)
    roll: dict[str, Any] = {"zone": Z, "step": "some-new-step", "since": NOW - 60,
                            "due": NOW + 3600}
    text = render_status(STATUS.structure({"rollovers": [roll]}), NOW)
    assert (
        f"zone {Z}: key rollover at step some-new-step for 0h01m00s, next step in 1h00m00s "
        "(at 2027-01-15T09:00:00Z)"
    ) in text
