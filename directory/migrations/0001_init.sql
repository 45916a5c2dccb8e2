-- Listings (SPEC §4.5): one row per (lookup_id, agent). Nothing here names an
-- address, a dtopic or an OPRF output: lookup_id is a hash of the output,
-- the card is sealed, and `bucket` is the first 32 bits of lookup_id.
CREATE TABLE listings (
    lookup_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    key_id TEXT NOT NULL,
    bucket BIGINT NOT NULL,
    updated BIGINT NOT NULL,
    expires BIGINT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (lookup_id, agent)
);
CREATE INDEX listings_bucket ON listings (key_id, bucket);
CREATE INDEX listings_agent ON listings (agent);
CREATE INDEX listings_expires ON listings (expires);

-- Removals, kept until any listing they removed has expired, so a replayed
-- older listing cannot come back.
CREATE TABLE tombstones (
    lookup_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    updated BIGINT NOT NULL,
    purge_after BIGINT NOT NULL,
    PRIMARY KEY (lookup_id, agent)
);
CREATE INDEX tombstones_purge ON tombstones (purge_after);
