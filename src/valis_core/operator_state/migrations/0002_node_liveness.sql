-- Node liveness: each resident's fenced heartbeat. The resident upserts its row every few
-- seconds inside fenced_transaction, so its "next mutating transaction" is never far off:
-- once another instance claims a higher fence generation, the superseded resident's next
-- heartbeat is fenced out, writes nothing, and the resident fails closed.
CREATE TABLE node_liveness (
    node text PRIMARY KEY CONSTRAINT node_liveness_node CHECK (node ~ '^[^[:space:][:cntrl:]]+$'),
    holder text NOT NULL CONSTRAINT node_liveness_holder CHECK (holder <> ''),
    generation bigint NOT NULL CONSTRAINT node_liveness_generation CHECK (generation >= 0),
    boot_id text NOT NULL,
    started_at timestamptz NOT NULL,
    beat_at timestamptz NOT NULL DEFAULT now(),
    beats bigint NOT NULL DEFAULT 1
);
