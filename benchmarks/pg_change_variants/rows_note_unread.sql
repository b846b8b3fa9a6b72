-- A probe, not a migration (benchmarks/pg_change_cost.py --cold --variant): the shipped
-- rows note without the changed owners' rows read back from records: what a note
-- carrying the change alone, not its owners' rows, saves the writer. Made from the note
-- the database holds, with its read of each owner's rows taken out.
DO $$
DECLARE
    shipped text := pg_get_functiondef(
        'valis_notify_sealed(bigint, text, boolean)'::regprocedure);
    probe text := regexp_replace(shipped, 'FOREACH one IN ARRAY owners LOOP.*?END LOOP;', '');
BEGIN
    IF probe = shipped THEN
        RAISE EXCEPTION 'rows_note_unread.sql: the note no longer reads owners as this probe expects';
    END IF;
    EXECUTE probe;
END
$$;
