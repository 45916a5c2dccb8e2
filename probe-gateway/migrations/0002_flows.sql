-- The mail flows (SPEC §5.2.1, §5.2.2; issue #4): gateway addresses,
-- probe status and releases, sends with their per-address limits, and the
-- permanent opt-out. Addresses of third parties are stored only as a keyed
-- hash (HMAC under a key derived from the master secret).

-- The random tag of a mailbox's gateway address `<address_local>+<tag>@<mail_domain>`.
ALTER TABLE mailboxes ADD COLUMN tag TEXT;
CREATE UNIQUE INDEX mailboxes_tag ON mailboxes (tag);

-- A probe's state: pending, answered (SYN-ACK sent) or released (cookie echoed),
-- and how it was released (api or mail).
ALTER TABLE probes ADD COLUMN status TEXT NOT NULL DEFAULT 'pending';
ALTER TABLE probes ADD COLUMN released_via TEXT;

-- Mail sent on behalf of agents: kind probe, invite, syn_ack or ack.
-- addr_hash is the keyed hash of canon(recipient); ref_id the request id,
-- invite id or probe seq; status is sent, or for invites pending, accepted
-- or declined (status_at: when it changed).
CREATE TABLE sends (
    kind TEXT NOT NULL,
    agent TEXT NOT NULL,
    addr_hash TEXT NOT NULL,
    ref_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    status TEXT NOT NULL,
    status_at BIGINT NOT NULL,
    expires BIGINT NOT NULL
);
CREATE INDEX sends_agent ON sends (agent, kind, at);
CREATE INDEX sends_addr ON sends (addr_hash, kind, at);
CREATE INDEX sends_ref ON sends (agent, kind, ref_id);
CREATE INDEX sends_expires ON sends (expires);

-- Permanent opt-outs (§5.2.2): the keyed hash of the address, never the address.
CREATE TABLE optouts (
    addr_hash TEXT PRIMARY KEY,
    at BIGINT NOT NULL
);
