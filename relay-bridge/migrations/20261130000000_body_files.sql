-- Large bodies of a SQLite cache live in segment files beside the database
-- (src/bodies.rs): such a row holds an empty body, and the file and offset
-- of its frame here. NULL for bodies kept in the row, and always on
-- Postgres.
ALTER TABLE rdv_bridge_messages ADD COLUMN body_file BIGINT;
ALTER TABLE rdv_bridge_messages ADD COLUMN body_offset BIGINT;
