-- A probe, not a migration (benchmarks/pg_change_cost.py --cold --variant): what a
-- one-row change could cost with the checks a correct journal keeps. The entry of the
-- transaction is looked up (the probe stops if one exists) and made only when the zone
-- exists; its rows are held in the entry itself, not in zone_journal_records; at commit the
-- seal locks the zone, checks that no other version holds the serial, raises the SOA,
-- adds the SOA pair to the entry and sends the entry's rows as one note, a diff from one
-- serial to the next, without reading any owner's rows back.
-- Only the probe's change is journalled: any other statement on records is not.
ALTER TABLE zone_journal ADD COLUMN held text[];
CREATE OR REPLACE FUNCTION valis_journal_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted text; entry_id bigint;
    o_id bigint; o_zone text; o_owner text; o_rtype text; o_ttl integer; o_rdata text;
    n_zone text; n_owner text; n_rtype text; n_ttl integer; n_rdata text;
BEGIN
    IF TG_OP <> 'UPDATE' THEN RETURN NULL; END IF;
    SELECT o.id, o.zone, o.owner, o.rtype, o.ttl, o.rdata, n.zone, n.owner, n.rtype, n.ttl, n.rdata
        INTO o_id, o_zone, o_owner, o_rtype, o_ttl, o_rdata, n_zone, n_owner, n_rtype, n_ttl, n_rdata
        FROM valis_old_rows o, valis_new_rows n LIMIT 1;
    IF o_id::text = coalesce(current_setting('valis.journal_sealing', true), '') THEN
        noted := set_config('valis.notes_covered', '1', true);
        RETURN NULL;
    END IF;
    SELECT id INTO entry_id FROM zone_journal WHERE zone = n_zone AND txid = pg_current_xact_id();
    IF FOUND THEN RAISE EXCEPTION 'not in this experiment'; END IF;
    INSERT INTO zone_journal (zone, old_serial, held)
        SELECT n_zone, NULL, ARRAY[json_build_array(false, o_owner, o_rtype, o_ttl, o_rdata)::text,
                                   json_build_array(true, n_owner, n_rtype, n_ttl, n_rdata)::text]
        WHERE EXISTS (SELECT 1 FROM zones WHERE name = n_zone);
    noted := set_config('valis.notes_covered', CASE WHEN FOUND THEN '1' ELSE '' END, true);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION valis_journal_seal() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sealed_zone text; before bigint; policy text; soa_id bigint; soa_owner text;
    soa_ttl integer; soa_rdata text; raised_rdata text; fields text[]; serial bigint;
    noted text; kept text[]; taken boolean;
BEGIN
    SELECT j.zone, j.held, z.serial_policy INTO sealed_zone, kept, policy
        FROM zone_journal j JOIN zones z ON z.name = j.zone
        WHERE j.id = NEW.id FOR NO KEY UPDATE OF z;
    SELECT r.id, r.owner, r.ttl, r.rdata,
           EXISTS (SELECT 1 FROM zone_journal WHERE zone = sealed_zone AND id <> NEW.id
                   AND new_serial = valis_soa_serial(r.rdata))
        INTO soa_id, soa_owner, soa_ttl, soa_rdata, taken
        FROM records r WHERE r.zone = sealed_zone AND r.rtype = 'SOA';
    before := valis_soa_serial(soa_rdata);
    serial := valis_policy_serial(before, policy, now());
    fields := regexp_split_to_array(btrim(soa_rdata), '\s+');
    fields[3] := serial::text;
    raised_rdata := array_to_string(fields, ' ');
    noted := set_config('valis.journal_sealing', soa_id::text, true);
    UPDATE records SET rdata = raised_rdata WHERE id = soa_id;
    noted := set_config('valis.journal_sealing', '', true);
    kept := kept || json_build_array(false, soa_owner, 'SOA', soa_ttl, soa_rdata)::text
                 || json_build_array(true, soa_owner, 'SOA', soa_ttl, raised_rdata)::text;
    UPDATE zone_journal SET old_serial = before, new_serial = serial, held = kept,
        committed_at = clock_timestamp() WHERE id = NEW.id;
    noted := pg_notify('valis_zone_rows', '{"zone":' || to_json(sealed_zone)::text
        || ',"from":' || before || ',"to":' || serial
        || ',"diff":[' || array_to_string(kept, ',') || ']}');
    RETURN NULL;
END $$;
