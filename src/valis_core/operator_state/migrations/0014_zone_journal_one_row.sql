-- The journal trigger of migration 0013 with a one-row path, and the commit-time seal
-- journalling its own serial raise, so a change of one record costs PostgreSQL less.
--
-- A live change is mostly one autocommitted statement on one record, and its serial
-- raise at commit is one more. Measured with benchmarks/pg_change_cost.py under 0013: of
-- about 1.9 ms of backend CPU per change, 0013's trigger took about 0.45 ms on the
-- change and, run again for the seal's UPDATE of the SOA row, most of the seal's 0.75 ms:
-- each run reads the changed zones by a dynamic grouping, looks up the serial before
-- and the entry, and nets through a hash FULL JOIN, for two rows.
--
-- Here:
--   * A statement side (its removed or its added rows) of exactly one row is netted by
--     valis_journal_net_row: an index lookup for the entry's rows of the other direction
--     that match it (owner lowercased in ASCII, type, TTL, data), all of them cancelled,
--     and the row journalled only when none matched. That is what 0011's FULL JOIN does
--     for a side of one row; sides of more rows still take the FULL JOIN. The serial
--     before and the entry are found as 0013 finds them.
--   * The seal marks its own UPDATE of the SOA row (the transaction-local setting
--     valis.journal_sealing holds that row's id while the UPDATE runs), the trigger
--     returns at once for a one-row UPDATE of exactly that row, and the seal nets the SOA
--     it replaced and the SOA it wrote into its entry itself, by valis_journal_net_row:
--     the same two netting steps the trigger would have taken. The owner-change NOTIFY
--     trigger still runs for the seal's UPDATE (it names the apex), unchanged. The
--     setting is the seal's alone: a writer setting it would keep its own UPDATE of
--     that row out of the journal, as disabling the trigger would.
--   * The seal's check for another committed version of the zone holding the serial it
--     found (0006: a transaction that changed the zone alongside this one and committed
--     first) read every journal entry of the zone, so a change cost more the longer the
--     journal: about 1.5 ms more of backend CPU per change with 5,000 entries, where the
--     default limit (VALIS_JOURNAL_MAX_RECORDS, 100000 rows; a one-record change journals
--     four) keeps up to 25,000. An index on (zone, new_serial) makes it one lookup.
-- The journal's content, and so every IXFR and every patch a resident applies, is the
-- same as under 0013 (tests/scenario/test_zone_journal_one_row.py compares the two).

CREATE INDEX zone_journal_by_serial ON zone_journal (zone, new_serial);

-- Nets one row into ``entry_id``: the entry's rows of the other direction equal to it
-- (owner lowercased in ASCII) are cancelled; when there were none, the row is journalled.
CREATE FUNCTION valis_journal_net_row(
    entry_id bigint, adding boolean, row_owner text, row_rtype text, row_ttl integer,
    row_rdata text
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM zone_journal_records
        WHERE entry = entry_id AND lower(owner COLLATE "C") = lower(row_owner COLLATE "C")
            AND rtype = row_rtype AND added <> adding AND ttl = row_ttl
            AND rdata = row_rdata;
    IF NOT FOUND THEN
        INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
            VALUES (entry_id, adding, row_owner, row_rtype, row_ttl, row_rdata);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION valis_journal_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    side text;
    adding boolean;
    changed_zone text;
    before bigint;
    entry_id bigint;
    side_rows bigint;
    one records%ROWTYPE;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM zone_journal;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND coalesce(current_setting('valis.journal_sealing', true), '') <> ''
    THEN
        -- The seal's own UPDATE of the SOA row: the seal journals it (valis_journal_seal).
        SELECT count(*) INTO side_rows FROM (SELECT 1 FROM valis_old_rows LIMIT 2) AS s;
        IF side_rows = 1 AND (SELECT o.id::text FROM valis_old_rows o)
                = current_setting('valis.journal_sealing')
            AND (SELECT n.id::text FROM valis_new_rows n)
                = current_setting('valis.journal_sealing')
        THEN
            RETURN NULL;
        END IF;
    END IF;
    -- The removed rows first (an UPDATE's old SOA gives its entry the serial before).
    FOREACH side IN ARRAY CASE TG_OP
        WHEN 'INSERT' THEN ARRAY['valis_new_rows']
        WHEN 'DELETE' THEN ARRAY['valis_old_rows']
        ELSE ARRAY['valis_old_rows', 'valis_new_rows']
    END LOOP
        adding := side = 'valis_new_rows';
        IF adding THEN
            SELECT count(*) INTO side_rows FROM (SELECT 1 FROM valis_new_rows LIMIT 2) AS s;
        ELSE
            SELECT count(*) INTO side_rows FROM (SELECT 1 FROM valis_old_rows LIMIT 2) AS s;
        END IF;
        IF side_rows = 1 THEN
            -- One row: 0013's steps for that row, the netting by index lookups.
            IF adding THEN
                SELECT * INTO one FROM valis_new_rows;
            ELSE
                SELECT * INTO one FROM valis_old_rows;
            END IF;
            IF adding AND one.zone = changed_zone AND entry_id IS NOT NULL THEN
                -- An UPDATE within one zone: its removed row found the entry just now.
                PERFORM valis_journal_net_row(entry_id, adding, one.owner, one.rtype, one.ttl,
                                              one.rdata);
                CONTINUE;
            END IF;
            changed_zone := one.zone;
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM zones WHERE name = changed_zone);
            IF adding THEN
                SELECT valis_soa_serial(r.rdata) INTO before FROM records r
                    WHERE r.zone = changed_zone AND r.rtype = 'SOA' AND r.id <> one.id;
            ELSE
                SELECT coalesce(
                    CASE WHEN one.rtype = 'SOA' THEN valis_soa_serial(one.rdata) END,
                    (SELECT valis_soa_serial(r.rdata) FROM records r
                        WHERE r.zone = changed_zone AND r.rtype = 'SOA'))
                    INTO before;
            END IF;
            entry_id := valis_journal_entry(changed_zone, before);
            PERFORM valis_journal_net_row(entry_id, adding, one.owner, one.rtype, one.ttl,
                                          one.rdata);
            CONTINUE;
        END IF;
        FOR changed_zone IN EXECUTE format('SELECT zone FROM %I GROUP BY zone', side) LOOP
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM zones WHERE name = changed_zone);
            IF adding THEN
                -- The serial before: the SOA this statement did not write (an UPDATE's old
                -- SOA was taken with its removed rows, and then the entry exists already).
                SELECT valis_soa_serial(r.rdata) INTO before FROM records r
                    WHERE r.zone = changed_zone AND r.rtype = 'SOA'
                        AND NOT EXISTS (SELECT 1 FROM valis_new_rows n WHERE n.id = r.id);
            ELSE
                -- The serial before: the SOA this statement removed, else the zone's now.
                SELECT coalesce(
                    (SELECT valis_soa_serial(o.rdata) FROM valis_old_rows o
                        WHERE o.zone = changed_zone AND o.rtype = 'SOA' LIMIT 1),
                    (SELECT valis_soa_serial(r.rdata) FROM records r
                        WHERE r.zone = changed_zone AND r.rtype = 'SOA'))
                    INTO before;
            END IF;
            entry_id := valis_journal_entry(changed_zone, before);
            IF adding THEN
                WITH paired AS MATERIALIZED (
                    SELECT g.owner, g.rtype, g.ttl, g.rdata, j.ctid AS held
                    FROM (SELECT owner, rtype, ttl, rdata FROM valis_new_rows
                          WHERE zone = changed_zone) AS g
                    FULL JOIN (SELECT ctid, owner, rtype, ttl, rdata FROM zone_journal_records
                               WHERE entry = entry_id AND added <> adding) AS j
                    ON lower(j.owner COLLATE "C") = lower(g.owner COLLATE "C")
                        AND j.rtype = g.rtype AND j.ttl = g.ttl AND j.rdata = g.rdata
                ), cancelled AS (
                    DELETE FROM zone_journal_records
                    WHERE ctid = ANY (ARRAY(SELECT held FROM paired
                                            WHERE owner IS NOT NULL AND held IS NOT NULL))
                        AND entry = entry_id
                )
                INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
                SELECT entry_id, adding, owner, rtype, ttl, rdata FROM paired
                WHERE owner IS NOT NULL AND held IS NULL;
            ELSE
                WITH paired AS MATERIALIZED (
                    SELECT g.owner, g.rtype, g.ttl, g.rdata, j.ctid AS held
                    FROM (SELECT owner, rtype, ttl, rdata FROM valis_old_rows
                          WHERE zone = changed_zone) AS g
                    FULL JOIN (SELECT ctid, owner, rtype, ttl, rdata FROM zone_journal_records
                               WHERE entry = entry_id AND added <> adding) AS j
                    ON lower(j.owner COLLATE "C") = lower(g.owner COLLATE "C")
                        AND j.rtype = g.rtype AND j.ttl = g.ttl AND j.rdata = g.rdata
                ), cancelled AS (
                    DELETE FROM zone_journal_records
                    WHERE ctid = ANY (ARRAY(SELECT held FROM paired
                                            WHERE owner IS NOT NULL AND held IS NOT NULL))
                        AND entry = entry_id
                )
                INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
                SELECT entry_id, adding, owner, rtype, ttl, rdata FROM paired
                WHERE owner IS NOT NULL AND held IS NULL;
            END IF;
        END LOOP;
    END LOOP;
    RETURN NULL;
END
$$;

-- Migration 0006's seal, journalling its own serial raise (the SOA it replaced removed,
-- the SOA it wrote added, each netted against the entry) instead of the journal trigger.
CREATE OR REPLACE FUNCTION valis_journal_seal() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sealed zone_journal%ROWTYPE;
    soa_id bigint;
    soa_owner text;
    soa_ttl integer;
    soa_rdata text;
    raised_rdata text;
    fields text[];
    serial bigint;
    base bigint;
    policy text;
BEGIN
    SELECT * INTO sealed FROM zone_journal WHERE id = NEW.id;
    IF NOT FOUND THEN
        RETURN NULL;  -- the zone was deleted later in the transaction
    END IF;
    -- Seals of one zone run one at a time (NO KEY UPDATE leaves the foreign keys' share
    -- locks alone), each reading the serial the last committed one left.
    SELECT serial_policy INTO policy FROM zones WHERE name = sealed.zone FOR NO KEY UPDATE;
    SELECT id, owner, ttl, rdata INTO soa_id, soa_owner, soa_ttl, soa_rdata FROM records
        WHERE zone = sealed.zone AND rtype = 'SOA';
    serial := valis_soa_serial(soa_rdata);
    IF serial IS NULL OR sealed.old_serial IS NULL  -- a new zone: no IXFR starts before it
        OR NOT EXISTS (SELECT 1 FROM zone_journal_records WHERE entry = sealed.id)
    THEN
        DELETE FROM zone_journal WHERE id = sealed.id;
        RETURN NULL;
    END IF;
    -- Another transaction that changed the zone alongside this one committed first: this
    -- change follows its version, whose serial it must not reuse.
    IF EXISTS (SELECT 1 FROM zone_journal WHERE zone = sealed.zone AND id <> sealed.id
               AND new_serial = serial) THEN
        sealed.old_serial := serial;
    END IF;
    IF NOT valis_serial_gt(serial, sealed.old_serial) THEN
        base := serial;
        IF valis_serial_gt(sealed.old_serial, serial) THEN
            base := sealed.old_serial;
        END IF;
        serial := valis_policy_serial(base, policy, now());
        fields := regexp_split_to_array(btrim(soa_rdata), '\s+');
        fields[3] := serial::text;
        raised_rdata := array_to_string(fields, ' ');
        PERFORM set_config('valis.journal_sealing', soa_id::text, true);
        UPDATE records SET rdata = raised_rdata WHERE id = soa_id;
        PERFORM set_config('valis.journal_sealing', '', true);
        PERFORM valis_journal_net_row(sealed.id, false, soa_owner, 'SOA', soa_ttl, soa_rdata);
        PERFORM valis_journal_net_row(sealed.id, true, soa_owner, 'SOA', soa_ttl,
                                      raised_rdata);
    END IF;
    -- clock_timestamp(), not now() (the transaction's start): the commit -> wire latency
    -- a node measures from here (valis_commit_to_wire_seconds) starts at the commit.
    UPDATE zone_journal SET old_serial = sealed.old_serial, new_serial = serial,
        committed_at = clock_timestamp() WHERE id = sealed.id;
    RETURN NULL;
END
$$;
