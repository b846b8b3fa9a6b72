-- The port each secondary is sent its NOTIFY on (valis zone secondary add ADDR[:PORT]):
-- a secondary listening on a port other than 53 (a second server on one host, a test
-- rig) is told of a change there. NULL is the standard port, 53. Transfers are judged
-- by the address alone (the port a request comes from is the client's ephemeral one).
ALTER TABLE zone_secondaries
    ADD COLUMN notify_port integer
        CONSTRAINT zone_secondary_notify_port CHECK (notify_port BETWEEN 1 AND 65535);
