-- A probe, not a migration (benchmarks/pg_change_cost.py --cold --variant): the shipped
-- rows note (migration 0023) without the changed owners' rows read back from records:
-- what a note carrying the change alone, not its owners' rows, saves the writer.
CREATE OR REPLACE FUNCTION public.valis_notify_sealed(entry_id bigint, changed_zone text, with_rows boolean)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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

    payload := '{"zone":' || to_json(changed_zone)::text || ',"owners":'
        || to_json(owners)::text || ',"rows":[' || array_to_string(found, ',') || ']}';
    IF octet_length(payload) <= 7900 THEN
        noted := pg_notify('valis_zone_rows', payload);
    END IF;
END
$function$;
