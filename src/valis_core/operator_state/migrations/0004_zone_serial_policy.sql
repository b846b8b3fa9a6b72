-- Each zone's serial policy for imports (valis zone policy, valis zone import): NULL
-- refuses an import that changes the zone's data without raising its SOA serial;
-- 'increment', 'unixtime' and 'dateserial' have valis choose a higher serial, 'keep' takes
-- the file's serial as it is (valis_core.dns.serial holds the rules).
ALTER TABLE zones ADD COLUMN serial_policy text
    CONSTRAINT zone_serial_policy_known
    CHECK (serial_policy IN ('increment', 'unixtime', 'dateserial', 'keep'));
