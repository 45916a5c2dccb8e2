-- The probe gateway's state (SPEC §5.2.1, §5.2.2). One set of migrations
-- for SQLite and Postgres. No raw mail is stored: a probe row holds the
-- verified RDV/1 payload, its verdicts and routing data only.

-- A mailbox proven by its owner, and the agent it delivers to.
CREATE TABLE mailboxes (
    mailbox TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    verified BIGINT NOT NULL
);
CREATE INDEX mailboxes_agent ON mailboxes (agent);

-- A registration waiting for its mailbox-proof code (only a hash is kept).
CREATE TABLE pending_registrations (
    mailbox TEXT NOT NULL,
    agent TEXT NOT NULL,
    code_hash TEXT NOT NULL,
    expires BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    PRIMARY KEY (mailbox, agent)
);

-- Integration tokens: `token_id` is public, only SHA-256 of the secret is kept.
CREATE TABLE tokens (
    token_id TEXT PRIMARY KEY,
    mailbox TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created BIGINT NOT NULL
);
CREATE INDEX tokens_mailbox ON tokens (mailbox);

-- Admitted probes, SYN-ACKs and invites, queued for the mailbox's agent.
CREATE TABLE probes (
    seq BIGINT PRIMARY KEY,
    mailbox TEXT NOT NULL,
    agent TEXT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    requester TEXT NOT NULL,
    sender TEXT NOT NULL,
    ts BIGINT NOT NULL,
    received BIGINT NOT NULL,
    expires BIGINT NOT NULL,
    payload TEXT NOT NULL,
    auth TEXT NOT NULL,
    binding TEXT NOT NULL
);
CREATE INDEX probes_agent ON probes (agent, seq);
CREATE INDEX probes_expires ON probes (expires);

-- Counters (the probe sequence), incremented inside transactions.
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('probe_seq', 0);

-- Dedupe (§5.2.1 gate step 3): ids admitted within one probe lifetime.
CREATE TABLE seen_ids (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    expires BIGINT NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX seen_ids_expires ON seen_ids (expires);

-- Sliding rate-limit windows: one row per admitted message and scope.
CREATE TABLE rate_events (
    scope TEXT NOT NULL,
    rkey TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX rate_events_key ON rate_events (scope, rkey, at);

-- Signed API requests seen (agent, request id), kept past the timestamp window.
CREATE TABLE request_nonces (
    agent TEXT NOT NULL,
    id TEXT NOT NULL,
    expires BIGINT NOT NULL,
    PRIMARY KEY (agent, id)
);
CREATE INDEX request_nonces_expires ON request_nonces (expires);
