-- The journal trigger of migration 0006, netting each statement's rows against the
-- transaction's entry by plans that stay near-linear whatever the statistics say.
--
-- 0006 netted with a DELETE ... USING join and a NOT EXISTS against the rows it had just
-- cancelled. Neither a transition table nor a CTE has statistics, and zone_journal_records
-- churns (an import of a zone that exists removes and adds every row in one transaction),
-- so the planner could pick a nested loop whose inner side was a full scan: re-importing a
-- zone of 10^5 records with one change took over 20 minutes where a hash join takes a
-- second or two.
--
-- Here each direction is one statement built on a FULL JOIN of the statement's rows with
-- the entry's rows of the other direction. PostgreSQL has no nested-loop FULL JOIN: it
-- runs as a hash or merge join whatever the estimates. The rows it paired are cancelled by
-- their ctid (a TID scan, one lookup each) and the statement's rows it left unpaired are
-- journalled. The changed zones are read from the transition table alone (a grouping, no
-- join) and each is checked against zones by its key.
--
-- Netting is unchanged: a removed row and an added row cancel when their owners match
-- lowercased in ASCII and their type, TTL and data match.

CREATE OR REPLACE FUNCTION valis_journal_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    side text;
    adding boolean;
    changed_zone text;
    before bigint;
    entry_id bigint;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM zone_journal;
        RETURN NULL;
    END IF;
    -- The removed rows first (an UPDATE's old SOA gives its entry the serial before).
    FOREACH side IN ARRAY CASE TG_OP
        WHEN 'INSERT' THEN ARRAY['valis_new_rows']
        WHEN 'DELETE' THEN ARRAY['valis_old_rows']
        ELSE ARRAY['valis_old_rows', 'valis_new_rows']
    END LOOP
        adding := side = 'valis_new_rows';
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
            -- $1 the entry, $2 whether these rows were added, $3 the zone.
            EXECUTE format($net$
                WITH paired AS MATERIALIZED (
                    SELECT g.owner, g.rtype, g.ttl, g.rdata, j.ctid AS held
                    FROM (SELECT owner, rtype, ttl, rdata FROM %I WHERE zone = $3) AS g
                    FULL JOIN (SELECT ctid, owner, rtype, ttl, rdata FROM zone_journal_records
                               WHERE entry = $1 AND added <> $2) AS j
                    ON lower(j.owner COLLATE "C") = lower(g.owner COLLATE "C")
                        AND j.rtype = g.rtype AND j.ttl = g.ttl AND j.rdata = g.rdata
                ), cancelled AS (
                    DELETE FROM zone_journal_records
                    WHERE ctid = ANY (ARRAY(SELECT held FROM paired
                                            WHERE owner IS NOT NULL AND held IS NOT NULL))
                        AND entry = $1
                )
                INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
                SELECT $1, $2, owner, rtype, ttl, rdata FROM paired
                WHERE owner IS NOT NULL AND held IS NULL
            $net$, side) USING entry_id, adding, changed_zone;
        END LOOP;
    END LOOP;
    RETURN NULL;
END
$$;
