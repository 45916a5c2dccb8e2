//! The agent's state: what the owner set up, the contact book, requests both
//! ways, channels, deliveries still under way, and the replay and rate
//! records. Everything is kept as [`Record`]s; [`State::take_writes`] gives
//! the records an input changed, for the store to commit before any effect
//! leaves (§7 persistence).

use std::collections::{BTreeMap, BTreeSet};

use rdv_proto::channel::{Channels, Outbound, OutboundHead, Sent};
use rdv_proto::time::Instant;
use rdv_proto::{AgentId, AgentKey};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::phrase::PhraseRecord;
use crate::record::{Record, Table, Write};

/// How a contact was found (§4.4 bindings), shown at consent time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Binding {
    /// A topic probe or a public pointer: a lead, not a credential.
    Claimed,
    /// A DNS TXT record under the address's domain.
    Dns,
    /// A directory listing (self-asserted, so also a claim).
    Directory,
    /// The owner says the card came from a QR code or face to face.
    InPerson,
    /// The card was given to us (imported, or it came with a request to us).
    Card,
    /// The mailbox proof (§5.2.1): a DMARC-aligned probe, or a SYN-ACK
    /// whose cookie came back.
    Mailbox,
}

impl Binding {
    pub fn as_str(self) -> &'static str {
        match self {
            Binding::Claimed => "claimed",
            Binding::Dns => "dns",
            Binding::Directory => "directory",
            Binding::InPerson => "in-person",
            Binding::Card => "card",
            Binding::Mailbox => "mailbox",
        }
    }
}

/// One of the owner's contact points. A private one is kept off the card
/// and opens no topic (§4.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnAddress {
    /// The canonical address (§4.6).
    pub address: String,
    pub public: bool,
}

/// What the owner set up with `rdv init` and changed since (§4.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub addresses: Vec<OwnAddress>,
    /// Listening Nostr relays, in preference order.
    pub relays: Vec<String>,
    /// §4.4: publish the card on the address and ID topics.
    pub public_pointer: bool,
    /// §5.4: allow | block | prompt.
    pub inbound: String,
    /// Other rendezvous entries (ntfy, mqtt, email), as written on the card.
    pub other_rendezvous: Vec<Value>,
    /// The current signed card.
    pub card: Value,
    /// Cards this agent signed before the current one, newest last, so a
    /// card-update also reaches relays a contact may still use (§4.3).
    pub previous_relays: Vec<String>,
    /// Addresses removed since they were last published on, so the newest
    /// card supersedes the old one on their topics (§4.4).
    pub removed_addresses: Vec<String>,
    /// ws:// relays are taken (tests and local development only).
    pub allow_ws: bool,
    /// Configured directories (§4.5).
    pub directories: Vec<String>,
    /// Friend suggestions (§4.5: on by default).
    pub suggest: bool,
    #[serde(with = "time::serde::rfc3339")]
    pub created: Instant,
}

/// A grant as the side it concerns keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldGrant {
    pub id: String,
    pub tier: String,
    pub scope: Value,
    #[serde(with = "time::serde::rfc3339")]
    pub ts: Instant,
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires: Option<Instant>,
}

/// Whether a contact is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContactStatus {
    Active,
    Revoked,
}

/// A contact (§5.3). Direction matters: `granted_by_us` is what the peer may
/// do towards us (our owner's grant), `granted_to_us` what we may do towards
/// the peer (the peer's grant, or its reverse grant).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    pub id: AgentId,
    /// The newest card held (§4.3), signed.
    pub card: Value,
    /// The owner's own name for the contact: never taken from the peer.
    pub label: Option<String>,
    pub binding: Binding,
    pub status: ContactStatus,
    /// The grant that founded the contact (§5.3 grant_ref).
    pub founding_grant: String,
    /// Our owner's tier for the peer (starts at stranger on the requester side).
    pub tier: String,
    pub granted_by_us: Option<HeldGrant>,
    pub granted_to_us: Option<HeldGrant>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires: Option<Instant>,
    #[serde(with = "time::serde::rfc3339")]
    pub since: Instant,
    /// Hash of our card last sent to this contact (§4.3 card updates).
    pub card_sent: Option<String>,
    /// Recent card-updates received, for the 20/hour bound (§4.3).
    #[serde(default)]
    pub card_updates: Vec<i64>,
    /// Recent reverse grants received, for the 10/hour bound (§5.3).
    #[serde(default)]
    pub reverse_grants: Vec<i64>,
    /// Recent messages received, for max_frequency (§5.3, §10).
    #[serde(default)]
    pub received: Vec<i64>,
    /// Why the contact ended, once it did (§5.4): who ended it and, for a
    /// revoke for abuse, the rule met (§5.3 (a) apart from (b)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
}

/// How a contact ended (§5.3, §5.4), kept with it for the human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ended {
    /// `peer` (their rdv/revoke), `owner`, `blocked`, `abuse` (over the
    /// grant-wide max_frequency, §5.3 (a)) or `task-abuse` (gross abuse of
    /// the per-capability limits, §5.3 (b)).
    pub by: String,
    /// For `task-abuse`: the rule met, as JSON (`limits::Abuse`).
    pub reason: Option<String>,
    /// Unix seconds.
    pub at: i64,
}

/// How a request reached us.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "via")]
pub enum Via {
    /// A topic probe on the dtopic of one of our addresses (§4.4).
    Topic { address: String },
    /// An envelope addressed to our card.
    Envelope,
    /// A mailbox probe (§5.2.1) that reached `address`, one of our
    /// mailboxes, through its gateway.
    Mailbox { address: String },
    /// An envelope answering our invite `invite_id` to `address` with its
    /// token (§5.2.2).
    Invite { address: String, invite_id: String },
}

/// Top-level fields of stored records that a summary (`rdv status`) counts
/// by in the store, without loading the records: [`Contact::status`]
/// (`"active"`) and [`Outgoing::closed`] (`false`). Their serde names, tested.
pub const CONTACT_STATUS_FIELD: &str = "status";
pub const OUTGOING_CLOSED_FIELD: &str = "closed";

/// A request waiting for the owner (§5.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub request_id: String,
    pub from: AgentId,
    /// The signed request as received.
    pub request: Value,
    pub via: Via,
    pub binding: Binding,
    #[serde(with = "time::serde::rfc3339")]
    pub received: Instant,
    /// The confirm phrase issued for it, hashed (§5.5), if any.
    pub phrase: Option<PhraseRecord>,
}

/// What our own request was sent to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Target {
    /// A known card: an encrypted request (§5.1).
    Agent(AgentId),
    /// An address: a cleartext topic probe (§4.4).
    Address(String),
}

/// An answer to a topic probe, kept until the owner confirms it (§5.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub grantor: AgentId,
    /// The signed grant.
    pub grant: Value,
    /// The envelope that carried it: the anchor of the peer's chain if the
    /// owner confirms (§6.4: a stranger's chain starts where we first see it).
    pub anchor: rdv_proto::channel::Meta,
    #[serde(with = "time::serde::rfc3339")]
    pub received: Instant,
}

/// Our own request or probe (§5.1, §4.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outgoing {
    pub request_id: String,
    pub target: Target,
    /// The owner's label for whoever answers (applied when it becomes a contact).
    pub label: Option<String>,
    pub greeting: String,
    /// Binding the answer gets when it becomes a contact.
    pub binding: Binding,
    #[serde(with = "time::serde::rfc3339")]
    pub created: Instant,
    /// Probe answers (at most 16, one per grantor, §5.3).
    pub candidates: Vec<Candidate>,
    /// Answers over the cap, counted for the owner (§5.3).
    pub dropped: u64,
    /// Answered (a contact was made from it) or withdrawn.
    pub closed: bool,
}

/// What a delivery carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Carry {
    /// A sealed envelope to `to` (§6.4).
    Envelope { to: AgentId, seq: u64 },
    /// Our card on a topic (public pointer, §4.4).
    Card { topic: String },
    /// A topic probe (§4.4).
    Probe { topic: String },
}

/// One carrier a delivery may take, in the recipient card's order (§6.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Route {
    Nostr { relays: Vec<String> },
    Ntfy { server: String, topic: String },
    Mqtt { url: String, topic: String },
}

/// A document on its way out, kept until a carrier takes it (§6.2: one OK
/// from a relay is delivered).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    pub id: String,
    pub carry: Carry,
    /// The document itself: the envelope, card or request.
    pub doc: Value,
    pub routes: Vec<Route>,
    /// Which route is being tried.
    pub route: usize,
    /// Attempts on the current route.
    pub attempts: u32,
    #[serde(with = "time::serde::rfc3339")]
    pub next_at: Instant,
    /// The latest Nostr created_at used, so a retry is always later (§6.2:
    /// relays drop an equal or older event with the same d as a duplicate).
    pub last_created_at: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub created: Instant,
    /// Sent at the time of the attempt: waiting for its outcome.
    pub in_flight: bool,
}

/// What we know of a relay (§6.2: cooled down after a refusal).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayHealth {
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_ok: Option<Instant>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_error_at: Option<Instant>,
    /// blocked | rate-limited | restricted | unreachable | …
    pub last_error_kind: Option<String>,
    /// The relay's own words: untrusted text (§5.6).
    pub last_error_message: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub cooldown_until: Option<Instant>,
    pub failures: u32,
}

/// A card found by discovery or imported (§4.4), not yet a contact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownCard {
    pub card: Value,
    pub binding: Binding,
    #[serde(with = "time::serde::rfc3339")]
    pub found: Instant,
}

/// A buffered inbound envelope (§7): its verified header facts and payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Held {
    pub from: AgentId,
    pub hash: String,
    pub seq: u64,
    pub payload: Value,
}

/// The whole state, and which records changed since the last commit.
#[derive(Debug, Default)]
pub struct State {
    pub profile: Option<Profile>,
    pub contacts: BTreeMap<AgentId, Contact>,
    pub pending: BTreeMap<String, Pending>,
    pub outgoing: BTreeMap<String, Outgoing>,
    pub blocked: BTreeSet<AgentId>,
    pub channels_in: Channels<Held>,
    pub channels_out: BTreeMap<AgentId, Outbound>,
    pub deliveries: BTreeMap<String, Delivery>,
    /// Document ids seen (§5.4 replay protection), with when, in unix seconds.
    pub seen: BTreeMap<String, i64>,
    pub relay_health: BTreeMap<String, RelayHealth>,
    /// When each address was last probed (§5.2.1), unix seconds.
    pub probe_log: BTreeMap<String, i64>,
    /// Cards found by discovery or imported, with how (§4.4 bindings).
    pub known_cards: BTreeMap<AgentId, KnownCard>,
    /// The owner's mailboxes at probe gateways, by address (§5.2.1).
    pub mailboxes: BTreeMap<String, OwnMailbox>,
    /// The last inbox seq handled, by gateway URL.
    pub gateway_cursors: BTreeMap<String, u64>,
    /// Our mailbox probes, by request id (§5.2.1).
    pub mail_out: BTreeMap<String, MailProbeOut>,
    /// Mailbox probes to us, until the ACK lands, by request id (§5.2.1).
    pub mail_in: BTreeMap<String, MailProbeIn>,
    /// Invites we sent, by invite id (§5.2.2).
    pub invites: BTreeMap<String, SentInvite>,
    /// Meetings (§7.3): negotiations, per-peer counters, the owner's busy times.
    pub meetings: crate::meeting::Book,
    /// General tasks (§7.6), their limits, the owner's gates and audit log.
    pub tasks: crate::task_flow::TaskBook,
    dirty: BTreeSet<(Table, String)>,
    /// The seqs stored as [`Table::Outbox`] records, per peer: a touched
    /// channel writes only the entries not there yet and deletes the ones
    /// pruned from its outbox (§7: 64 kept).
    outbox_stored: BTreeMap<AgentId, BTreeSet<u64>>,
    /// Peers whose outbox was read from an old whole `channel_out` record:
    /// the next write of the channel stores every entry.
    outbox_inline: BTreeSet<AgentId>,
}

/// The key of one outbox entry: the peer's agent ID and the seq, written
/// with 20 digits so the keys sort by seq.
pub fn outbox_key(to: &AgentId, seq: u64) -> String {
    format!("{}/{seq:020}", to.as_str())
}

fn parse_outbox_key(key: &str) -> Option<(AgentId, u64)> {
    let (id, seq) = key.rsplit_once('/')?;
    if seq.len() != 20 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((AgentId::parse(id).ok()?, seq.parse().ok()?))
}

/// A stored `channel_out` record: the head alone, or (homes written before
/// the outbox had its own records) the whole state with its outbox.
enum StoredOutbound {
    Head(OutboundHead),
    Whole(Outbound),
}

impl StoredOutbound {
    fn read(r: &Record) -> Result<StoredOutbound> {
        Ok(if r.value.get("outbox").is_some() {
            StoredOutbound::Whole(from_value(r)?)
        } else {
            StoredOutbound::Head(from_value(r)?)
        })
    }
}

fn to_value<T: Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::Store(format!("serializing state: {e}")))
}

fn from_value<T: DeserializeOwned>(r: &Record) -> Result<T> {
    T::deserialize(&r.value).map_err(|e| {
        Error::Store(format!(
            "stored {} record {:?} does not read: {e}",
            r.table.as_str(),
            r.key
        ))
    })
}

fn agent_key(r: &Record) -> Result<AgentId> {
    AgentId::parse(&r.key)
        .map_err(|e| Error::Store(format!("stored {} key: {e}", r.table.as_str())))
}

impl State {
    /// Rebuilds the state from every stored record.
    pub fn load(records: &[Record]) -> Result<State> {
        let mut s = State::default();
        let mut heads: BTreeMap<AgentId, StoredOutbound> = BTreeMap::new();
        let mut outbox: BTreeMap<AgentId, BTreeMap<u64, Sent>> = BTreeMap::new();
        for r in records {
            match r.table {
                Table::Profile => s.profile = Some(from_value(r)?),
                Table::Contact => {
                    s.contacts.insert(agent_key(r)?, from_value(r)?);
                }
                Table::Pending => {
                    s.pending.insert(r.key.clone(), from_value(r)?);
                }
                Table::Outgoing => {
                    s.outgoing.insert(r.key.clone(), from_value(r)?);
                }
                Table::Blocked => {
                    s.blocked.insert(agent_key(r)?);
                }
                Table::ChannelIn => {
                    let id = agent_key(r)?;
                    s.channels_in.insert(id, from_value(r)?);
                }
                Table::ChannelOut => {
                    heads.insert(agent_key(r)?, StoredOutbound::read(r)?);
                }
                Table::Outbox => {
                    let (id, seq) = parse_outbox_key(&r.key).ok_or_else(|| {
                        Error::Store(format!(
                            "stored outbox key {:?} is not <agent id>/<seq>",
                            r.key
                        ))
                    })?;
                    let sent: Sent = from_value(r)?;
                    if sent.seq() != seq {
                        return Err(Error::Store(format!(
                            "stored outbox entry {:?} holds seq {}",
                            r.key,
                            sent.seq()
                        )));
                    }
                    outbox.entry(id).or_default().insert(seq, sent);
                }
                Table::Delivery => {
                    s.deliveries.insert(r.key.clone(), from_value(r)?);
                }
                Table::Seen => {
                    s.seen.insert(r.key.clone(), from_value(r)?);
                }
                Table::RelayHealth => {
                    s.relay_health.insert(r.key.clone(), from_value(r)?);
                }
                Table::ProbeLog => {
                    s.probe_log.insert(r.key.clone(), from_value(r)?);
                }
                Table::KnownCard => {
                    s.known_cards.insert(agent_key(r)?, from_value(r)?);
                }
                Table::Mailbox => {
                    s.mailboxes.insert(r.key.clone(), from_value(r)?);
                }
                Table::GatewayCursor => {
                    s.gateway_cursors.insert(r.key.clone(), from_value(r)?);
                }
                Table::MailProbeOut => {
                    s.mail_out.insert(r.key.clone(), from_value(r)?);
                }
                Table::MailProbeIn => {
                    s.mail_in.insert(r.key.clone(), from_value(r)?);
                }
                Table::Invite => {
                    s.invites.insert(r.key.clone(), from_value(r)?);
                }
                Table::Meeting | Table::MeetingPeer | Table::Calendar => s.meetings.load(r)?,
                Table::Task | Table::TaskLimits | Table::Owner | Table::Audit | Table::Transfer => {
                    s.tasks.load(r)?
                }
            }
        }
        for (id, head) in heads {
            let entries = outbox.remove(&id).unwrap_or_default();
            s.outbox_stored
                .insert(id.clone(), entries.keys().copied().collect());
            let out = match head {
                StoredOutbound::Head(head) => {
                    Outbound::from_parts(head, entries.into_values().collect())
                        .map_err(|e| Error::Store(format!("stored channel_out {id}: {e}")))?
                }
                // An old home: the outbox is in the record itself (any
                // entry records beside it are replaced on the next write).
                StoredOutbound::Whole(out) => {
                    s.outbox_inline.insert(id.clone());
                    out
                }
            };
            s.channels_out.insert(id, out);
        }
        if let Some(id) = outbox.keys().next() {
            return Err(Error::Store(format!(
                "stored outbox entries to {id} without their channel_out record"
            )));
        }
        Ok(s)
    }

    /// Marks one record as changed (or removed, if it is gone from the maps).
    pub fn touch(&mut self, table: Table, key: impl Into<String>) {
        self.dirty.insert((table, key.into()));
    }

    /// The writes for every record changed since the last call.
    pub fn take_writes(&mut self) -> Result<Vec<Write>> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut out = Vec::with_capacity(dirty.len());
        for (table, key) in dirty {
            if table == Table::ChannelOut
                && let Ok(id) = AgentId::parse(&key)
            {
                self.outbox_writes(&id, &mut out)?;
            }
            let value = self.record_value(table, &key)?;
            if table == Table::Outbox
                && let Some((id, seq)) = parse_outbox_key(&key)
            {
                let stored = self.outbox_stored.entry(id).or_default();
                if value.is_some() {
                    stored.insert(seq);
                } else {
                    stored.remove(&seq);
                }
            }
            out.push(Write { table, key, value });
        }
        Ok(out)
    }

    /// The outbox entries of a touched channel that the store lacks, and
    /// deletions of those it holds that the outbox dropped (§7: the last 64).
    /// The caller commits them with the channel head, before the envelope
    /// leaves; a failed commit reloads the state, and with it this record.
    fn outbox_writes(&mut self, id: &AgentId, out: &mut Vec<Write>) -> Result<()> {
        let inline = self.outbox_inline.remove(id);
        let stored = self.outbox_stored.remove(id).unwrap_or_default();
        let mut now = BTreeSet::new();
        for sent in self
            .channels_out
            .get(id)
            .into_iter()
            .flat_map(Outbound::sent)
        {
            now.insert(sent.seq());
            if inline || !stored.contains(&sent.seq()) {
                out.push(Write {
                    table: Table::Outbox,
                    key: outbox_key(id, sent.seq()),
                    value: Some(to_value(sent)?),
                });
            }
        }
        for seq in stored.difference(&now) {
            out.push(Write {
                table: Table::Outbox,
                key: outbox_key(id, *seq),
                value: None,
            });
        }
        if self.channels_out.contains_key(id) {
            self.outbox_stored.insert(id.clone(), now);
        }
        Ok(())
    }

    /// Drops the pending changes (an input that failed changes nothing).
    pub fn has_changes(&self) -> bool {
        !self.dirty.is_empty()
    }

    fn record_value(&self, table: Table, key: &str) -> Result<Option<Value>> {
        let id = || AgentId::parse(key).ok();
        Ok(match table {
            Table::Profile => self.profile.as_ref().map(to_value).transpose()?,
            Table::Contact => id()
                .and_then(|i| self.contacts.get(&i))
                .map(to_value)
                .transpose()?,
            Table::Pending => self.pending.get(key).map(to_value).transpose()?,
            Table::Outgoing => self.outgoing.get(key).map(to_value).transpose()?,
            Table::Blocked => id()
                .filter(|i| self.blocked.contains(i))
                .map(|_| Value::Bool(true)),
            Table::ChannelIn => id()
                .and_then(|i| self.channels_in.get(&i))
                .map(to_value)
                .transpose()?,
            Table::ChannelOut => id()
                .and_then(|i| self.channels_out.get(&i))
                .map(|o| to_value(&o.head()))
                .transpose()?,
            Table::Outbox => parse_outbox_key(key)
                .and_then(|(i, seq)| self.channels_out.get(&i)?.sent().find(|s| s.seq() == seq))
                .map(to_value)
                .transpose()?,
            Table::Delivery => self.deliveries.get(key).map(to_value).transpose()?,
            Table::Seen => self.seen.get(key).map(to_value).transpose()?,
            Table::RelayHealth => self.relay_health.get(key).map(to_value).transpose()?,
            Table::ProbeLog => self.probe_log.get(key).map(to_value).transpose()?,
            Table::KnownCard => id()
                .and_then(|i| self.known_cards.get(&i))
                .map(to_value)
                .transpose()?,
            Table::Mailbox => self.mailboxes.get(key).map(to_value).transpose()?,
            Table::GatewayCursor => self.gateway_cursors.get(key).map(to_value).transpose()?,
            Table::MailProbeOut => self.mail_out.get(key).map(to_value).transpose()?,
            Table::MailProbeIn => self.mail_in.get(key).map(to_value).transpose()?,
            Table::Invite => self.invites.get(key).map(to_value).transpose()?,
            Table::Task | Table::TaskLimits | Table::Owner | Table::Audit | Table::Transfer => {
                self.tasks.record_value(table, key)?
            }
            Table::Meeting | Table::MeetingPeer | Table::Calendar => {
                self.meetings.record_value(table, key)?
            }
        })
    }

    pub fn profile(&self) -> Result<&Profile> {
        self.profile.as_ref().ok_or(Error::NoAgent)
    }

    /// A current (not revoked) contact.
    pub fn contact(&self, id: &AgentId) -> Option<&Contact> {
        self.contacts
            .get(id)
            .filter(|c| c.status == ContactStatus::Active)
    }

    /// Our own request by card to this agent, still open.
    pub fn asked_by_card(&self, id: &AgentId) -> Option<&Outgoing> {
        self.outgoing
            .values()
            .find(|o| !o.closed && o.target == Target::Agent(id.clone()))
    }

    /// The agent whose card carries `key`'s identity: our own.
    pub fn is_me(key: &AgentKey, id: &AgentId) -> bool {
        key.id() == id
    }
}

// ---- mailbox probe and invite (§5.2.1, §5.2.2) -----------------------------

/// One of the owner's mailboxes at a probe gateway (§5.2.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnMailbox {
    /// The canonical address (§4.6).
    pub address: String,
    /// The gateway's base URL.
    pub gateway: String,
    /// The gateway took the mailed code.
    pub verified: bool,
    /// The gateway's address for the mailbox, once verified.
    pub gateway_address: Option<String>,
    /// The owner asked for it on the card as an email rendezvous entry.
    pub on_card: bool,
    #[serde(with = "time::serde::rfc3339")]
    pub added: Instant,
}

/// Where one of our mailbox probes stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum MailProbeStatus {
    /// Handed to the gateway; its answer not in yet.
    Sending,
    /// The gateway mailed it.
    Sent,
    /// The gateway refused it (`code`: opted_out, address_limited, …).
    Refused { code: String },
}

/// A SYN-ACK to one of our mailbox probes: what the ACK echoes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailAnswer {
    pub grantor: AgentId,
    /// The SYN-ACK's seq in our gateway inbox.
    pub seq: u64,
    pub cookie: String,
}

/// One of our mailbox probes (§5.2.1); its answers are candidates of the
/// `Outgoing` with the same request id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailProbeOut {
    pub request_id: String,
    /// The probed address (canonical).
    pub address: String,
    pub gateway: String,
    /// Which of our mailboxes it was sent from.
    pub from_mailbox: String,
    pub status: MailProbeStatus,
    #[serde(with = "time::serde::rfc3339")]
    pub created: Instant,
    /// No probe to this address before then (the gateway's retry_after).
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_before: Option<Instant>,
    pub answers: Vec<MailAnswer>,
}

/// What our owner granted a mailbox probe, kept until the ACK lands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailGrant {
    /// The signed grant the SYN-ACK carries.
    pub grant: Value,
    pub id: String,
    pub tier: String,
    pub scope: Value,
    pub label: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub ts: Instant,
    /// The gateway mailed the SYN-ACK.
    pub sent: bool,
}

/// A mailbox probe that reached one of our mailboxes (§5.2.1): pending
/// until our owner grants it, then waiting for the ACK.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailProbeIn {
    pub request_id: String,
    pub requester: AgentId,
    pub gateway: String,
    /// Our mailbox it reached.
    pub mailbox: String,
    /// Its seq in our gateway inbox (what `syn_ack` and `ack` name).
    pub seq: u64,
    /// The gateway's cookie: what the ACK must echo.
    pub cookie: String,
    /// canon(From) of the mail, as the gateway read it.
    pub sender: Option<String>,
    /// DMARC passed (the gateway's weak mailbox proof).
    pub weak_proof: bool,
    /// The request as it was pending (put back if the SYN-ACK fails).
    pub pending: Pending,
    pub granted: Option<MailGrant>,
    /// The ACK landed: the contact is made.
    pub acked: bool,
}

/// Where an invite of ours stands (§5.2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum InviteStatus {
    Sending,
    Pending,
    Accepted,
    Declined,
    /// The address opted out: permanent.
    OptedOut,
    /// The gateway refused it for another reason.
    Refused {
        code: String,
    },
}

/// An invite we sent (§5.2.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentInvite {
    pub id: String,
    /// The invited address (canonical).
    pub address: String,
    pub gateway: String,
    /// Where the owner got the address (stated in the invite).
    pub source: String,
    /// The single-use token.
    pub token: String,
    pub status: InviteStatus,
    #[serde(with = "time::serde::rfc3339")]
    pub sent: Instant,
    /// When it was answered, declined or refused.
    #[serde(with = "time::serde::rfc3339::option")]
    pub ended: Option<Instant>,
    /// No invite to this address before then (the gateway's retry_after).
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_before: Option<Instant>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rdv_proto::envelope::Header;
    use serde_json::json;

    fn peer() -> AgentId {
        AgentKey::from_seed([7; 32]).id().clone()
    }

    fn t(s: i64) -> Instant {
        rdv_proto::time::parse_time("t", "2026-12-01T10:00:00Z").unwrap()
            + time::Duration::seconds(s)
    }

    /// A channel to `peer()` with `n` envelopes sent, as records.
    fn records(n: u64) -> Vec<Record> {
        let mut s = State::default();
        let out = s.channels_out.entry(peer()).or_default();
        for seq in 1..=n {
            let (_, prev) = out.next();
            let header = Header {
                from: peer(),
                to: peer(),
                seq,
                prev: prev.map(str::to_string),
                created_raw: String::new(),
                created: t(seq as i64),
                ttl_secs: 60,
                hash: format!("{seq:064x}"),
            };
            out.record(&header, json!({"seq": seq}));
        }
        s.touch(Table::ChannelOut, peer().as_str());
        s.take_writes()
            .unwrap()
            .into_iter()
            .map(|w| Record {
                table: w.table,
                key: w.key,
                value: w.value.unwrap(),
            })
            .collect()
    }

    fn load_err(records: &[Record]) -> String {
        State::load(records).unwrap_err().to_string()
    }

    #[test]
    fn outbox_entries_are_keyed_by_peer_and_seq_and_load_back() {
        let recs = records(3);
        let keys: Vec<&str> = recs
            .iter()
            .filter(|r| r.table == Table::Outbox)
            .map(|r| r.key.as_str())
            .collect();
        let id = peer();
        assert_eq!(
            keys,
            [outbox_key(&id, 1), outbox_key(&id, 2), outbox_key(&id, 3)]
        );
        assert!(outbox_key(&id, 2) < outbox_key(&id, 10), "keys sort by seq");
        let s = State::load(&recs).unwrap();
        assert_eq!(s.channels_out[&id].outbox_len(), 3);
        assert_eq!(s.channels_out[&id].resend(2, 3).len(), 2);
    }

    #[test]
    fn a_stored_outbox_that_does_not_add_up_is_refused() {
        let recs = records(3);
        let without =
            |table| -> Vec<Record> { recs.iter().filter(|r| r.table != table).cloned().collect() };
        assert!(load_err(&without(Table::ChannelOut)).contains("without their channel_out"));
        let mut moved = recs.clone();
        let e = moved.iter_mut().find(|r| r.table == Table::Outbox).unwrap();
        e.key = outbox_key(&peer(), 9);
        assert!(load_err(&moved).contains("holds seq 1"));
        let mut bad = recs.clone();
        let e = bad.iter_mut().find(|r| r.table == Table::Outbox).unwrap();
        e.key = format!("{}/1", peer());
        assert!(load_err(&bad).contains("is not <agent id>/<seq>"));
        let mut extra = recs.clone();
        let h = extra
            .iter_mut()
            .find(|r| r.table == Table::ChannelOut)
            .unwrap();
        h.value["x"] = json!(1);
        assert!(load_err(&extra).contains("unknown field `x`"));
    }

    #[test]
    fn a_removed_channel_takes_its_outbox_records_with_it() {
        let mut s = State::load(&records(2)).unwrap();
        s.channels_out.remove(&peer());
        s.touch(Table::ChannelOut, peer().as_str());
        let w = s.take_writes().unwrap();
        assert_eq!(w.len(), 3);
        assert!(w.iter().all(|w| w.value.is_none()), "{w:?}");
    }

    #[test]
    fn summary_fields_are_the_serde_names() {
        let o = Outgoing {
            request_id: "r".into(),
            target: Target::Address("a@example.com".into()),
            label: None,
            greeting: String::new(),
            binding: Binding::Claimed,
            created: t(0),
            candidates: Vec::new(),
            dropped: 0,
            closed: false,
        };
        assert_eq!(
            serde_json::to_value(&o).unwrap()[OUTGOING_CLOSED_FIELD],
            false
        );
    }
}
