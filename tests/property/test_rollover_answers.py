"""A rolling zone answers as its step says: the DNSKEY RRset holds the step's keys with an
RRSIG by each key signing it, every other RRset is signed by the step's zone signer, and
CDS and CDNSKEY name the DS set the parent should hold; the node's status and metrics
say the step. A zone signed with a KSK/ZSK split answers the same way, its KSK signing the
apex's key sets and its ZSK the rest, at rest and at each step of a ZSK roll."""

from __future__ import annotations

import dns.dnssec
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from tests.dns_ask import ask
from tests.property.dnssec_check import validate, validate_sections
from tests.property.node_views import views
from tests.property.rolling_keys import (
    NEW,
    OLD,
    ZSK_NEW,
    ZSK_OLD,
    signer_at,
    split_signer_at,
)
from tests.property.signed_example import INDEX, NOW, Z
from valis_cli.commands.status import render_status
from valis_core.dns.answer.snapshot import IndexHolder, Snapshot
from valis_core.dns.dnssec import rollover
from valis_core.dns.dnssec.rollover import Timing
from valis_core.operator_state.zone_signing import ZoneSigning
from valis_core.resident.signing import zone_keys_for
from valis_core.resident.status_document import STATUS

APEX = dns.name.from_text(Z)


def rrset(message: dns.message.Message, rdtype: dns.rdatatype.RdataType) -> dns.rrset.RRset:
    return message.find_rrset(message.answer, APEX, dns.rdataclass.IN, rdtype)


def sig_tags(message: dns.message.Message, covers: dns.rdatatype.RdataType) -> set[int]:
    return {
        sig.key_tag for found in message.answer if found.rdtype == dns.rdatatype.RRSIG
        and found.covers == covers for sig in found
    }


@pytest.mark.parametrize("step", rollover.STEPS)
def test_each_step_answers_as_the_table_says(step: str) -> None:
    keying = rollover.keying(rollover.Rollover(OLD.tag, NEW.tag, step, 0, Timing()))
    snap = Snapshot(INDEX, signer=signer_at(step))

    message = ask(snap, Z, "DNSKEY", do=True)
    keys = rrset(message, dns.rdatatype.DNSKEY)
    assert {dns.dnssec.key_id(key) for key in keys} == set(keying.published)
    assert keys.ttl == 60
    assert sig_tags(message, dns.rdatatype.DNSKEY) == set(keying.key_signers)
    sigs = message.find_rrset(message.answer, APEX, dns.rdataclass.IN, dns.rdatatype.RRSIG,
                              dns.rdatatype.DNSKEY)
    for tag in keying.key_signers:  # each alone makes a chain from a DS naming only it
        one = dns.rrset.from_rdata_list(APEX, keys.ttl, [k for k in keys
                                                          if dns.dnssec.key_id(k) == tag])
        only = dns.rrset.from_rdata_list(APEX, sigs.ttl, [s for s in sigs if s.key_tag == tag])
        validate(keys, only, {APEX: one}, now=NOW)

    data = ask(snap, f"www.{Z}", "A", do=True)
    assert sig_tags(data, dns.rdatatype.A) == {keying.zone_signer}
    validate_sections(data, {APEX: keys}, now=NOW)
    denial = ask(snap, f"nope.{Z}", "A", do=True)
    validate_sections(denial, {APEX: keys}, now=NOW)

    cds = rrset(ask(snap, Z, "CDS", do=False, edns=True), dns.rdatatype.CDS)
    assert [ds.key_tag for ds in cds] == sorted(keying.parent_ds, key=[OLD.tag, NEW.tag].index)
    cdnskey = rrset(ask(snap, Z, "CDNSKEY", do=False, edns=True), dns.rdatatype.CDNSKEY)
    assert {dns.dnssec.key_id(key) for key in cdnskey} == set(keying.parent_ds)


@pytest.mark.parametrize("step", [None, *rollover.ZSK_STEPS])
def test_a_split_zone_signs_its_key_sets_with_the_ksk_and_the_rest_with_the_zsk(
    step: str | None
) -> None:
    """At rest and at each step of a ZSK roll: the DNSKEY RRset holds the KSK and the
    step's ZSKs, signed by the KSK alone, as CDS and CDNSKEY (which name the KSK alone);
    the data and the denials are signed by the step's ZSK and validate under the
    DNSKEY RRset, which validates under the KSK's DS."""
    snap = Snapshot(INDEX, signer=split_signer_at(step))
    zsks = {ZSK_OLD.tag} if step is None else {ZSK_OLD.tag, ZSK_NEW.tag}
    signer = ZSK_NEW.tag if step == rollover.ZSK_SWITCHED else ZSK_OLD.tag

    message = ask(snap, Z, "DNSKEY", do=True)
    keys = rrset(message, dns.rdatatype.DNSKEY)
    assert {dns.dnssec.key_id(key) for key in keys} == {OLD.tag, *zsks}
    assert {key.flags for key in keys if dns.dnssec.key_id(key) in zsks} == {256}
    assert sig_tags(message, dns.rdatatype.DNSKEY) == {OLD.tag}
    anchor = dns.rrset.from_rdata_list(APEX, keys.ttl, [
        key for key in keys if dns.dnssec.key_id(key) == OLD.tag
    ])
    validate_sections(message, {APEX: anchor}, now=NOW)  # the KSK alone chains the set
    for cd_type in (dns.rdatatype.CDS, dns.rdatatype.CDNSKEY):
        found = ask(snap, Z, dns.rdatatype.to_text(cd_type), do=True)
        assert sig_tags(found, cd_type) == {OLD.tag}
        validate_sections(found, {APEX: anchor}, now=NOW)
    cds = rrset(ask(snap, Z, "CDS", do=False, edns=True), dns.rdatatype.CDS)
    assert [ds.key_tag for ds in cds] == [OLD.tag]

    for name, rdtype in ((f"www.{Z}", "A"), (f"nope.{Z}", "A"), (Z, "SOA")):
        data = ask(snap, name, rdtype, do=True)
        signed_by = {sig.key_tag for found in [*data.answer, *data.authority]
                     if found.rdtype == dns.rdatatype.RRSIG for sig in found}
        assert signed_by == {signer}, (name, rdtype)
        assert validate_sections(data, {APEX: keys}, now=NOW)


def test_a_node_lacking_the_incoming_key_fails_the_zone_closed() -> None:
    roll = rollover.start(OLD.tag, NEW.tag, Timing(), NOW)
    row = ZoneSigning(Z, 13, OLD.tag, Timing(), roll)
    assert zone_keys_for(row, {OLD.tag: OLD}) is None
    assert zone_keys_for(ZoneSigning(Z, 13, OLD.tag), {OLD.tag: OLD}) is not None


def test_status_and_metrics_say_the_step() -> None:
    holder = IndexHolder(INDEX)
    holder.sign_with(signer_at(rollover.SWITCHED))
    node = views(holder)
    node.zones = (Z,)
    rolls = STATUS.unstructure(node.status())["rollovers"]
    assert rolls == [{
        "zone": Z, "step": "switched", "kind": "csk", "since": NOW - 5,
        "due": NOW - 5 + Timing().propagation_delay + Timing().max_zone_ttl,
        "key_tags": [OLD.tag, NEW.tag],
    }]
    families = {family.name: family for family in node.metric_families()}
    (sample,) = families["valis_dnssec_rollover_step"].samples
    assert sample.value == 4
    assert dict(sample.labels) == {"zone": Z, "step": "switched"}
    text = render_status(node.status(), NOW)
    assert (
        f"zone {Z}: key rollover at step switched for 0h00m05s, next step in 24h04m55s"
    ) in text

    holder.sign_with(signer_at(rollover.DS_RETIRE))
    text = render_status(node.status(), NOW)
    assert (
        f"zone {Z}: key rollover at step ds-retire for 0h00m05s, waiting for the parent: "
        f"give it the DS set 'valis zone ds {Z}' prints, then 'valis zone rollover {Z} "
        "--ds-published'"
    ) in text


def test_status_and_metrics_say_a_zsk_rolls_and_its_step() -> None:
    holder = IndexHolder(INDEX)
    holder.sign_with(split_signer_at(rollover.ZSK_PUBLISHED))
    node = views(holder)
    node.zones = (Z,)
    (roll,) = STATUS.unstructure(node.status())["rollovers"]
    assert (roll["step"], roll["kind"]) == ("zsk-published", "zsk")
    assert roll["key_tags"] == [OLD.tag, ZSK_OLD.tag, ZSK_NEW.tag]
    families = {family.name: family for family in node.metric_families()}
    (sample,) = families["valis_dnssec_rollover_step"].samples
    assert (sample.value, dict(sample.labels)) == (6, {"zone": Z, "step": "zsk-published"})
    text = render_status(node.status(), NOW)
    assert f"zone {Z}: ZSK key rollover at step zsk-published for 0h00m05s, next step in" in text
