-- The secondaries of each zone (valis zone secondary add|remove|list): the servers that
-- may transfer it (AXFR) and that are sent a NOTIFY when it changes. Each is an address
-- and the TSIG key (RFC 8945) its transfers and notifies are signed with; the key lives
-- here, with the zone, so a restore of the database (pg_dump) reproduces it.
CREATE TABLE zone_secondaries (
    zone text NOT NULL REFERENCES zones (name) ON DELETE CASCADE,
    address inet NOT NULL
        CONSTRAINT zone_secondary_host_address CHECK (masklen(address) = CASE family(address) WHEN 4 THEN 32 ELSE 128 END),
    key_name text NOT NULL
        CONSTRAINT zone_secondary_key_name CHECK (
            key_name ~ '\.$' AND key_name = lower(key_name) AND octet_length(key_name) <= 255),
    algorithm text NOT NULL
        CONSTRAINT zone_secondary_algorithm CHECK (algorithm IN (
            'hmac-sha256', 'hmac-sha384', 'hmac-sha512', 'hmac-sha224', 'hmac-sha1')),
    secret bytea NOT NULL
        CONSTRAINT zone_secondary_secret CHECK (octet_length(secret) BETWEEN 16 AND 512),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (zone, address)
);
