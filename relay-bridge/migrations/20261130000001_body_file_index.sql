-- The prune asks, per closed body file, whether any row still names it
-- (src/store.rs): an index over the rows that have one makes that a lookup.
CREATE INDEX rdv_bridge_messages_body_file ON rdv_bridge_messages (body_file)
    WHERE body_file IS NOT NULL;
