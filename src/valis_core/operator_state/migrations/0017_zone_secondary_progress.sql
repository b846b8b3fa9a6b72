-- How far each listed secondary has followed its zone: the serial it last took (a
-- transfer sent to it, or the serial its IXFR request carried) and when. The resident
-- keeps this in memory and writes it here every few seconds while the fence is its own,
-- so that a restart, an upgrade or an evacuation still shows which secondaries lag
-- (valis status) and the journal keeps what they still need. A secondary removed takes
-- its progress with it.
CREATE TABLE zone_secondary_progress (
    zone text NOT NULL,
    address inet NOT NULL,
    serial bigint NOT NULL
        CONSTRAINT zone_secondary_progress_serial CHECK (serial BETWEEN 0 AND 4294967295),
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (zone, address),
    FOREIGN KEY (zone, address) REFERENCES zone_secondaries (zone, address) ON DELETE CASCADE
);
