-- Progress for every pair the node serves: a catalog member's secondaries are its
-- catalogs' (RFC 9432, migration 0016), and how far each has followed the member is kept
-- as for a zone's own, so a restart still shows a catalog consumer's laggard members,
-- NOTIFYs it at start for what it lacks, and the journal holds what it still needs.
-- Migration 0017's key named the zone's own list only, which left every inherited pair
-- out. A pair no longer served (its secondary removed from the zone or the catalog, the
-- member gone from the catalog) takes its progress with it, as the key's cascade did.
CREATE VIEW zone_serving_secondaries AS
    SELECT zone, address FROM zone_secondaries
    UNION
    SELECT m.member, s.address
      FROM zone_catalog_members m JOIN zone_secondaries s ON s.zone = m.catalog;

ALTER TABLE zone_secondary_progress
    DROP CONSTRAINT zone_secondary_progress_zone_address_fkey,
    ADD FOREIGN KEY (zone) REFERENCES zones (name) ON DELETE CASCADE;

CREATE FUNCTION zone_secondary_progress_unserved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM zone_secondary_progress p
     WHERE NOT EXISTS (SELECT 1 FROM zone_serving_secondaries v
                        WHERE v.zone = p.zone AND v.address = p.address);
    RETURN NULL;
END
$$;

CREATE TRIGGER zone_secondaries_progress_unserved
    AFTER DELETE OR UPDATE ON zone_secondaries
    FOR EACH STATEMENT EXECUTE FUNCTION zone_secondary_progress_unserved();

CREATE TRIGGER zone_catalog_members_progress_unserved
    AFTER DELETE OR UPDATE ON zone_catalog_members
    FOR EACH STATEMENT EXECUTE FUNCTION zone_secondary_progress_unserved();
