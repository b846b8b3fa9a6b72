-- Zones the node signs online (valis zone sign): the algorithm and the key tag of the
-- key the parent's DS was made from. The private key is in the signing node's state
-- directory (and its backup set), never here; a node that does not hold the key with
-- this tag answers the zone SERVFAIL rather than unsigned. Turned on by a node, so the
-- row is written in a fenced transaction, and says which fence holder wrote it.
CREATE TABLE zone_signing (
    zone text PRIMARY KEY REFERENCES zones (name) ON DELETE CASCADE,
    algorithm smallint NOT NULL CONSTRAINT zone_signing_algorithm CHECK (algorithm IN (13, 15)),
    key_tag integer NOT NULL CONSTRAINT zone_signing_key_tag CHECK (key_tag BETWEEN 0 AND 65535),
    denial text NOT NULL DEFAULT 'compact' CONSTRAINT zone_signing_denial CHECK (denial IN ('compact')),
    set_by text NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now()
);
