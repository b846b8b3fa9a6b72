"""What the fabric shows of DNSSEC: each signed zone as this node signs it, the key
rollovers under way, and their metric families, all read from the ``Signer`` the served
index carries (``None``: no zone is signed, and there is nothing to show).
"""

from __future__ import annotations

from valis_core.dns import wire as names
from valis_core.dns.answer.signed import REFRESH, VALIDITY, Signer, ZoneKeys
from valis_core.dns.dnssec.rollover import ALL_STEPS, step_number
from valis_core.resident.metrics import Family, Sample
from valis_core.resident.status_document import RolloverStatus, SignedZone


def _rolling(signer: Signer) -> list[tuple[str, ZoneKeys, str]]:
    """Each signed zone whose keys roll: its name, its keys and the step they are at."""
    return [
        (names.to_text(apex), zone.keys, zone.keys.step)
        for apex, zone in sorted(signer.zones.items())
        if zone.keys is not None and zone.keys.step is not None
    ]


def rollover_status(signer: Signer | None) -> tuple[RolloverStatus, ...]:
    """Each signed zone's key rollover under way: its step, since and until when."""
    if signer is None:
        return ()
    return tuple(
        RolloverStatus(
            zone=zone,
            step=step,
            kind=keys.kind,
            since=keys.since,
            due=keys.due,
            key_tags=tuple(key.tag for key in keys.published),
        )
        for zone, keys, step in _rolling(signer)
    )


def signing_status(signer: Signer | None) -> tuple[SignedZone, ...]:
    """Each signed zone as this node signs it: the key signing its RRsets, the keys
    its DNSKEY RRset holds, its denial of existence, how long signatures are valid
    and how often they are made again, and how many are kept. A zone whose key this
    node lacks (answered SERVFAIL) says only that."""
    if signer is None:
        return ()
    cached = signer.cached_by_zone()
    found: list[SignedZone] = []
    for apex, zone in sorted(signer.zones.items()):
        keys = zone.keys
        if keys is None:
            found.append(SignedZone(zone=names.to_text(apex), key_held=False))
            continue
        found.append(SignedZone(
            zone=names.to_text(apex),
            key_held=True,
            algorithm=keys.signer.algorithm,
            key_tag=keys.signer.tag,
            dnskey_tags=tuple(key.tag for key in keys.published),
            denial="compact" if zone.nsec3 is None else "nsec3",
            signature_validity_seconds=VALIDITY,
            signature_refresh_seconds=REFRESH,
            signatures_cached=cached.get(apex, 0),
            rollover_step=keys.step,
        ))
    return tuple(found)


def signing_families(signer: Signer | None) -> list[Family]:
    """The DNSSEC metric families: zones signed or lacking their key, rollovers under
    way, signatures made, cached and asked of the cache."""
    if signer is None:
        return []
    lacking = len(signer.lacking)
    rolls = _rolling(signer)
    cached = signer.cached_by_zone()
    numbered = ", ".join(f"{step_number(step)} {step}" for step in ALL_STEPS)
    not_after = signer.window() * REFRESH + VALIDITY
    return [
        Family(
            "valis_dnssec_zones",
            "gauge",
            "Zones signed in operator state, by whether this node holds their key "
            "(lacking_key: answered SERVFAIL).",
            (
                Sample(len(signer.zones) - lacking, (("state", "signing"),)),
                Sample(lacking, (("state", "lacking_key"),)),
            ),
        ),
        *([Family(
            "valis_dnssec_rollover_step",
            "gauge",
            f"Each rolling zone's rollover step, by number ({numbered}), its name in "
            "the step label.",
            tuple(
                Sample(step_number(step), (("zone", zone), ("step", step)))
                for zone, _keys, step in rolls
            ),
        ), Family(
            "valis_dnssec_rollover_step_due",
            "gauge",
            "When each rolling zone's timed step ends and the next begins (UNIX time; "
            "0 while the step waits for the operator to confirm the parent's DS).",
            tuple(Sample(keys.due or 0, (("zone", zone),)) for zone, keys, _step in rolls),
        )] if rolls else []),
        Family(
            "valis_dnssec_signatures_not_after",
            "gauge",
            "When the signatures each zone is served with now expire (UNIX time): the "
            "current refresh window's start plus their validity; signatures are made "
            "again each window, so this stays valis_dnssec_signature_validity_seconds "
            "minus at most a day ahead of the clock.",
            tuple(
                Sample(not_after, (("zone", names.to_text(apex)),))
                for apex, zone in sorted(signer.zones.items()) if zone.keys is not None
            ),
        ),
        Family(
            "valis_dnssec_signature_validity_seconds",
            "gauge",
            "How long a signature is valid from the start of its refresh window: a "
            "secondary behind for longer serves expired signatures of a signed zone.",
            (Sample(VALIDITY),),
        ),
        Family(
            "valis_dnssec_signatures_made_total",
            "counter",
            "RRSIGs made (each RRset signed once per refresh window; a compact denial "
            "per query).",
            (Sample(signer.made),),
        ),
        Family(
            "valis_dnssec_transfer_signatures",
            "gauge",
            "RRSIGs the signed transfers of NSEC3 zones keep, all zones together, and "
            "their bound (VALIS_TRANSFER_SIGNATURES).",
            (
                Sample(signer.cache.transfer_signatures(), (("of", "kept"),)),
                Sample(signer.cache.transfer_limit, (("of", "limit"),)),
            ),
        ),
        Family(
            "valis_dnssec_transfer_signature_evictions_total",
            "counter",
            "Zones whose transfer signatures were dropped to stay within the bound, the "
            "zone transferred longest ago first (its next transfer signs it anew).",
            (Sample(signer.cache.transfer_evictions),),
        ),
        Family(
            "valis_dnssec_signature_cache_total",
            "counter",
            "RRSIGs asked of the signature cache, by outcome: hit (kept from earlier "
            "in the refresh window), miss (made then: signatures_made).",
            (
                Sample(signer.hits, (("outcome", "hit"),)),
                Sample(signer.made, (("outcome", "miss"),)),
            ),
        ),
        Family(
            "valis_dnssec_signatures_cached",
            "gauge",
            "RRSIGs kept for each signed zone whose key this node holds.",
            tuple(
                Sample(cached.get(apex, 0), (("zone", names.to_text(apex)),))
                for apex, zone in sorted(signer.zones.items()) if zone.keys is not None
            ),
        ),
    ]
