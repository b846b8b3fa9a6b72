"""A zone rolling its keys, for the tests of what a rolling zone answers and says: two
KSKs (``OLD`` rolling to ``NEW``) and two ZSKs for the split variant, all with distinct
tags, and the signer of the example zone at any step of either roll."""

from __future__ import annotations

from tests.property.signed_example import NOW, Z
from valis_core.dns import dnssec, wire
from valis_core.dns.answer.signed import Signer
from valis_core.dns.dnssec import ZoneKey, rollover
from valis_core.dns.dnssec.rollover import Timing
from valis_core.operator_state.zone_signing import ZoneSigning
from valis_core.resident.signing import zone_keys_for

OLD = ZoneKey(dnssec.generate_key(13))
NEW = ZoneKey(dnssec.generate_key(13))
while NEW.tag == OLD.tag:  # pragma: no cover - a 16-bit tag drawn twice
    NEW = ZoneKey(dnssec.generate_key(13))
ZSK_OLD = ZoneKey(dnssec.generate_key(13), dnssec.ZSK_FLAGS)
ZSK_NEW = ZoneKey(dnssec.generate_key(13), dnssec.ZSK_FLAGS)
while len({OLD.tag, NEW.tag, ZSK_OLD.tag, ZSK_NEW.tag}) < 4:  # pragma: no cover
    ZSK_NEW = ZoneKey(dnssec.generate_key(13), dnssec.ZSK_FLAGS)

def signer_at(step: str) -> Signer:
    roll = rollover.Rollover(OLD.tag, NEW.tag, step, NOW - 5, Timing(dnskey_ttl=60))
    row = ZoneSigning(Z, 13, OLD.tag, Timing(dnskey_ttl=60), roll)
    keys = zone_keys_for(row, {OLD.tag: OLD, NEW.tag: NEW})
    assert keys is not None
    return Signer({wire.from_text(Z): keys}, clock=lambda: NOW)


def split_signer_at(step: str | None) -> Signer:
    """A split zone (KSK ``OLD``) at ``step`` of a roll of its ZSK, or at rest."""
    roll = None if step is None else rollover.Rollover(
        ZSK_OLD.tag, ZSK_NEW.tag, step, NOW - 5, Timing(dnskey_ttl=60), rollover.ZSK
    )
    row = ZoneSigning(Z, 13, OLD.tag, Timing(dnskey_ttl=60), roll, zsk_tag=ZSK_OLD.tag)
    keys = zone_keys_for(row, {OLD.tag: OLD, ZSK_OLD.tag: ZSK_OLD, ZSK_NEW.tag: ZSK_NEW})
    assert keys is not None
    return Signer({wire.from_text(Z): keys}, clock=lambda: NOW)
