-- The helpers a change evaluates once per statement, made PL/pgSQL, so that PostgreSQL
-- reads each body once per session instead of once per statement.
--
-- Migration 0019 made them SQL-standard bodies that the planner inlines. Inlining happens
-- wherever an expression is planned, and the records' CHECK constraints are planned
-- again for every statement that writes a record (the executor prepares them as it
-- starts): each UPDATE read valis_servable_rtype's stored body back from the catalog,
-- decompressed it (its pattern, stored byte by byte, makes it a long node tree) and
-- parsed it, and valis_name_in_zone's too. A perf profile of the writing backend
-- (benchmarks/pg_change_cost.py's change, which is two such UPDATEs: the change and the
-- seal's raise of the SOA) put a fifth of its CPU there. A PL/pgSQL function is compiled
-- once per session and its expression's plan kept; called per row it costs a function
-- call, which a bulk import does not notice (a zone of 10^5 records imported in the same
-- time either way).
--
-- valis_policy_serial inlined too, but the seal plans it once per transaction, and its
-- candidate serial, an expression of several calls used four times inside
-- valis_serial_gt, kept that one from being inlined: it ran through fmgr_sql, parsing
-- its body each time. As PL/pgSQL the candidate is a variable, and valis_serial_gt of
-- two variables inlines.
--
-- benchmarks/pg_change_cost.py, the writing backend's CPU per change: 0.73-0.75 ms with
-- 0019, 0.57-0.59 ms with this. Each function answers exactly as under 0019 for every
-- input, NULL included (tests/scenario/test_change_cost_migration.py compares them with
-- 0018's, as it compared 0019's).

CREATE OR REPLACE FUNCTION valis_servable_rtype(rtype text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
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
END
$$;

CREATE OR REPLACE FUNCTION valis_name_in_zone(owner text, zone text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN zone = '.' OR lower(owner) = lower(zone)
        OR right(lower(owner), length(zone) + 1) = '.' || lower(zone);
END
$$;

CREATE OR REPLACE FUNCTION valis_policy_serial(stored bigint, policy text, at timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    candidate bigint := CASE policy
        WHEN 'unixtime' THEN floor(extract(epoch FROM at))::bigint % 4294967296
        WHEN 'dateserial' THEN to_char(at AT TIME ZONE 'UTC', 'YYYYMMDD')::bigint * 100
    END;
BEGIN
    RETURN CASE WHEN valis_serial_gt(candidate, stored) THEN candidate
        ELSE valis_next_serial(stored) END;
END
$$;
