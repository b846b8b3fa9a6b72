-- A probe, not a migration (benchmarks/pg_change_cost.py --cold --variant): the shipped
-- seal (migration 0023) raising no serial, so neither writing the SOA row again nor
-- netting the SOA pair: an upper bound for what a serial kept outside the SOA row saves.
CREATE OR REPLACE FUNCTION public.valis_journal_seal()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
    IF false THEN  -- the probe: never raised (0023: IF NOT valis_serial_gt(serial, before))
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
$function$;
