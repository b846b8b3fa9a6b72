-- NSEC3 as a signed zone's denial of existence (valis zone sign --denial nsec3): the
-- option for zones whose secondaries must serve them signed, since an NSEC3 chain
-- (RFC 5155) is a set of records a zone transfer can carry, where compact denial's
-- per-query NSEC (RFC 9824) is not. The chain's parameters are RFC 9276's: SHA-1 (the
-- only hash RFC 5155 defines), extra iterations (0, the default, is what RFC 9276 asks
-- for) and salt (empty by default). Opt-out is not offered: every delegation is in the
-- chain. Changing denial or parameters is a fenced write like the rest of the row.
ALTER TABLE zone_signing
    DROP CONSTRAINT zone_signing_denial,
    ADD CONSTRAINT zone_signing_denial CHECK (denial IN ('compact', 'nsec3')),
    ADD COLUMN nsec3_iterations integer NOT NULL DEFAULT 0
        CONSTRAINT zone_signing_nsec3_iterations CHECK (nsec3_iterations BETWEEN 0 AND 100),
    ADD COLUMN nsec3_salt bytea NOT NULL DEFAULT ''::bytea
        CONSTRAINT zone_signing_nsec3_salt CHECK (length(nsec3_salt) <= 255);
