-- The last serial of each deleted zone (valis zone delete), so importing the zone again
-- never takes it back below what nodes served and secondaries hold: a secondary ignores
-- a lower serial (RFC 1982). An import of a zone that is not stored compares the file's
-- serial with this one under the same rules as with a stored zone (valis_core.dns.serial)
-- and removes the row once the zone is stored again.
CREATE TABLE zone_serial_floor (
    name text PRIMARY KEY,
    serial bigint NOT NULL
        CONSTRAINT zone_serial_floor_serial CHECK (serial BETWEEN 0 AND 4294967295)
);
