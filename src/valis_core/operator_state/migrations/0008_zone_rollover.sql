-- Key rollovers of signed zones (valis zone rollover), and the timings they wait on.
--
-- The timings are per-zone settings on zone_signing, in seconds, with RFC 7583's names:
-- the DNSKEY RRset's TTL as served (TTLkey), the DS TTL at the parent (TTLds), the
-- largest TTL of a signed RRset in the zone (TTLsig), and how long a change takes to
-- reach every server of the zone (Dprp) and of the parent (Dprp_P).
--
-- A zone_rollover row is a roll in progress from the key zone_signing names (old_tag) to
-- new_tag, at one step of the Double-DS table in valis_core.dns.rollover since step_at
-- (UNIX time), waiting on the timings copied when it began. The resident holding the
-- fence moves the timed steps on, the operator's verb confirms the parent's DS; both
-- write in fenced transactions and say which holder wrote. When the roll ends the row
-- goes and zone_signing names the new key.
ALTER TABLE zone_signing
    ADD COLUMN dnskey_ttl integer NOT NULL DEFAULT 3600,
    ADD COLUMN ds_ttl integer NOT NULL DEFAULT 86400,
    ADD COLUMN max_zone_ttl integer NOT NULL DEFAULT 86400,
    ADD COLUMN propagation_delay integer NOT NULL DEFAULT 300,
    ADD COLUMN parent_propagation_delay integer NOT NULL DEFAULT 3600,
    ADD CONSTRAINT zone_signing_timings CHECK (
        dnskey_ttl BETWEEN 0 AND 2592000 AND ds_ttl BETWEEN 0 AND 2592000
        AND max_zone_ttl BETWEEN 0 AND 2592000 AND propagation_delay BETWEEN 0 AND 2592000
        AND parent_propagation_delay BETWEEN 0 AND 2592000
    );

CREATE TABLE zone_rollover (
    zone text PRIMARY KEY REFERENCES zone_signing (zone) ON DELETE CASCADE,
    old_tag integer NOT NULL CONSTRAINT zone_rollover_old_tag CHECK (old_tag BETWEEN 0 AND 65535),
    new_tag integer NOT NULL CONSTRAINT zone_rollover_new_tag CHECK (new_tag BETWEEN 0 AND 65535),
    step text NOT NULL CONSTRAINT zone_rollover_step CHECK (
        step IN ('ds-submit', 'ds-propagating', 'published', 'switched', 'ds-retire')
    ),
    step_at double precision NOT NULL,
    dnskey_ttl integer NOT NULL,
    ds_ttl integer NOT NULL,
    max_zone_ttl integer NOT NULL,
    propagation_delay integer NOT NULL,
    parent_propagation_delay integer NOT NULL,
    set_by text NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT zone_rollover_two_keys CHECK (old_tag <> new_tag)
);
