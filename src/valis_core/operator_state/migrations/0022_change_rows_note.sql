-- A change's rows carried to the zone sources by the seal, and a change's journal and seal
-- in fewer statements: a live change costs the node less.
--
-- Through 0021 a zone source heard which owners a change named (valis_zone_owners_changed)
-- and read their rows back: a round trip to its query backend, woken on the node's busy
-- core, for every change (benchmarks/dns_qps.py --changes-per-second). Here:
--
--   * The seal, after it raised the serial, sends on valis_zone_rows the zone, the owners
--     its entry's journal rows name and every row those owners hold now (JSON; see
--     valis_notify_zone_rows). It reads them holding the zone's row lock, which every
--     seal of that zone takes and which is held to the commit, so no other transaction
--     changes the zone between the read and this commit: the rows are those committed,
--     and notes are delivered in commit order, each after its commit. A source that
--     applies them in order holds what a read after the commit would have given, for
--     those owners; the statements' owner notes still come first, and a source reads
--     only the owners no later rows note covered.
--   * A change of instance_fence sends a note on valis_fence_changed. A fence claimed
--     by another instance commits before any change made under it, so its note comes
--     before their rows notes: a source that reads the fence before applying anything
--     after such a note never serves its successor's data, as a source that read the
--     fence after every read of rows did.
--   * The journal trigger reads a one-row side's row and the side's size in one query,
--     and an UPDATE's old and new row together. It looks its entry up first, and only
--     when the transaction has none reads whether the zone exists and the serial before
--     (one query). An entry made by this statement holds nothing to net against, so the
--     rows go in without netting: an UPDATE's old and new row net only against each
--     other, and both go in by one INSERT unless they are equal.
--   * The seal reads its entry and locks the zone in one statement, then the SOA and the
--     two facts it decides on (the entry holds rows; another version took the serial) in
--     one more, in a snapshot taken after the lock, as before, and nets the SOA it
--     replaced and the SOA it wrote into its entry in one statement.
--
-- The journal, the records and the owner notes are those of 0013 after any transactions
-- (tests/scenario/test_zone_journal_one_row.py runs the same ones on a database at 0013
-- and on one upgraded to this).

-- The rows note of a sealed entry: the zone, the owners its journal rows name (lowercased
-- in ASCII) and every row those owners hold now, read under the seal's lock of the zone.
-- Sent only when every owner is plain (printable ASCII, no escape, not the root) and the
-- payload fits a note; otherwise the statements' owner notes stand alone. Each owner is
-- read by equality, a plan PL/pgSQL keeps: one read of them all by = ANY (owners) was
-- planned again at every seal, and cost a change about 0.3 ms of the writer's CPU
-- (benchmarks/pg_change_cost.py).
CREATE FUNCTION valis_notify_zone_rows(entry_id bigint, changed_zone text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    max_owners constant integer := 64;
    owners text[];
    plain boolean;
    one text;
    held text;
    found text[] := '{}';
    payload text;
BEGIN
    SELECT array_agg(DISTINCT lower(owner COLLATE "C")),
           bool_and(owner ~ '^[ -~]+$' AND strpos(owner, '\') = 0 AND owner <> '.')
        INTO owners, plain FROM zone_journal_records WHERE entry = entry_id;
    IF NOT plain OR cardinality(owners) > max_owners THEN
        RETURN;
    END IF;
    FOREACH one IN ARRAY owners LOOP
        SELECT string_agg(json_build_array(r.owner, r.rtype, r.ttl, r.rdata)::text, ',')
            INTO held FROM records r
            WHERE r.zone = changed_zone AND lower(r.owner COLLATE "C") = one;
        found := found || held;
    END LOOP;
    payload := '{"zone":' || to_json(changed_zone)::text || ',"owners":'
        || to_json(owners)::text || ',"rows":[' || array_to_string(found, ',') || ']}';
    IF octet_length(payload) <= 7900 THEN
        PERFORM pg_notify('valis_zone_rows', payload);
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
                -- The seal's own UPDATE of the SOA row: the seal journals it.
                RETURN NULL;
            END IF;
            IF o_zone = n_zone THEN
                changed_zone := o_zone;
                SELECT id INTO entry_id FROM zone_journal
                    WHERE zone = changed_zone AND txid = pg_current_xact_id();
                IF FOUND THEN
                    PERFORM valis_journal_net_row(entry_id, false, o_owner, o_rtype, o_ttl,
                                                  o_rdata);
                    PERFORM valis_journal_net_row(entry_id, true, n_owner, n_rtype, n_ttl,
                                                  n_rdata);
                    RETURN NULL;
                END IF;
                -- The serial before: the SOA this statement removed, else the zone's now.
                SELECT EXISTS (SELECT 1 FROM zones WHERE name = changed_zone),
                       coalesce(CASE WHEN o_rtype = 'SOA' THEN valis_soa_serial(o_rdata) END,
                                (SELECT valis_soa_serial(r.rdata) FROM records r
                                    WHERE r.zone = changed_zone AND r.rtype = 'SOA'))
                    INTO zone_exists, before;
                IF NOT zone_exists THEN
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
            SELECT id INTO entry_id FROM zone_journal
                WHERE zone = changed_zone AND txid = pg_current_xact_id();
            IF FOUND THEN
                PERFORM valis_journal_net_row(entry_id, adding, o_owner, o_rtype, o_ttl,
                                              o_rdata);
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
            CONTINUE WHEN NOT zone_exists;
            INSERT INTO zone_journal (zone, old_serial) VALUES (changed_zone, before)
                RETURNING id INTO entry_id;
            INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
                VALUES (entry_id, adding, o_owner, o_rtype, o_ttl, o_rdata);
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
        RETURN NULL;  -- the zone was deleted later in the transaction
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
    PERFORM valis_notify_zone_rows(NEW.id, sealed_zone);
    RETURN NULL;
END
$$;

-- Every change of the fence is noted, in commit order with the rows notes: a zone source
-- that hears one reads the fence before it applies anything after it.
CREATE FUNCTION valis_notify_fence_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('valis_fence_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER instance_fence_notify AFTER INSERT OR UPDATE OR DELETE ON instance_fence
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_fence_change();
CREATE TRIGGER instance_fence_notify_truncate AFTER TRUNCATE ON instance_fence
    FOR EACH STATEMENT EXECUTE FUNCTION valis_notify_fence_change();
