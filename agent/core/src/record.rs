//! What the store keeps: the core's state as records, and the writes one
//! input makes. The store knows nothing of their meaning; it commits each
//! input's writes in one transaction before any of its effects leaves
//! (§7 persistence).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which part of the state a record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    /// The owner's profile: addresses, relays, the signed card, policy.
    Profile,
    /// Contacts by agent ID: their card, both grants, label, binding, counters.
    Contact,
    /// Requests waiting for the owner, by request id.
    Pending,
    /// Our own requests and probes, with their candidates, by request id.
    Outgoing,
    /// Blocked agent IDs.
    Blocked,
    /// Inbound channel state per sender (§6.4).
    ChannelIn,
    /// Outbound channel state per peer, without its outbox (§7).
    ChannelOut,
    /// The outbox (§7): one sent envelope per record, keyed by peer and seq
    /// ([`crate::state::outbox_key`]), the last 64 per peer. A send writes
    /// its entry and the small channel head, never the whole outbox.
    Outbox,
    /// Events still to be delivered, with their carriers and attempts.
    Delivery,
    /// Document ids seen, for replay protection (§5.4).
    Seen,
    /// Per-relay health: last success, last refusal, cool-down.
    RelayHealth,
    /// When each address was last probed (§5.2.1: one per 30 days).
    ProbeLog,
    /// Cards found or imported that are not contacts yet, by agent ID.
    KnownCard,
    /// The owner's mailboxes at probe gateways, by address (§5.2.1).
    Mailbox,
    /// How far each gateway's inbox was read (its last seq), by gateway URL.
    GatewayCursor,
    /// Our mailbox probes (§5.2.1), by request id.
    MailProbeOut,
    /// Mailbox probes that reached us, until the ACK lands, by request id.
    MailProbeIn,
    /// Invites we sent (§5.2.2), by invite id.
    Invite,
    /// Meeting negotiations and tombstones (§7.3), by "<peer> <taskId>".
    Meeting,
    /// Per-peer meeting counters (§5.3 limits), by agent ID.
    MeetingPeer,
    /// The owner's busy times, free/busy only (§7.4), key "calendar".
    Calendar,
    /// General tasks (§7.6), both sides, by `task::task_key`.
    Task,
    /// Per-contact, per-capability limit counters (§5.3), by agent ID.
    TaskLimits,
    /// What only the owner sets (§5.5, §5.5.1): "secret", "policy:<id>",
    /// "auto:<id>".
    Owner,
    /// The audit log of gates passed without asking (§5.5.1), by sequence.
    Audit,
    /// Direct-transfer negotiations (§7.7 rdv/transfer), by
    /// "<peer> <transfer>".
    Transfer,
}

impl Table {
    pub const ALL: [Table; 26] = [
        Table::Profile,
        Table::Contact,
        Table::Pending,
        Table::Outgoing,
        Table::Blocked,
        Table::ChannelIn,
        Table::ChannelOut,
        Table::Outbox,
        Table::Delivery,
        Table::Seen,
        Table::RelayHealth,
        Table::ProbeLog,
        Table::KnownCard,
        Table::Mailbox,
        Table::GatewayCursor,
        Table::MailProbeOut,
        Table::MailProbeIn,
        Table::Invite,
        Table::Meeting,
        Table::MeetingPeer,
        Table::Calendar,
        Table::Task,
        Table::TaskLimits,
        Table::Owner,
        Table::Audit,
        Table::Transfer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Table::Profile => "profile",
            Table::Contact => "contact",
            Table::Pending => "pending",
            Table::Outgoing => "outgoing",
            Table::Blocked => "blocked",
            Table::ChannelIn => "channel_in",
            Table::ChannelOut => "channel_out",
            Table::Outbox => "outbox",
            Table::Delivery => "delivery",
            Table::Seen => "seen",
            Table::RelayHealth => "relay_health",
            Table::ProbeLog => "probe_log",
            Table::KnownCard => "known_card",
            Table::Mailbox => "mailbox",
            Table::GatewayCursor => "gateway_cursor",
            Table::MailProbeOut => "mail_probe_out",
            Table::MailProbeIn => "mail_probe_in",
            Table::Invite => "invite",
            Table::Meeting => "meeting",
            Table::MeetingPeer => "meeting_peer",
            Table::Calendar => "calendar",
            Table::Task => "task",
            Table::TaskLimits => "task_limits",
            Table::Owner => "owner",
            Table::Audit => "audit",
            Table::Transfer => "transfer",
        }
    }

    pub fn parse(s: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// One stored record: a table, a key within it, and its JSON value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub table: Table,
    pub key: String,
    pub value: Value,
}

/// One write of an input: put a record, or delete it (`value` none).
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub table: Table,
    pub key: String,
    pub value: Option<Value>,
}
