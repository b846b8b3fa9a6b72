-- What PostgreSQL does for every change, made cheaper: measured with
-- benchmarks/pg_change_cost.py (one autocommitted UPDATE of a host's address in a zone of
-- 1 000 hosts, its serial raised at commit), the writing backend spent 1.8 ms of CPU per
-- change through 0018 and 0.7-0.8 ms with this. A perf profile of that backend named three
-- costs that had nothing to do with the change:
--
--   * The helper functions of 0001 and 0006 were SQL functions whose bodies PostgreSQL
--     parsed again for every statement: STRICT functions whose bodies are not strict
--     (OR, CASE, = ANY) and bodies with a FROM are never inlined, so each statement's
--     CHECK constraints (valis_name_in_zone, valis_servable_rtype) and each transaction's
--     seal (valis_soa_serial, valis_serial_gt, valis_policy_serial) ran them through
--     fmgr_sql, which parses and plans the body text each time. They are now SQL-standard
--     bodies (RETURN, stored parsed) of a single expression, not STRICT, so the planner
--     inlines them. Each gives the same result as before for every non-NULL input
--     (tests/scenario/test_change_cost_migration.py compares them); with a NULL argument
--     each still gives NULL, but for valis_name_in_zone(NULL, '.'), now true, which a CHECK
--     treats as it treated NULL (the columns are NOT NULL anyway). valis_servable_rtype
--     matches one anchored pattern (then the generic TYPEnnn form, as before) instead of
--     an array of 76 constants that the planner read back from the catalog for every
--     statement. valis_policy_serial is STABLE, as its body is (to_char and extract of a
--     timestamptz): an IMMUTABLE function calling STABLE ones is never inlined.
--   * The owner-change NOTIFY trigger (0003) built its two queries as dynamic EXECUTE
--     text, parsed and planned on every run, and it runs twice per change (the change,
--     then the seal's UPDATE of the SOA). Its queries are now static, one branch per
--     statement kind, so PL/pgSQL keeps their plans; the payloads are the same.
--   * An operator's UPDATE or DELETE naming a record by its owner as written
--     (WHERE zone = ... AND owner = ...) had no index on the owner text: PostgreSQL read
--     every record of that type in the zone to find it. records_by_zone (zone) gives way
--     to records_by_zone_owner_text (zone, owner), which serves the zone's lookups as it
--     did (the leading column) and those statements, at the same cost per write.

-- 0001's functions, inlined into each record's CHECK constraints.
CREATE OR REPLACE FUNCTION valis_servable_rtype(rtype text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN rtype ~ '^('
    'A|NS|MD|MF|CNAME|SOA|MB|MG|MR|NULL|WKS|PTR|HINFO|MINFO|MX|TXT|RP|'
    'AFSDB|X25|ISDN|RT|NSAP|NSAP-PTR|SIG|KEY|PX|GPOS|AAAA|LOC|NXT|SRV|'
    'NAPTR|KX|CERT|A6|DNAME|APL|DS|SSHFP|IPSECKEY|RRSIG|NSEC|DNSKEY|DHCID|'
    'NSEC3|NSEC3PARAM|TLSA|SMIMEA|HIP|NINFO|CDS|CDNSKEY|OPENPGPKEY|CSYNC|'
    'ZONEMD|SVCB|HTTPS|DSYNC|HHIT|BRID|SPF|UNSPEC|NID|L32|L64|LP|EUI48|'
    'EUI64|URI|CAA|AVC|AMTRELAY|RESINFO|WALLET|TA|DLV'
    ')$'
    OR (rtype ~ '^TYPE[0-9]{1,5}$'
        AND substr(rtype, 5)::integer BETWEEN 1 AND 65535
        AND substr(rtype, 5)::integer <> 41
        AND substr(rtype, 5)::integer NOT BETWEEN 128 AND 255);
CREATE OR REPLACE FUNCTION valis_name_in_zone(owner text, zone text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN zone = '.' OR lower(owner) = lower(zone)
        OR right(lower(owner), length(zone) + 1) = '.' || lower(zone);
-- 0006's, as the seal and the journal trigger evaluate them.
CREATE OR REPLACE FUNCTION valis_serial_gt(a bigint, b bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN a <> b AND ((a < b AND b - a > 2147483648) OR (a > b AND a - b < 2147483648));
CREATE OR REPLACE FUNCTION valis_next_serial(s bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN (s + 1) % 4294967296 = 0 THEN 1 ELSE (s + 1) % 4294967296 END;
CREATE OR REPLACE FUNCTION valis_soa_serial(rdata text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN (regexp_split_to_array(btrim(rdata), '\s+'))[3] ~ '^[0-9]{1,10}$'
    THEN ((regexp_split_to_array(btrim(rdata), '\s+'))[3])::bigint END;
-- 0003's trigger with static queries: the same notes on the same channels.
CREATE OR REPLACE FUNCTION valis_notify_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    max_rows constant integer := 64;
    max_owners constant integer := 256;
    named integer := coalesce(
        nullif(current_setting('valis.zone_owner_notes', true), ''), '0')::integer;
    changed_zone text;
    changed_rows bigint;
    owners text[];
    plain boolean;
    payload text;
    zones_changed text[];
    rows_changed bigint[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('valis_zone_changed', '');
        PERFORM pg_notify('valis_zone_owners_changed', '');
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(zone), array_agg(n) INTO zones_changed, rows_changed
            FROM (SELECT zone, count(*) AS n FROM valis_new_rows GROUP BY zone) AS c;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(zone), array_agg(n) INTO zones_changed, rows_changed
            FROM (SELECT zone, count(*) AS n FROM valis_old_rows GROUP BY zone) AS c;
    ELSE
        SELECT array_agg(zone), array_agg(n) INTO zones_changed, rows_changed
            FROM (SELECT zone, count(*) AS n FROM (
                SELECT zone FROM valis_new_rows UNION ALL SELECT zone FROM valis_old_rows
            ) AS u GROUP BY zone) AS c;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(zones_changed), 0) LOOP
        changed_zone := zones_changed[i];
        changed_rows := rows_changed[i];
        payload := changed_zone;
        IF changed_rows <= max_rows AND named < max_owners THEN
            IF TG_OP = 'INSERT' THEN
                SELECT array_agg(DISTINCT lower(owner COLLATE "C")),
                       bool_and(owner ~ '^[ -~]+$' AND strpos(owner, '\') = 0 AND owner <> '.')
                    INTO owners, plain FROM valis_new_rows WHERE zone = changed_zone;
            ELSIF TG_OP = 'DELETE' THEN
                SELECT array_agg(DISTINCT lower(owner COLLATE "C")),
                       bool_and(owner ~ '^[ -~]+$' AND strpos(owner, '\') = 0 AND owner <> '.')
                    INTO owners, plain FROM valis_old_rows WHERE zone = changed_zone;
            ELSE
                SELECT array_agg(DISTINCT lower(owner COLLATE "C")),
                       bool_and(owner ~ '^[ -~]+$' AND strpos(owner, '\') = 0 AND owner <> '.')
                    INTO owners, plain FROM (
                        SELECT zone, owner FROM valis_new_rows
                        UNION ALL SELECT zone, owner FROM valis_old_rows
                    ) AS c WHERE zone = changed_zone;
            END IF;
            IF plain AND named + cardinality(owners) <= max_owners
                AND octet_length(changed_zone) + cardinality(owners)
                    + octet_length(array_to_string(owners, '')) <= 7900 THEN
                payload := changed_zone || E'\n' || array_to_string(owners, E'\n');
                named := named + cardinality(owners);
            END IF;
        END IF;
        PERFORM pg_notify('valis_zone_changed', changed_zone);
        PERFORM pg_notify('valis_zone_owners_changed', payload);
    END LOOP;
    PERFORM set_config('valis.zone_owner_notes', named::text, true);
    RETURN NULL;
END
$$;
-- 0006's, one expression; the candidate is written twice so that it inlines.
CREATE OR REPLACE FUNCTION valis_policy_serial(stored bigint, policy text, at timestamptz)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE
    WHEN valis_serial_gt(CASE policy
        WHEN 'unixtime' THEN floor(extract(epoch FROM at))::bigint % 4294967296
        WHEN 'dateserial' THEN to_char(at AT TIME ZONE 'UTC', 'YYYYMMDD')::bigint * 100
    END, stored) THEN CASE policy
        WHEN 'unixtime' THEN floor(extract(epoch FROM at))::bigint % 4294967296
        WHEN 'dateserial' THEN to_char(at AT TIME ZONE 'UTC', 'YYYYMMDD')::bigint * 100
    END
    ELSE valis_next_serial(stored)
END;

DROP INDEX records_by_zone;
CREATE INDEX records_by_zone_owner_text ON records (zone, owner);
