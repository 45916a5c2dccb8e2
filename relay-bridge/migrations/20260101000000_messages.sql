-- The message cache (issue #5). Portable SQL: the same file runs on SQLite
-- and Postgres. `body` is the ntfy message JSON; `key` orders messages
-- (microseconds, strictly increasing per bridge process).
CREATE TABLE rdv_bridge_messages (
    id VARCHAR(16) PRIMARY KEY,
    topic VARCHAR(64) NOT NULL,
    msg_key BIGINT NOT NULL,
    expires BIGINT NOT NULL,
    size BIGINT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX rdv_bridge_messages_topic_key ON rdv_bridge_messages (topic, msg_key, id);
CREATE INDEX rdv_bridge_messages_expires ON rdv_bridge_messages (expires);
