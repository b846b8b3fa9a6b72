-- Owner-level change notes, so the zone source can re-read a few owners of a changed zone
-- instead of the whole zone. They go on a channel of their own, valis_zone_owners_changed,
-- with these payloads:
--
--   ''                          reload every zone (TRUNCATE)
--   'zone'                      reload that zone whole
--   'zone\nowner\nowner...'     only these owners of that zone changed; each owner is the
--                               changed rows' owner text lowercased in ASCII only
--                               (lower(owner COLLATE "C")), and is plain: printable ASCII,
--                               no backslash escape, not the root
--
-- A statement falls back to the whole-zone note for a zone when it changed more than 64 of
-- its rows, when any changed owner is not plain (its text might spell the same DNS name as
-- another row's text in another way), when the payload would not fit a NOTIFY, or once the
-- transaction has already named 256 owners: a bulk change never turns into thousands of
-- notes. PostgreSQL folds identical payloads within a transaction, so a large transaction
-- made of many small statements ends in one whole-zone note per zone. Changes to the zones
-- table are whole-zone notes.
--
-- valis_zone_changed keeps its meaning (the changed zone's name; '' for everything), so a
-- zone source of an older valis still following it during an upgrade misses nothing.

-- The zone source reads a changed owner's rows by (zone, ASCII-lowercased owner).
CREATE INDEX records_by_zone_owner ON records (zone, lower(owner COLLATE "C"));

CREATE FUNCTION valis_notify_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    max_rows constant integer := 64;
    max_owners constant integer := 256;
    named integer := coalesce(
        nullif(current_setting('valis.zone_owner_notes', true), ''), '0')::integer;
    changes text;
    changed_zone text;
    changed_rows bigint;
    owners text[];
    plain boolean;
    payload text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('valis_zone_changed', '');
        PERFORM pg_notify('valis_zone_owners_changed', '');
        RETURN NULL;
    END IF;
    changes := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT zone, owner FROM valis_new_rows'
        WHEN 'DELETE' THEN 'SELECT zone, owner FROM valis_old_rows'
        ELSE 'SELECT zone, owner FROM valis_new_rows '
             'UNION ALL SELECT zone, owner FROM valis_old_rows'
    END;
    FOR changed_zone, changed_rows IN EXECUTE
        'SELECT zone, count(*) FROM (' || changes || ') AS c GROUP BY zone'
    LOOP
        payload := changed_zone;
        IF changed_rows <= max_rows AND named < max_owners THEN
            EXECUTE 'SELECT array_agg(DISTINCT lower(owner COLLATE "C")), '
                    'bool_and(owner ~ ''^[ -~]+$'' AND strpos(owner, ''\'') = 0 '
                    'AND owner <> ''.'') '
                    'FROM (' || changes || ') AS c WHERE zone = $1'
                INTO owners, plain USING changed_zone;
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

-- Migration 0001's function, now signalling on both channels (zones table, TRUNCATE).
CREATE OR REPLACE FUNCTION valis_notify_zone_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('valis_zone_changed', '');
        PERFORM pg_notify('valis_zone_owners_changed', '');
        RETURN NULL;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        FOR changed IN EXECUTE format('SELECT DISTINCT %I FROM valis_new_rows', TG_ARGV[0]) LOOP
            PERFORM pg_notify('valis_zone_changed', changed);
            PERFORM pg_notify('valis_zone_owners_changed', changed);
        END LOOP;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        FOR changed IN EXECUTE format('SELECT DISTINCT %I FROM valis_old_rows', TG_ARGV[0]) LOOP
            PERFORM pg_notify('valis_zone_changed', changed);
            PERFORM pg_notify('valis_zone_owners_changed', changed);
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER records_notify_insert ON records;
DROP TRIGGER records_notify_update ON records;
DROP TRIGGER records_notify_delete ON records;

CREATE TRIGGER records_notify_insert AFTER INSERT ON records
    REFERENCING NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_record_change();
CREATE TRIGGER records_notify_update AFTER UPDATE ON records
    REFERENCING OLD TABLE AS valis_old_rows NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_record_change();
CREATE TRIGGER records_notify_delete AFTER DELETE ON records
    REFERENCING OLD TABLE AS valis_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_record_change();
