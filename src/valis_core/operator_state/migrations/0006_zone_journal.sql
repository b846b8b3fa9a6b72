-- The change journal of each zone, for incremental transfers (RFC 1995 IXFR), and the
-- serial discipline that makes it sound: every committed change of a zone's records is
-- one journal entry, its serial before and after and the records it removed and added,
-- written by triggers in the transaction that made the change. Triggers catch every
-- writer alike: an operator import, the owner terminus, an operator's own SQL.
--
-- One entry per zone per transaction. Each statement on records adds its removed and
-- added rows to the transaction's entry, netted: a row removed and then put back as it
-- was (an import's DELETE of the whole zone, then its COPY) is no change. At commit a
-- deferred trigger seals the entry: when the transaction changed the zone's records but
-- did not raise its SOA serial (RFC 1982), the serial is raised there, by the zone's
-- serial policy ('unixtime', 'dateserial'; 'increment', 'keep' and no policy add one,
-- skipping 0), so no two versions of a zone share a serial whoever wrote them. The
-- import verb and the owner terminus raise the serial themselves (the import by the same
-- policies, in valis_core.dns.serial), so the seal only adds its own raise for writers
-- that did not. An entry whose changes netted to nothing is dropped.
--
-- The journal is pruned by the node holding the fence, by age and by size (site facts
-- VALIS_JOURNAL_MAX_AGE, VALIS_JOURNAL_MAX_RECORDS); a secondary whose serial the
-- journal no longer reaches is sent the whole zone.

CREATE FUNCTION valis_serial_gt(a bigint, b bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT a <> b AND ((a < b AND b - a > 2147483648) OR (a > b AND a - b < 2147483648))
$$;

CREATE FUNCTION valis_next_serial(s bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN (s + 1) % 4294967296 = 0 THEN 1 ELSE (s + 1) % 4294967296 END
$$;

-- The serial a change that did not raise ``stored`` gets under ``policy`` at ``at``:
-- valis_core.dns.serial.choose_serial's rules for a changed zone whose file serial did not
-- go up, with 'keep' and no policy taken as 'increment'.
CREATE FUNCTION valis_policy_serial(stored bigint, policy text, at timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN candidate IS NOT NULL AND valis_serial_gt(candidate, stored) THEN candidate
        ELSE valis_next_serial(stored)
    END
    FROM (SELECT CASE policy
        WHEN 'unixtime' THEN floor(extract(epoch FROM at))::bigint % 4294967296
        WHEN 'dateserial' THEN to_char(at AT TIME ZONE 'UTC', 'YYYYMMDD')::bigint * 100
    END AS candidate) AS c
$$;

-- The serial field of an SOA's presentation text (NULL when it is not a plain number).
CREATE FUNCTION valis_soa_serial(rdata text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN f[3] ~ '^[0-9]{1,10}$' THEN f[3]::bigint END
    FROM (SELECT regexp_split_to_array(btrim(rdata), '\s+') AS f) AS s
$$;

CREATE TABLE zone_journal (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    zone text NOT NULL REFERENCES zones (name) ON DELETE CASCADE,
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    old_serial bigint,
    new_serial bigint,
    committed_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (zone, txid)
);
COMMENT ON COLUMN zone_journal.old_serial IS 'the serial before the change; NULL: the zone had no SOA';
COMMENT ON COLUMN zone_journal.new_serial IS 'the serial after; set when the transaction commits';

CREATE INDEX zone_journal_by_zone ON zone_journal (zone, id);

CREATE TABLE zone_journal_records (
    entry bigint NOT NULL REFERENCES zone_journal (id) ON DELETE CASCADE,
    added boolean NOT NULL,
    owner text NOT NULL,
    rtype text NOT NULL,
    ttl integer NOT NULL,
    rdata text NOT NULL
);

CREATE INDEX zone_journal_records_by_entry
    ON zone_journal_records (entry, lower(owner COLLATE "C"), rtype);

-- The transaction's entry for ``changed_zone``, made when this is its first change there,
-- with ``before`` (the serial the zone had) as its old serial.
CREATE FUNCTION valis_journal_entry(changed_zone text, before bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    found_id bigint;
BEGIN
    SELECT id INTO found_id FROM zone_journal
        WHERE zone = changed_zone AND txid = pg_current_xact_id();
    IF found_id IS NULL THEN
        INSERT INTO zone_journal (zone, old_serial) VALUES (changed_zone, before)
            RETURNING id INTO found_id;
    END IF;
    RETURN found_id;
END
$$;

CREATE FUNCTION valis_journal_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed_zone text;
    before bigint;
    entry_id bigint;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM zone_journal;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        FOR changed_zone IN SELECT DISTINCT o.zone FROM valis_old_rows o
            JOIN zones z ON z.name = o.zone
        LOOP
            -- The serial before: the SOA this statement removed, else the zone's now.
            SELECT coalesce(
                (SELECT valis_soa_serial(o.rdata) FROM valis_old_rows o
                    WHERE o.zone = changed_zone AND o.rtype = 'SOA' LIMIT 1),
                (SELECT valis_soa_serial(r.rdata) FROM records r
                    WHERE r.zone = changed_zone AND r.rtype = 'SOA'))
                INTO before;
            entry_id := valis_journal_entry(changed_zone, before);
            WITH gone AS (
                SELECT owner, rtype, ttl, rdata FROM valis_old_rows WHERE zone = changed_zone
            ), cancelled AS (
                DELETE FROM zone_journal_records j USING gone g
                WHERE j.entry = entry_id AND j.added
                    AND lower(j.owner COLLATE "C") = lower(g.owner COLLATE "C")
                    AND j.rtype = g.rtype AND j.rdata = g.rdata AND j.ttl = g.ttl
                RETURNING j.owner, j.rtype, j.ttl, j.rdata
            )
            INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
            SELECT entry_id, false, g.owner, g.rtype, g.ttl, g.rdata FROM gone g
            WHERE NOT EXISTS (
                SELECT 1 FROM cancelled c
                WHERE lower(c.owner COLLATE "C") = lower(g.owner COLLATE "C")
                    AND c.rtype = g.rtype AND c.rdata = g.rdata AND c.ttl = g.ttl);
        END LOOP;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        FOR changed_zone IN SELECT DISTINCT n.zone FROM valis_new_rows n
            JOIN zones z ON z.name = n.zone
        LOOP
            -- The serial before: the SOA this statement did not write (an UPDATE's old SOA
            -- was taken above, and then the entry exists already).
            SELECT valis_soa_serial(r.rdata) INTO before FROM records r
                WHERE r.zone = changed_zone AND r.rtype = 'SOA'
                    AND NOT EXISTS (SELECT 1 FROM valis_new_rows n WHERE n.id = r.id);
            entry_id := valis_journal_entry(changed_zone, before);
            WITH came AS (
                SELECT owner, rtype, ttl, rdata FROM valis_new_rows WHERE zone = changed_zone
            ), cancelled AS (
                DELETE FROM zone_journal_records j USING came g
                WHERE j.entry = entry_id AND NOT j.added
                    AND lower(j.owner COLLATE "C") = lower(g.owner COLLATE "C")
                    AND j.rtype = g.rtype AND j.rdata = g.rdata AND j.ttl = g.ttl
                RETURNING j.owner, j.rtype, j.ttl, j.rdata
            )
            INSERT INTO zone_journal_records (entry, added, owner, rtype, ttl, rdata)
            SELECT entry_id, true, g.owner, g.rtype, g.ttl, g.rdata FROM came g
            WHERE NOT EXISTS (
                SELECT 1 FROM cancelled c
                WHERE lower(c.owner COLLATE "C") = lower(g.owner COLLATE "C")
                    AND c.rtype = g.rtype AND c.rdata = g.rdata AND c.ttl = g.ttl);
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER records_journal_insert AFTER INSERT ON records
    REFERENCING NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_journal_record_change();
CREATE TRIGGER records_journal_update AFTER UPDATE ON records
    REFERENCING OLD TABLE AS valis_old_rows NEW TABLE AS valis_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_journal_record_change();
CREATE TRIGGER records_journal_delete AFTER DELETE ON records
    REFERENCING OLD TABLE AS valis_old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION valis_journal_record_change();
CREATE TRIGGER records_journal_truncate AFTER TRUNCATE ON records
    FOR EACH STATEMENT EXECUTE FUNCTION valis_journal_record_change();

-- At commit: raise the serial if the transaction did not, and record the serial after.
CREATE FUNCTION valis_journal_seal() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sealed zone_journal%ROWTYPE;
    soa_id bigint;
    soa_rdata text;
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
    SELECT id, rdata INTO soa_id, soa_rdata FROM records
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
        UPDATE records SET rdata = array_to_string(fields, ' ') WHERE id = soa_id;
    END IF;
    UPDATE zone_journal SET old_serial = sealed.old_serial, new_serial = serial,
        committed_at = now() WHERE id = sealed.id;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER zone_journal_seal AFTER INSERT ON zone_journal
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION valis_journal_seal();
