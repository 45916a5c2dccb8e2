-- Shared-cache mode (`cache.shared = true`, issue #5): the SHA-256 content
-- key of (topic, payload), hex. NULL when the mode is off; both SQLite and
-- Postgres let a UNIQUE index hold any number of NULLs, so it binds only
-- shared-mode rows, and a second bridge's copy of a message is skipped.
ALTER TABLE rdv_bridge_messages ADD COLUMN content_key VARCHAR(64);
CREATE UNIQUE INDEX rdv_bridge_messages_content_key ON rdv_bridge_messages (content_key);
