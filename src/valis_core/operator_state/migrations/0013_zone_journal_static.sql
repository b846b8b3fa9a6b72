-- The journal trigger of migration 0011 with static SQL, so PL/pgSQL keeps its plans.
--
-- 0011 built each statement's netting as a dynamic EXECUTE (the transition table's name
-- by format), which PostgreSQL parses and plans anew on every run: for a one-row change
-- (its UPDATE, then the seal's serial raise at commit, each netting two sides) that was
-- most of the trigger's cost. Measured on two busy cores: an UPDATE of one record and
-- its COMMIT took 3.1 ms of the server's time with 0011's function, 1.9 ms with this one.
-- Under a steady stream of changes that time is taken from whatever shares PostgreSQL's
-- core (benchmarks/dns_qps.py --changes-per-second: dnsperf).
--
-- The statements are 0011's, word for word, but for the transition table named outright
-- in one branch per side (each branch runs only in a trigger that has its table) and the
-- parameters given as PL/pgSQL variables. Their plans stay near-linear whatever they are
-- cached as: the netting is still a FULL JOIN, which PostgreSQL runs only as a hash or a
-- merge join. The changed zones are still read with a dynamic statement (one small
-- grouping per statement side). Netting is unchanged.

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
