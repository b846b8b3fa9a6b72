-- Catalog zones (RFC 9432; valis zone catalog create|add|remove|list). A catalog is an
-- ordinary zone (its records in records, journalled, transferred and notified like any
-- zone's); zone_catalogs marks it a catalog, and zone_catalog_members holds its members,
-- each with the unique ID it was given when it joined (kept while it stays) and its
-- optional group. The catalog verbs write a membership change and the catalog zone's
-- records (valis_core.dns.zone.catalog renders them) in one transaction, so the journal's
-- seal raises the catalog's serial and its secondaries follow by IXFR.
--
-- A member is a zone of this database: deleting the zone deletes its membership, and the
-- trigger below deletes its records from the catalog zone in that transaction. Members
-- may be transferred by their catalogs' secondaries (secondaries.serving_secondaries),
-- so a membership change is announced where a secondary's change is.
CREATE TABLE zone_catalogs (
    name text PRIMARY KEY REFERENCES zones (name) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE zone_catalog_members (
    catalog text NOT NULL REFERENCES zone_catalogs (name) ON DELETE CASCADE,
    member text NOT NULL REFERENCES zones (name) ON DELETE CASCADE,
    unique_id text NOT NULL
        CONSTRAINT zone_catalog_member_unique_id CHECK (unique_id ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    member_group text
        CONSTRAINT zone_catalog_member_group CHECK (member_group ~ '^[!#-\[\]-~]([ !#-\[\]-~]{0,253}[!#-\[\]-~])?$'),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (catalog, member),
    UNIQUE (catalog, unique_id),
    CONSTRAINT zone_catalog_not_its_own_member CHECK (member <> catalog)
);

CREATE INDEX zone_catalog_members_by_member ON zone_catalog_members (member);

-- A member gone (its zone deleted, or removed from the catalog): its PTR and properties,
-- every record at or below <unique-id>.zones.<catalog>, leave the catalog zone.
CREATE FUNCTION valis_catalog_member_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM records
        WHERE zone = OLD.catalog
            AND valis_name_in_zone(owner, OLD.unique_id || '.zones.' || OLD.catalog);
    PERFORM pg_notify('valis_secondaries_changed', OLD.member);
    RETURN NULL;
END
$$;

CREATE TRIGGER zone_catalog_member_gone AFTER DELETE ON zone_catalog_members
    FOR EACH ROW EXECUTE FUNCTION valis_catalog_member_gone();
