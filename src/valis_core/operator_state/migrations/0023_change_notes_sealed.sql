-- A change's notes sent by its seal alone: a live change costs the node less.
--
-- Through 0022 every statement that changed records sent its own owner note (and the bare
-- zone on valis_zone_changed), the seal's UPDATE of the SOA sent another for the apex, and
-- the seal then sent the rows note: three notes, and the owner notes' trigger run twice,
-- for a one-row change (about 0.17 ms of the writer's CPU on the node's busy core,
-- docs/performance.md). Here:
--
--   * The journal trigger, which runs first (triggers of one event fire in name order),
--     tells the owner notes' trigger whether every zone the statement changed holds an
--     unsealed journal entry of this transaction (valis.notes_covered, transaction-local,
--     consumed by the notes' trigger). Such a statement sends no note of its own: its
--     entry's seal notes it. A statement any part of which is not so covered (a zone with
--     no row in zones, an entry already sealed by SET CONSTRAINTS ... IMMEDIATE), and a
--     TRUNCATE, send their notes as before.
--   * The seal sends, for the owners its entry's journal rows name (the apex among them
--     when it raised the serial), in this order: the zone on valis_zone_changed; on
--     valis_zone_owners_changed the owners, or the zone alone when an owner is not plain,
--     there are more than 256, or they do not fit a note; then, as 0022 did, the rows
--     note when they number at most 64 and fit. A zone source of any version since 0003
--     hears every owner a change named; one of 0022 or later takes them from the rows
--     note that follows, which covers the names note before it. An entry the seal drops
--     (a new zone, a zone without an SOA) still sends the first two notes; an entry that
--     netted to nothing changed nothing and sends none; an entry deleted before its seal
--     (its zone deleted, or the journal emptied by hand in the same transaction) has
--     its zone noted whole.
--
-- The journal and the records are those of 0013 after any transactions
-- (tests/scenario/test_zone_journal_one_row.py), and every owner whose rows a transaction
-- changed is named on valis_zone_owners_changed.

-- The notes of a sealed entry, sent holding the zone's row lock (see 0022's rows note).
CREATE FUNCTION valis_notify_sealed(entry_id bigint, changed_zone text, with_rows boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    max_named constant integer := 256;
    max_carried constant integer := 64;
    owners text[];
    plain boolean;
    names text := changed_zone;
    one text;
    held text;
    found text[] := '{}';
    payload text;
    noted text;
BEGIN
    SELECT array_agg(DISTINCT lower(owner COLLATE "C")),
           bool_and(owner ~ '^[ -~]+$' AND strpos(owner, '\') = 0 AND owner <> '.')
        INTO owners, plain FROM zone_journal_records WHERE entry = entry_id;
    noted := pg_notify('valis_zone_changed', changed_zone);
    IF plain AND cardinality(owners) <= max_named THEN
        names := changed_zone || E'\n' || array_to_string(owners, E'\n');
        IF octet_length(names) > 7900 THEN
            names := changed_zone;
        END IF;
    END IF;
    noted := pg_notify('valis_zone_owners_changed', names);
    IF NOT with_rows OR names = changed_zone OR cardinality(owners) > max_carried THEN
        RETURN;
    END IF;
    -- Each owner read by equality, a plan PL/pgSQL keeps (0022).
    FOREACH one IN ARRAY owners LOOP
        SELECT string_agg(json_build_array(r.owner, r.rtype, r.ttl, r.rdata)::text, ',')
            INTO held FROM records r
            WHERE r.zone = changed_zone AND lower(r.owner COLLATE "C") = one;
        found := found || held;
    END LOOP;
    payload := '{"zone":' || to_json(changed_zone)::text || ',"owners":'
        || to_json(owners)::text || ',"rows":[' || array_to_string(found, ',') || ']}';
    IF octet_length(payload) <= 7900 THEN
        noted := pg_notify('valis_zone_rows', payload);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION valis_journal_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    side text;
    adding boolean;
    changed_zone text;
    zone_exists boolean;
    before bigint;
    entry_id bigint;
    side_rows bigint;
    uncovered boolean := false;
    sealed boolean;
    noted text;
    o_id bigint; o_zone text; o_owner text; o_rtype text; o_ttl integer; o_rdata text;
    n_zone text; n_owner text; n_rtype text; n_ttl integer; n_rdata text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM zone_journal;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        SELECT (SELECT count(*) FROM (SELECT 1 FROM valis_old_rows LIMIT 2) AS s),
               o.id, o.zone, o.owner, o.rtype, o.ttl, o.rdata,
               n.zone, n.owner, n.rtype, n.ttl, n.rdata
            INTO side_rows, o_id, o_zone, o_owner, o_rtype, o_ttl, o_rdata,
                 n_zone, n_owner, n_rtype, n_ttl, n_rdata
            FROM valis_old_rows o, valis_new_rows n LIMIT 1;
        IF side_rows = 1 THEN
            IF o_id::text = coalesce(current_setting('valis.journal_sealing', true), '') THEN
                -- The seal's own UPDATE of the SOA row: the seal journals it and notes it.
                noted := set_config('valis.notes_covered', '1', true);
                RETURN NULL;
            END IF;
            IF o_zone = n_zone THEN
                changed_zone := o_zone;
                SELECT id, new_serial IS NOT NULL INTO entry_id, sealed FROM zone_journal
                    WHERE zone = changed_zone AND txid = pg_current_xact_id();
                IF FOUND THEN
                    PERFORM valis_journal_net_row(entry_id, false, o_owner, o_rtype, o_ttl,
                                                  o_rdata);
                    PERFORM valis_journal_net_row(entry_id, true, n_owner, n_rtype, n_ttl,
                                                  n_rdata);
                    noted := set_config('valis.notes_covered', CASE WHEN sealed THEN ''
                                                                    ELSE '1' END, true);
                    RETURN NULL;
                END IF;
                -- The serial before: the SOA this statement removed, else the zone's now.
                SELECT EXISTS (SELECT 1 FROM zones WHERE name = changed_zone),
                       coalesce(CASE WHEN o_rtype = 'SOA' THEN valis_soa_serial(o_rdata) END,
                                (SELECT valis_soa_serial(r.rdata) FROM records r
                                    WHERE r.zone = changed_zone AND r.rtype = 'SOA'))
                    INTO zone_exists, before;
                IF NOT zone_exists THEN
                    noted := set_config('valis.notes_covered', '', true);
                    RETURN NULL;
                END IF;
                INSERT INTO zone_journal (zone, old_serial) VALUES (changed_zone, before)
                    RETURNING id INTO entry_id;
                -- A new entry: the two rows net only against each other.
                IF NOT (lower(o_owner COLLATE "C") = lower(n_owner COLLATE "C")
                        AND o_rtype = n_rtype AND o_ttl = n_ttl AND o_rdata = n_rdata) THEN
                    INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
                        VALUES (entry_id, false, o_owner, o_rtype, o_ttl, o_rdata),
                               (entry_id, true, n_owner, n_rtype, n_ttl, n_rdata);
                END IF;
                noted := set_config('valis.notes_covered', '1', true);
                RETURN NULL;
            END IF;
        END IF;
    END IF;
    -- The removed rows first (an UPDATE's old SOA gives its entry the serial before).
    FOREACH side IN ARRAY CASE TG_OP
        WHEN 'INSERT' THEN ARRAY['valis_new_rows']
        WHEN 'DELETE' THEN ARRAY['valis_old_rows']
        ELSE ARRAY['valis_old_rows', 'valis_new_rows']
    END LOOP
        adding := side = 'valis_new_rows';
        IF TG_OP <> 'UPDATE' THEN
            IF adding THEN
                SELECT (SELECT count(*) FROM (SELECT 1 FROM valis_new_rows LIMIT 2) AS s),
                       n.id, n.zone, n.owner, n.rtype, n.ttl, n.rdata
                    INTO side_rows, o_id, o_zone, o_owner, o_rtype, o_ttl, o_rdata
                    FROM valis_new_rows n LIMIT 1;
            ELSE
                SELECT (SELECT count(*) FROM (SELECT 1 FROM valis_old_rows LIMIT 2) AS s),
                       o.id, o.zone, o.owner, o.rtype, o.ttl, o.rdata
                    INTO side_rows, o_id, o_zone, o_owner, o_rtype, o_ttl, o_rdata
                    FROM valis_old_rows o LIMIT 1;
            END IF;
        ELSIF adding AND side_rows = 1 THEN
            -- An UPDATE of one row across zones: its new row.
            o_zone := n_zone; o_owner := n_owner; o_rtype := n_rtype; o_ttl := n_ttl;
            o_rdata := n_rdata;
            SELECT id INTO o_id FROM valis_new_rows;
        END IF;
        IF side_rows = 1 THEN
            -- One row: the entry found or made, the row netted by index lookups (a new
            -- entry holds nothing to net against).
            changed_zone := o_zone;
            SELECT id, new_serial IS NOT NULL INTO entry_id, sealed FROM zone_journal
                WHERE zone = changed_zone AND txid = pg_current_xact_id();
            IF FOUND THEN
                PERFORM valis_journal_net_row(entry_id, adding, o_owner, o_rtype, o_ttl,
                                              o_rdata);
                uncovered := uncovered OR sealed;
                CONTINUE;
            END IF;
            IF adding THEN
                SELECT EXISTS (SELECT 1 FROM zones WHERE name = changed_zone),
                       (SELECT valis_soa_serial(r.rdata) FROM records r
                           WHERE r.zone = changed_zone AND r.rtype = 'SOA' AND r.id <> o_id)
                    INTO zone_exists, before;
            ELSE
                SELECT EXISTS (SELECT 1 FROM zones WHERE name = changed_zone),
                       coalesce(CASE WHEN o_rtype = 'SOA' THEN valis_soa_serial(o_rdata) END,
                                (SELECT valis_soa_serial(r.rdata) FROM records r
                                    WHERE r.zone = changed_zone AND r.rtype = 'SOA'))
                    INTO zone_exists, before;
            END IF;
            IF NOT zone_exists THEN
                uncovered := true;
                CONTINUE;
            END IF;
            INSERT INTO zone_journal (zone, old_serial) VALUES (changed_zone, before)
                RETURNING id INTO entry_id;
            INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
                VALUES (entry_id, adding, o_owner, o_rtype, o_ttl, o_rdata);
            CONTINUE;
        END IF;
        FOR changed_zone IN EXECUTE format('SELECT zone FROM %I GROUP BY zone', side) LOOP
            IF NOT EXISTS (SELECT 1 FROM zones WHERE name = changed_zone) THEN
                uncovered := true;
                CONTINUE;
            END IF;
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
            uncovered := uncovered
                OR (SELECT new_serial IS NOT NULL FROM zone_journal WHERE id = entry_id);
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
    noted := set_config('valis.notes_covered', CASE WHEN uncovered THEN '' ELSE '1' END,
                        true);
    RETURN NULL;
END
$$;

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
    noted text;
BEGIN
    IF TG_OP <> 'TRUNCATE' AND current_setting('valis.notes_covered', true) = '1' THEN
        -- Every zone this statement changed has its journal entry, whose seal notes it.
        noted := set_config('valis.notes_covered', '', true);
        RETURN NULL;
    END IF;
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

CREATE OR REPLACE FUNCTION valis_journal_seal() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sealed_zone text;
    before bigint;
    policy text;
    soa_id bigint;
    soa_owner text;
    soa_ttl integer;
    soa_rdata text;
    journalled boolean;
    taken boolean;
    raised_rdata text;
    fields text[];
    serial bigint;
    base bigint;
BEGIN
    -- Seals of one zone run one at a time (NO KEY UPDATE leaves the foreign keys' share
    -- locks alone), each reading the serial the last committed one left.
    SELECT j.zone, j.old_serial, z.serial_policy INTO sealed_zone, before, policy
        FROM zone_journal j JOIN zones z ON z.name = j.zone
        WHERE j.id = NEW.id FOR NO KEY UPDATE OF z;
    IF NOT FOUND THEN
        -- The entry was deleted later in the transaction (its zone deleted, the journal
        -- emptied by hand): the zone whole is noted, its statements having sent nothing.
        PERFORM pg_notify('valis_zone_changed', NEW.zone);
        PERFORM pg_notify('valis_zone_owners_changed', NEW.zone);
        RETURN NULL;
    END IF;
    -- A statement of its own, so its snapshot is taken after the lock. ``taken``: another
    -- transaction that changed the zone alongside this one committed first, and this
    -- change follows its version, whose serial it must not reuse.
    SELECT r.id, r.owner, r.ttl, r.rdata,
           EXISTS (SELECT 1 FROM zone_journal_records WHERE entry = NEW.id),
           EXISTS (SELECT 1 FROM zone_journal WHERE zone = sealed_zone AND id <> NEW.id
                   AND new_serial = valis_soa_serial(r.rdata))
        INTO soa_id, soa_owner, soa_ttl, soa_rdata, journalled, taken
        FROM (SELECT 1) AS one
        LEFT JOIN records r ON r.zone = sealed_zone AND r.rtype = 'SOA';
    serial := valis_soa_serial(soa_rdata);
    IF serial IS NULL OR before IS NULL  -- a new zone: no IXFR starts before it
        OR NOT journalled
    THEN
        IF journalled THEN
            PERFORM valis_notify_sealed(NEW.id, sealed_zone, false);
        END IF;
        DELETE FROM zone_journal WHERE id = NEW.id;
        RETURN NULL;
    END IF;
    IF taken THEN
        before := serial;
    END IF;
    IF NOT valis_serial_gt(serial, before) THEN
        base := serial;
        IF valis_serial_gt(before, serial) THEN
            base := before;
        END IF;
        serial := valis_policy_serial(base, policy, now());
        fields := regexp_split_to_array(btrim(soa_rdata), '\s+');
        fields[3] := serial::text;
        raised_rdata := array_to_string(fields, ' ');
        PERFORM set_config('valis.journal_sealing', soa_id::text, true);
        UPDATE records SET rdata = raised_rdata WHERE id = soa_id;
        PERFORM set_config('valis.journal_sealing', '', true);
        -- The SOA replaced and the SOA written, each netted against the entry (the raised
        -- serial differs from the one replaced, so neither can cancel the other).
        WITH cancelled AS (
            DELETE FROM zone_journal_records
            WHERE entry = NEW.id AND rtype = 'SOA' AND ttl = soa_ttl
                AND lower(owner COLLATE "C") = lower(soa_owner COLLATE "C")
                AND rdata = CASE WHEN added THEN soa_rdata ELSE raised_rdata END
            RETURNING added
        )
        INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
        SELECT NEW.id, v.added, soa_owner, 'SOA', soa_ttl, v.rdata
        FROM (VALUES (false, soa_rdata), (true, raised_rdata)) AS v (added, rdata)
        WHERE NOT EXISTS (SELECT 1 FROM cancelled c WHERE c.added <> v.added);
    END IF;
    -- clock_timestamp(), not now() (the transaction's start): the commit -> wire latency
    -- a node measures from here (valis_commit_to_wire_seconds) starts at the commit.
    UPDATE zone_journal SET old_serial = before, new_serial = serial,
        committed_at = clock_timestamp() WHERE id = NEW.id;
    PERFORM valis_notify_sealed(NEW.id, sealed_zone, true);
    RETURN NULL;
END
$$;

DROP FUNCTION valis_notify_zone_rows(bigint, text);
