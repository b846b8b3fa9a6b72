-- A probe, not a migration (benchmarks/pg_change_cost.py --cold --variant): the least a
-- journalled change can cost with its serial raised in the SOA row. A one-row UPDATE puts
-- its new row in a journal entry of its own (no entry looked up, no zone checked, no serial
-- read, nothing netted); at commit the seal locks the zone, raises the SOA, seals the entry
-- and sends one note holding the changed row and the new SOA (no owner's rows read).
-- Only the probe's change is journalled: any other statement on records is not.
ALTER TABLE zone_journal ADD COLUMN held text;
CREATE OR REPLACE FUNCTION valis_journal_record_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    noted text;
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
    INSERT INTO zone_journal (zone, old_serial, held) VALUES (n_zone, 1,
        json_build_array(n_owner, n_rtype, n_ttl, n_rdata)::text);
    noted := set_config('valis.notes_covered', '1', true);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION valis_journal_seal() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sealed_zone text; before bigint; policy text; soa_id bigint; soa_owner text;
    soa_ttl integer; soa_rdata text; raised_rdata text; fields text[]; serial bigint;
    noted text;
BEGIN
    SELECT z.name, z.serial_policy INTO sealed_zone, policy
        FROM zones z WHERE z.name = NEW.zone FOR NO KEY UPDATE;
    SELECT r.id, r.owner, r.ttl, r.rdata INTO soa_id, soa_owner, soa_ttl, soa_rdata
        FROM records r WHERE r.zone = sealed_zone AND r.rtype = 'SOA';
    before := valis_soa_serial(soa_rdata);
    serial := valis_policy_serial(before, policy, now());
    fields := regexp_split_to_array(btrim(soa_rdata), '\s+');
    fields[3] := serial::text;
    raised_rdata := array_to_string(fields, ' ');
    noted := set_config('valis.journal_sealing', soa_id::text, true);
    UPDATE records SET rdata = raised_rdata WHERE id = soa_id;
    noted := set_config('valis.journal_sealing', '', true);
    UPDATE zone_journal SET old_serial = before, new_serial = serial,
        committed_at = clock_timestamp() WHERE id = NEW.id;
    noted := pg_notify('valis_zone_rows', '{"zone":' || to_json(sealed_zone)::text
        || ',"rows":[' || NEW.held || ',' || json_build_array(soa_owner, 'SOA', soa_ttl, raised_rdata)::text || ']}');
    RETURN NULL;
END $$;
