-- A KSK/ZSK split as the option beside the combined signing key (valis zone sign --split),
-- and the pre-publish ZSK roll (valis zone rollover --zsk).
--
-- zone_signing.zsk_tag names the zone-signing key (DNSKEY flags 256) that signs every
-- RRset but the apex's DNSKEY, CDS and CDNSKEY; key_tag then names the key-signing key
-- (flags 257) the parent's DS is made from. NULL: the zone signs with one CSK, key_tag.
--
-- zone_rollover.kind says which key a roll replaces: the CSK or a split zone's KSK (both
-- by the Double-DS steps), or its ZSK (the steps zsk-published and zsk-switched, ending on
-- time). old_tag is then the key zsk_tag names, and the roll's end makes new_tag the ZSK.
ALTER TABLE zone_signing
    ADD COLUMN zsk_tag integer
        CONSTRAINT zone_signing_zsk_tag CHECK (zsk_tag BETWEEN 0 AND 65535),
    ADD CONSTRAINT zone_signing_two_keys CHECK (zsk_tag IS NULL OR zsk_tag <> key_tag);

ALTER TABLE zone_rollover
    ADD COLUMN kind text NOT NULL DEFAULT 'csk'
        CONSTRAINT zone_rollover_kind CHECK (kind IN ('csk', 'ksk', 'zsk')),
    DROP CONSTRAINT zone_rollover_step,
    ADD CONSTRAINT zone_rollover_step CHECK (
        (kind <> 'zsk' AND step IN ('ds-submit', 'ds-propagating', 'published', 'switched',
                                    'ds-retire'))
        OR (kind = 'zsk' AND step IN ('zsk-published', 'zsk-switched'))
    );
