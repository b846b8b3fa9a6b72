-- A probe, not a migration (benchmarks/pg_change_cost.py --cold --variant): the shipped
-- seal raising no serial, so neither writing the SOA row again nor netting the SOA pair:
-- an upper bound for what a serial kept outside the SOA row saves. Made from the seal
-- the database holds, with its raise's condition made false.
DO $$
DECLARE
    shipped text := pg_get_functiondef('valis_journal_seal'::regproc);
    probe text := replace(shipped, 'IF NOT valis_serial_gt(serial, before) THEN',
                          'IF false THEN');
BEGIN
    IF probe = shipped THEN
        RAISE EXCEPTION 'seal_without_raise.sql: the seal no longer raises as this probe expects';
    END IF;
    EXECUTE probe;
END
$$;
