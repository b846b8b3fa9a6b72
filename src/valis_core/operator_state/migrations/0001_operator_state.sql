-- Operator state: served zones and their records, the single-row instance write-fence,
-- and per-node site facts. The constraints say in SQL what the zone index would refuse,
-- where SQL can say it; the index (valis_core.dns.zone) remains the full judge.

-- A record type the zone index serves: a mnemonic dnspython knows for a data type, or the
-- generic TYPEnnn form, minus the query and transport types (0, OPT = 41, 128..255).
CREATE FUNCTION valis_servable_rtype(rtype text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT rtype = ANY (ARRAY[
        'A', 'NS', 'MD', 'MF', 'CNAME', 'SOA', 'MB', 'MG', 'MR', 'NULL', 'WKS',
        'PTR', 'HINFO', 'MINFO', 'MX', 'TXT', 'RP', 'AFSDB', 'X25', 'ISDN', 'RT',
        'NSAP', 'NSAP-PTR', 'SIG', 'KEY', 'PX', 'GPOS', 'AAAA', 'LOC', 'NXT', 'SRV',
        'NAPTR', 'KX', 'CERT', 'A6', 'DNAME', 'APL', 'DS', 'SSHFP', 'IPSECKEY',
        'RRSIG', 'NSEC', 'DNSKEY', 'DHCID', 'NSEC3', 'NSEC3PARAM', 'TLSA', 'SMIMEA',
        'HIP', 'NINFO', 'CDS', 'CDNSKEY', 'OPENPGPKEY', 'CSYNC', 'ZONEMD', 'SVCB',
        'HTTPS', 'DSYNC', 'HHIT', 'BRID', 'SPF', 'UNSPEC', 'NID', 'L32', 'L64',
        'LP', 'EUI48', 'EUI64', 'URI', 'CAA', 'AVC', 'AMTRELAY', 'RESINFO',
        'WALLET', 'TA', 'DLV'
    ]::text[])
    OR (rtype ~ '^TYPE[0-9]{1,5}$'
        AND substr(rtype, 5)::integer BETWEEN 1 AND 65535
        AND substr(rtype, 5)::integer <> 41
        AND substr(rtype, 5)::integer NOT BETWEEN 128 AND 255)
$$;

-- Whether owner name lies at or below zone (absolute names, compared case-insensitively).
CREATE FUNCTION valis_name_in_zone(owner text, zone text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT zone = '.'
        OR lower(owner) = lower(zone)
        OR right(lower(owner), length(zone) + 1) = '.' || lower(zone)
$$;

CREATE TABLE zones (
    name text PRIMARY KEY
        CONSTRAINT zone_name_absolute_lowercase
        CHECK (name ~ '\.$' AND name = lower(name) AND octet_length(name) <= 255),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE records (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    zone text NOT NULL REFERENCES zones (name) ON DELETE CASCADE,
    owner text NOT NULL
        CONSTRAINT record_owner_absolute CHECK (owner ~ '\.$' AND octet_length(owner) <= 1024),
    rtype text NOT NULL
        CONSTRAINT record_type_servable CHECK (valis_servable_rtype(rtype)),
    ttl integer NOT NULL
        CONSTRAINT record_ttl_range CHECK (ttl BETWEEN 0 AND 2147483647),
    rdata text NOT NULL,
    CONSTRAINT record_owner_in_zone CHECK (valis_name_in_zone(owner, zone)),
    CONSTRAINT record_soa_at_apex CHECK (rtype <> 'SOA' OR lower(owner) = zone)
);

CREATE INDEX records_by_zone ON records (zone);
CREATE UNIQUE INDEX records_one_soa_per_zone ON records (zone) WHERE rtype = 'SOA';
CREATE UNIQUE INDEX records_no_duplicate ON records (zone, lower(owner), rtype, rdata);

-- The single-row instance write-fence (valis_core.fence holds its rules).
CREATE TABLE instance_fence (
    id smallint PRIMARY KEY DEFAULT 1 CONSTRAINT instance_fence_single_row CHECK (id = 1),
    generation bigint NOT NULL CONSTRAINT instance_fence_generation CHECK (generation >= 0),
    holder text NOT NULL CONSTRAINT instance_fence_holder CHECK (holder <> ''),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Each node's first-boot environment, one row per VALIS_* key. The development listener
-- (VALIS_REPL_PORT) is never provisioned, so it cannot be stored.
CREATE TABLE site_facts (
    node text NOT NULL CONSTRAINT site_facts_node CHECK (node ~ '^[^[:space:][:cntrl:]]+$'),
    key text NOT NULL
        CONSTRAINT site_facts_key CHECK (key ~ '^VALIS_[A-Z0-9_]+$' AND key <> 'VALIS_REPL_PORT'),
    value text NOT NULL
        CONSTRAINT site_facts_value CHECK (value <> '' AND value !~ '[[:cntrl:]]'),
    PRIMARY KEY (node, key)
);

-- Change feed for the zone source: one NOTIFY per changed zone per transaction (PostgreSQL
-- folds identical payloads within a transaction). The payload is the zone name; an empty
-- payload (after TRUNCATE) asks listeners to reload everything.
CREATE FUNCTION valis_notify_zone_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('valis_zone_changed', '');
        RETURN NULL;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        FOR changed IN EXECUTE format('SELECT DISTINCT %I FROM valis_new_rows', TG_ARGV[0]) LOOP
            PERFORM pg_notify('valis_zone_changed', changed);
        END LOOP;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        FOR changed IN EXECUTE format('SELECT DISTINCT %I FROM valis_old_rows', TG_ARGV[0]) LOOP
            PERFORM pg_notify('valis_zone_changed', changed);
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER records_notify_insert AFTER INSERT ON records
    REFERENCING NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('zone');
CREATE TRIGGER records_notify_update AFTER UPDATE ON records
    REFERENCING OLD TABLE AS valis_old_rows NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('zone');
CREATE TRIGGER records_notify_delete AFTER DELETE ON records
    REFERENCING OLD TABLE AS valis_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('zone');
CREATE TRIGGER records_notify_truncate AFTER TRUNCATE ON records
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('zone');

CREATE TRIGGER zones_notify_insert AFTER INSERT ON zones
    REFERENCING NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('name');
CREATE TRIGGER zones_notify_update AFTER UPDATE ON zones
    REFERENCING OLD TABLE AS valis_old_rows NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('name');
CREATE TRIGGER zones_notify_delete AFTER DELETE ON zones
    REFERENCING OLD TABLE AS valis_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('name');
CREATE TRIGGER zones_notify_truncate AFTER TRUNCATE ON zones
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_zone_change('name');
