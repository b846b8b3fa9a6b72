-- A catalog member's change of ownership (RFC 9432 section 4.4.1, valis zone catalog
-- move): the catalog it is moving to, rendered as coo.<unique-id>.zones.<catalog> PTR
-- <new catalog> beside its PTR. NULL while it stays. The row's trigger of 0016 takes the
-- coo record out with the member's others when the member leaves the catalog; a
-- catalog deleted while members were moving to it leaves them staying.
ALTER TABLE zone_catalog_members
    ADD COLUMN coo text REFERENCES zone_catalogs (name) ON DELETE SET NULL,
    ADD CONSTRAINT zone_catalog_member_coo_elsewhere CHECK (coo <> catalog);
