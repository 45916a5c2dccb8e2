//! The channel state machine (§6.4, §6.4.1, §7): per-direction `seq`/`prev`,
//! relay replays dropped, gaps buffered within bounds and turned into
//! `rdv/resend` ranges, forks and rollbacks detected, the human re-sync floor,
//! and the `rdv/restored` re-base.
//!
//! Pure state in, decisions out: the caller feeds the facts of an envelope it
//! already verified and opened, gets a [`Decision`], and persists the state
//! before anything leaves (§7 persistence). [`Inbound`], [`Outbound`] and
//! [`Channels`] serialize (serde) with every field, times at full precision,
//! so a restored copy decides exactly as the one saved.

use std::collections::{BTreeMap, VecDeque};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::consts::{
    CHANNEL_MAX_BUFFERED_PEERS, CHANNEL_MAX_BUFFERED_PER_PEER, CHANNEL_OUTBOX,
    CHANNEL_RECENT_HASHES, ENVELOPE_CREATED_MAX_LEAD_SECS, RESTORED_FLOOR_BEFORE_MS,
    RESTORED_MAX_PER_DAY,
};
use crate::doc::obj::Obj;
use crate::doc::restored::{Restored, RestoredAck};
use crate::envelope::Header;
use crate::error::{Error, Result};
use crate::keys::AgentId;
use crate::time::{Instant, truncate_ms};

/// The facts of one verified envelope that ordering needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub seq: u64,
    pub prev: Option<String>,
    pub hash: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created: Instant,
}

impl From<&Header> for Meta {
    fn from(h: &Header) -> Self {
        Self {
            seq: h.seq,
            prev: h.prev.clone(),
            hash: h.hash.clone(),
            created: h.created,
        }
    }
}

/// How far a sender is admitted (§6.4: channel state only for admitted senders).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Contacts, agents asked by card, group co-members: state kept and gaps
    /// buffered (§7, 16 peers × 64 envelopes).
    Buffered,
    /// Pending requesters kept, peers written to: state kept, gaps not
    /// buffered (the envelope is dropped and a resend asked for).
    Tracked,
    /// Anyone else: no state at all, each envelope stands alone.
    Stranger,
}

/// Why a chain was refused (§6.4). The human is told and only the human's
/// re-sync lifts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Fork {
    /// A different envelope at a `seq` already accepted (or buffered).
    SeqReused { seq: u64 },
    /// An envelope whose `prev` is not the chain head.
    PrevMismatch { seq: u64 },
}

/// Why an envelope was dropped without changing the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// This peer's gap buffer is full (64).
    BufferFull,
    /// Gap buffers are already held for 16 other peers.
    TooManyPeers,
    /// A gap from a peer whose envelopes are not buffered.
    NotBuffered,
}

/// What to do with one envelope.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<T> {
    /// Deliver these in order: the envelope, then any buffered ones it
    /// unblocked. `fork` is set when a buffered successor turned out to fork.
    Deliver { items: Vec<T>, fork: Option<Fork> },
    /// Already accepted (a relay replay) or below the re-sync floor: drop silently.
    Duplicate,
    /// Held until the gap closes; ask the sender to resend `resend` (inclusive).
    Buffered { resend: Option<(u64, u64)> },
    /// Dropped; ask for `resend` if set.
    Dropped {
        reason: Drop,
        resend: Option<(u64, u64)>,
    },
    /// The sender forked its chain: tell the human; refused until re-sync.
    Forked(Fork),
    /// The chain is refused after an earlier fork (the human was told then).
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum State {
    Open,
    Forked,
    /// The human re-synced: the next envelope newer than everything accepted
    /// becomes the head.
    Resyncing,
}

/// Inbound state for one sender. `T` is whatever the caller delivers (the
/// opened envelope); it is held only while buffered. Deserializing checks the
/// bounds the live state keeps (8 hashes, 64 buffered, 3 notices).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    try_from = "InboundRepr<T>",
    bound(serialize = "T: Serialize", deserialize = "T: DeserializeOwned")
)]
pub struct Inbound<T> {
    head: Option<(u64, String)>,
    recent: VecDeque<(u64, String)>,
    #[serde(with = "time::serde::rfc3339::option")]
    newest: Option<Instant>,
    #[serde(with = "time::serde::rfc3339::option")]
    floor: Option<Instant>,
    state: State,
    fork: Option<Fork>,
    buffer: BTreeMap<u64, (Meta, T)>,
    #[serde(with = "instants")]
    notices: VecDeque<Instant>,
}

/// [`Inbound`] as stored, before its bounds are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound = "T: DeserializeOwned")]
struct InboundRepr<T> {
    head: Option<(u64, String)>,
    recent: VecDeque<(u64, String)>,
    #[serde(with = "time::serde::rfc3339::option")]
    newest: Option<Instant>,
    #[serde(with = "time::serde::rfc3339::option")]
    floor: Option<Instant>,
    state: State,
    fork: Option<Fork>,
    buffer: BTreeMap<u64, (Meta, T)>,
    #[serde(with = "instants")]
    notices: VecDeque<Instant>,
}

impl<T> TryFrom<InboundRepr<T>> for Inbound<T> {
    type Error = String;

    fn try_from(r: InboundRepr<T>) -> std::result::Result<Self, String> {
        let head_seq = r.head.as_ref().map_or(0, |(s, _)| *s);
        if r.recent.len() > CHANNEL_RECENT_HASHES
            || r.buffer.len() > CHANNEL_MAX_BUFFERED_PER_PEER
            || r.notices.len() > RESTORED_MAX_PER_DAY
        {
            return Err("inbound channel state over its bounds".into());
        }
        if r.buffer
            .iter()
            .any(|(s, (m, _))| *s != m.seq || *s <= head_seq)
        {
            return Err("inbound channel buffer holds a seq at or below its head".into());
        }
        if r.state == State::Forked && r.fork.is_none() {
            return Err("inbound channel refused without a fork".into());
        }
        Ok(Self {
            head: r.head,
            recent: r.recent,
            newest: r.newest,
            floor: r.floor,
            state: r.state,
            fork: r.fork,
            buffer: r.buffer,
            notices: r.notices,
        })
    }
}

/// Serde for the notice times: RFC 3339 strings at full precision.
mod instants {
    use std::collections::VecDeque;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::time::Instant;

    #[derive(Serialize, Deserialize)]
    #[serde(transparent)]
    struct Stamp(#[serde(with = "time::serde::rfc3339")] Instant);

    pub fn serialize<S: Serializer>(v: &VecDeque<Instant>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|t| Stamp(*t)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<Instant>, D::Error> {
        Ok(Vec::<Stamp>::deserialize(d)?
            .into_iter()
            .map(|s| s.0)
            .collect())
    }
}

impl<T> Default for Inbound<T> {
    fn default() -> Self {
        Self {
            head: None,
            recent: VecDeque::new(),
            newest: None,
            floor: None,
            state: State::Open,
            fork: None,
            buffer: BTreeMap::new(),
            notices: VecDeque::new(),
        }
    }
}

impl<T> Inbound<T> {
    /// A channel that expects the sender's first envelope (seq 1, prev null).
    pub fn new() -> Self {
        Self::default()
    }

    /// A channel whose chain starts at an envelope already accepted, whatever
    /// its seq: how a stranger's first envelope becomes a kept requester (§6.4).
    pub fn anchored(first: &Meta) -> Self {
        let mut c = Self::new();
        c.advance(first);
        c
    }

    /// The last accepted (seq, hash).
    pub fn head(&self) -> Option<(u64, &str)> {
        self.head.as_ref().map(|(s, h)| (*s, h.as_str()))
    }

    /// The newest `created` accepted so far.
    pub fn newest(&self) -> Option<Instant> {
        self.newest
    }

    /// Envelopes not newer than this are dropped as replays (re-sync, restore).
    pub fn floor(&self) -> Option<Instant> {
        self.floor
    }

    /// The fork that refused this chain, until the human re-syncs.
    pub fn refused(&self) -> Option<&Fork> {
        if self.state == State::Forked {
            self.fork.as_ref()
        } else {
            None
        }
    }

    /// Whether the chain is refused after a fork (§6.4): the human must re-sync.
    pub fn is_refused(&self) -> bool {
        self.state == State::Forked
    }

    /// Whether the human re-synced and the next newer envelope is awaited (§6.4).
    pub fn is_resyncing(&self) -> bool {
        self.state == State::Resyncing
    }

    /// How many envelopes are held for a gap.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    fn advance(&mut self, m: &Meta) {
        self.head = Some((m.seq, m.hash.clone()));
        self.recent.push_back((m.seq, m.hash.clone()));
        while self.recent.len() > CHANNEL_RECENT_HASHES {
            self.recent.pop_front();
        }
        self.newest = Some(self.newest.map_or(m.created, |n| n.max(m.created)));
    }

    fn expected(&self) -> (u64, Option<&str>) {
        match &self.head {
            None => (1, None),
            Some((s, h)) => (s.saturating_add(1), Some(h.as_str())),
        }
    }

    fn refuse(&mut self, f: Fork) -> Decision<T> {
        self.state = State::Forked;
        self.fork = Some(f.clone());
        self.buffer.clear();
        Decision::Forked(f)
    }

    /// Feeds one envelope from this sender. `buffering` says whether a gap
    /// may be held (see [`Admission`]); [`Channels`] decides it.
    pub fn receive(&mut self, m: &Meta, item: T, buffering: bool) -> Decision<T> {
        if self.recent.iter().any(|(_, h)| *h == m.hash) {
            return Decision::Duplicate;
        }
        if self.floor.is_some_and(|f| m.created <= f) {
            return Decision::Duplicate;
        }
        match self.state {
            State::Forked => return Decision::Refused,
            State::Resyncing => {
                if self.newest.is_some_and(|n| m.created <= n) {
                    return Decision::Duplicate;
                }
                // §6.4: replays of the old chain are never newer than its newest.
                self.floor = self.newest;
                self.state = State::Open;
                self.fork = None;
                self.buffer.clear();
                self.advance(m);
                return self.drain(vec![item]);
            }
            State::Open => {}
        }
        let (expect, prev) = self.expected();
        if m.seq == expect {
            if m.prev.as_deref() != prev {
                return self.refuse(Fork::PrevMismatch { seq: m.seq });
            }
            self.advance(m);
            return self.drain(vec![item]);
        }
        if m.seq < expect {
            // Not one of the recent hashes, so a different envelope at an
            // accepted seq. Within the window that is a fork for sure; below
            // it, only a newer `created` tells a fork from an old replay.
            let in_window = self.recent.front().is_some_and(|(s, _)| m.seq >= *s);
            if in_window || self.newest.is_some_and(|n| m.created > n) {
                return self.refuse(Fork::SeqReused { seq: m.seq });
            }
            return Decision::Duplicate;
        }
        // A gap.
        if let Some((held, _)) = self.buffer.get(&m.seq) {
            if held.hash == m.hash {
                return Decision::Duplicate;
            }
            return self.refuse(Fork::SeqReused { seq: m.seq });
        }
        let lowest = self
            .buffer
            .keys()
            .next()
            .copied()
            .unwrap_or(m.seq)
            .min(m.seq);
        let resend = Some((expect, lowest - 1));
        if !buffering {
            return Decision::Dropped {
                reason: Drop::NotBuffered,
                resend: Some((expect, m.seq - 1)),
            };
        }
        if self.buffer.len() >= CHANNEL_MAX_BUFFERED_PER_PEER {
            return Decision::Dropped {
                reason: Drop::BufferFull,
                resend,
            };
        }
        self.buffer.insert(m.seq, (m.clone(), item));
        Decision::Buffered { resend }
    }

    fn drain(&mut self, mut items: Vec<T>) -> Decision<T> {
        loop {
            let (expect, prev) = self.expected();
            let Some((m, _)) = self.buffer.get(&expect) else {
                break;
            };
            if m.prev.as_deref() != prev {
                let Decision::Forked(f) = self.refuse(Fork::PrevMismatch { seq: expect }) else {
                    break;
                };
                return Decision::Deliver {
                    items,
                    fork: Some(f),
                };
            }
            if let Some((m, item)) = self.buffer.remove(&expect) {
                self.advance(&m);
                items.push(item);
            }
        }
        // Entries at or below the head can never be delivered now.
        if let Some((h, _)) = self.head {
            self.buffer.retain(|s, _| *s > h);
        }
        Decision::Deliver { items, fork: None }
    }

    /// The human re-synced this sender (§6.4): the next envelope newer than
    /// everything accepted becomes the head, and nothing older is taken again.
    pub fn human_resync(&mut self) {
        self.state = State::Resyncing;
        self.buffer.clear();
    }

    /// §6.4.1, the peer's side: a `rdv/restored` notice from an admitted
    /// sender (the caller checked admission and the envelope's signature).
    pub fn on_restored(&mut self, m: &Meta, now: Instant) -> RestoredDecision {
        if self.state == State::Forked {
            // A notice never lifts a refusal, perhaps from the very copy that forked.
            return RestoredDecision::Refused;
        }
        if self.recent.iter().any(|(_, h)| *h == m.hash)
            || self.newest.is_some_and(|n| m.created <= n)
        {
            return RestoredDecision::Replay;
        }
        let day_ago = now - time::Duration::days(1);
        while self.notices.front().is_some_and(|t| *t <= day_ago) {
            self.notices.pop_front();
        }
        if self.notices.len() >= RESTORED_MAX_PER_DAY {
            return RestoredDecision::RateLimited;
        }
        self.notices.push_back(now);
        self.state = State::Open;
        self.buffer.clear();
        self.advance(m);
        self.floor = Some(m.created);
        RestoredDecision::Rebased
    }

    /// §6.4.1, the restored side: the peer's `rdv/restored-ack`, already
    /// matched by the caller to the last notice sent to this peer (once).
    /// Moves the head forward only. An ack whose `prev` is null past seq 1
    /// names no head (§6.4: prev is null exactly for seq 1) and is ignored,
    /// so it cannot set the chain back to its start.
    pub fn on_restored_ack(&mut self, ack: &RestoredAck) {
        if (ack.from_seq == 1) != ack.prev.is_none() {
            return;
        }
        let (expect, _) = self.expected();
        if ack.from_seq > expect {
            self.head = ack.prev.clone().map(|p| (ack.from_seq - 1, p));
            let from = ack.from_seq;
            self.buffer.retain(|s, _| *s >= from);
        }
        self.floor = Some(self.floor.map_or(ack.floor, |f| f.max(ack.floor)));
    }
}

/// The peer's answer to a `rdv/restored` notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoredDecision {
    /// The notice is the sender's new head: tell the human and send the ack.
    Rebased,
    /// Not newer than what was accepted: a replayed notice, ignored.
    Replay,
    /// More than 3 notices from this sender in a day: ignored, human told.
    RateLimited,
    /// The chain was refused after a fork; only the human re-syncs it.
    Refused,
}

/// The `prev` of a restore notice on a chain that has sent nothing
/// (§6.4.1): the all-zero hash, which is no envelope's.
pub const NO_ENVELOPE: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One sent envelope kept for resends (§7). An agent may store each on its
/// own ([`Outbound::head`], [`Outbound::sent`], [`Outbound::from_parts`]), so
/// a send writes one entry rather than the whole outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sent {
    seq: u64,
    prev: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    created: Instant,
    envelope: Value,
}

impl Sent {
    /// The envelope's seq: its place in the outbox.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// [`Outbound`] without its outbox: the next seq and prev, and the notice
/// waiting for its ack (§6.4.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundHead {
    next_seq: u64,
    prev: Option<String>,
    last_notice: Option<String>,
}

/// Outbound state towards one peer: the next seq and prev, and the outbox of
/// the last 64 envelopes (§7). Deserializing checks the outbox bound.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(try_from = "OutboundRepr")]
pub struct Outbound {
    next_seq: u64,
    prev: Option<String>,
    outbox: VecDeque<Sent>,
    last_notice: Option<String>,
}

/// [`Outbound`] as stored, before its bound is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutboundRepr {
    next_seq: u64,
    prev: Option<String>,
    outbox: VecDeque<Sent>,
    last_notice: Option<String>,
}

impl TryFrom<OutboundRepr> for Outbound {
    type Error = String;

    fn try_from(r: OutboundRepr) -> std::result::Result<Self, String> {
        if r.outbox.len() > CHANNEL_OUTBOX {
            return Err("outbound channel outbox over 64".into());
        }
        Ok(Self {
            next_seq: r.next_seq,
            prev: r.prev,
            outbox: r.outbox,
            last_notice: r.last_notice,
        })
    }
}

impl Outbound {
    pub fn new() -> Self {
        Self {
            next_seq: 1,
            ..Self::default()
        }
    }

    /// (seq, prev) for the next envelope.
    pub fn next(&self) -> (u64, Option<&str>) {
        (self.next_seq.max(1), self.prev.as_deref())
    }

    /// The `created` for the next envelope at `now`: the current whole
    /// second, or one past the newest envelope still in the outbox when that
    /// is not earlier. Envelopes write `created` in whole seconds (§4.6), and
    /// a receiver that re-synced this chain (§6.4), or holds a restore floor
    /// (§6.4.1), takes only an envelope *newer* than everything it accepted:
    /// a second envelope in the same second would be dropped as a replay.
    /// A burst therefore runs ahead of the clock, by at most
    /// [`ENVELOPE_CREATED_MAX_LEAD_SECS`] (far inside the 5 minutes a
    /// receiver allows); past that, envelopes share a `created` until the
    /// clock catches up, and only a re-sync in that very burst could drop one.
    pub fn next_created(&self, now: Instant) -> Instant {
        let now = now.replace_nanosecond(0).unwrap_or(now);
        let lead = now + time::Duration::seconds(ENVELOPE_CREATED_MAX_LEAD_SECS);
        match self.outbox.back() {
            Some(s) if s.created >= now => (s.created + time::Duration::seconds(1)).min(lead),
            _ => now,
        }
    }

    /// Records a sealed envelope. Persist the state after this and before the
    /// envelope leaves, so a crash cannot reuse a seq (§7).
    pub fn record(&mut self, header: &Header, envelope: Value) {
        self.next_seq = header.seq + 1;
        self.prev = Some(header.hash.clone());
        self.outbox.push_back(Sent {
            seq: header.seq,
            prev: header.prev.clone(),
            created: header.created,
            envelope,
        });
        while self.outbox.len() > CHANNEL_OUTBOX {
            self.outbox.pop_front();
        }
    }

    /// Records that the notice envelope with this hash was sent (§6.4.1).
    pub fn record_notice(&mut self, hash: &str) {
        self.last_notice = Some(hash.to_string());
    }

    /// The hash of the notice sent last whose ack has not been taken (§6.4.1).
    pub fn pending_notice(&self) -> Option<&str> {
        self.last_notice.as_deref()
    }

    /// How many sent envelopes the outbox holds for resends (at most 64, §7).
    pub fn outbox_len(&self) -> usize {
        self.outbox.len()
    }

    /// The state without the outbox (stored apart from its entries).
    pub fn head(&self) -> OutboundHead {
        OutboundHead {
            next_seq: self.next_seq,
            prev: self.prev.clone(),
            last_notice: self.last_notice.clone(),
        }
    }

    /// The outbox, oldest first (seqs increasing).
    pub fn sent(&self) -> impl Iterator<Item = &Sent> {
        self.outbox.iter()
    }

    /// Puts a state back together from [`Outbound::head`] and the
    /// [`Outbound::sent`] entries, checked as strictly as a whole stored
    /// state: at most 64 entries (§7), in increasing seq, each below the
    /// next seq.
    pub fn from_parts(head: OutboundHead, sent: Vec<Sent>) -> std::result::Result<Self, String> {
        if sent.len() > CHANNEL_OUTBOX {
            return Err("outbound channel outbox over 64".into());
        }
        if sent.windows(2).any(|w| w[0].seq >= w[1].seq) {
            return Err("outbound channel outbox not in increasing seq".into());
        }
        if sent.last().is_some_and(|s| s.seq >= head.next_seq) {
            return Err("outbound channel outbox holds a seq not below the next".into());
        }
        Ok(Self {
            next_seq: head.next_seq,
            prev: head.prev,
            outbox: sent.into(),
            last_notice: head.last_notice,
        })
    }

    /// Answers `rdv/resend`: what the outbox still holds of the range.
    pub fn resend(&self, from: u64, to: u64) -> Vec<&Value> {
        self.outbox
            .iter()
            .filter(|s| s.seq >= from && s.seq <= to)
            .map(|s| &s.envelope)
            .collect()
    }

    /// §6.4.1, the restored side: the outbound epoch jumps to at least the
    /// restore time in milliseconds, and the notice to send first. A chain
    /// with nothing sent jumps too, after [`NO_ENVELOPE`]: the copy that was
    /// lost may have opened it after the backup, and §6.4 allows a null
    /// prev only at seq 1 (the peer re-bases on the notice whatever its prev).
    pub fn restore(
        &mut self,
        restore_time: Instant,
        in_seq: u64,
        backup_created: Option<Instant>,
    ) -> Value {
        let ms = (restore_time.unix_timestamp_nanos() / 1_000_000).max(0) as u64;
        self.next_seq = self.next_seq.max(ms);
        if self.next_seq > 1 && self.prev.is_none() {
            self.prev = Some(NO_ENVELOPE.to_string());
        }
        Restored {
            in_seq,
            backup_created,
        }
        .to_value()
    }

    /// §6.4.1, the peer's side: the ack for a notice whose envelope hash is
    /// `notice`, and the envelopes to resend after `in_seq`. `now` is the
    /// `created` of the envelope that will carry the ack.
    pub fn ack(&self, notice: &str, in_seq: u64, now: Instant) -> (Value, Vec<&Value>) {
        let held: Vec<&Sent> = self.outbox.iter().filter(|s| s.seq > in_seq).collect();
        // §6.4.1: floor is just before the created of the envelope at
        // from_seq, in milliseconds as it is written. Holding none, that is
        // the next one, which we seal at `now` in whole seconds (§4.6).
        let before = time::Duration::milliseconds(RESTORED_FLOOR_BEFORE_MS);
        let (from_seq, prev, created) = match held.first() {
            Some(s) => (s.seq, s.prev.clone(), s.created),
            None => (
                self.next().0,
                self.prev.clone(),
                now.replace_nanosecond(0).unwrap_or(now),
            ),
        };
        let floor = truncate_ms(created - before);
        let ack = RestoredAck {
            notice: notice.to_string(),
            from_seq,
            prev,
            floor,
        };
        (ack.to_value(), held.iter().map(|s| &s.envelope).collect())
    }

    /// True once for the ack of the notice sent last (§6.4.1: "once").
    pub fn take_ack(&mut self, ack: &RestoredAck) -> bool {
        if self.last_notice.as_deref() == Some(ack.notice.as_str()) {
            self.last_notice = None;
            true
        } else {
            false
        }
    }
}

/// `{"type": "rdv/resend", "from_seq": n, "to_seq": m}` (§7).
pub fn resend_payload(from: u64, to: u64) -> Value {
    json!({"type": "rdv/resend", "from_seq": from, "to_seq": to})
}

/// Parses `rdv/resend` strictly: 1 ≤ from ≤ to, at most an outbox (64) wide.
pub fn parse_resend(v: &Value) -> Result<(u64, u64)> {
    let mut o = Obj::new(v, "resend")?;
    o.doc_type("rdv/resend")?;
    let from = o.positive("from_seq")? as u64;
    let to = o.positive("to_seq")? as u64;
    o.deny_unknown()?;
    if to < from || to - from >= CHANNEL_OUTBOX as u64 {
        return Err(Error::shape(
            "resend",
            "need from_seq ≤ to_seq, at most 64 apart",
        ));
    }
    Ok((from, to))
}

/// Inbound channels for every admitted sender, with the §7 buffer bound of
/// 16 peers × 64 envelopes. Ordered by agent ID, so it serializes the same
/// way each time.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    bound(serialize = "T: Serialize", deserialize = "T: DeserializeOwned")
)]
pub struct Channels<T> {
    peers: BTreeMap<AgentId, Inbound<T>>,
}

impl<T> Default for Channels<T> {
    fn default() -> Self {
        Self {
            peers: BTreeMap::new(),
        }
    }
}

impl<T> Channels<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, from: &AgentId) -> Option<&Inbound<T>> {
        self.peers.get(from)
    }

    pub fn get_mut(&mut self, from: &AgentId) -> Option<&mut Inbound<T>> {
        self.peers.get_mut(from)
    }

    /// Starts keeping state for a sender just admitted, anchored at `first`.
    pub fn admit(&mut self, from: AgentId, first: Option<&Meta>) {
        self.peers
            .entry(from)
            .or_insert_with(|| first.map_or_else(Inbound::new, Inbound::anchored));
    }

    /// Forgets a sender (revoked, blocked, left every group).
    pub fn forget(&mut self, from: &AgentId) {
        self.peers.remove(from);
    }

    /// Puts back one sender's saved state (a store loading its records).
    pub fn insert(&mut self, from: AgentId, chan: Inbound<T>) {
        self.peers.insert(from, chan);
    }

    /// Every sender that holds state, in agent ID order.
    pub fn iter(&self) -> impl Iterator<Item = (&AgentId, &Inbound<T>)> {
        self.peers.iter()
    }

    /// How many senders hold state.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Feeds one envelope. A [`Admission::Stranger`] keeps no state: its
    /// envelope is delivered alone, whatever its seq (§6.4).
    pub fn receive(
        &mut self,
        from: &AgentId,
        admission: Admission,
        m: &Meta,
        item: T,
    ) -> Decision<T> {
        if admission == Admission::Stranger && !self.peers.contains_key(from) {
            return Decision::Deliver {
                items: vec![item],
                fork: None,
            };
        }
        let others_buffering = self
            .peers
            .iter()
            .filter(|(id, c)| *id != from && c.buffered() > 0)
            .count();
        let chan = self.peers.entry(from.clone()).or_default();
        let may_buffer = admission == Admission::Buffered;
        let room = chan.buffered() > 0 || others_buffering < CHANNEL_MAX_BUFFERED_PEERS;
        match chan.receive(m, item, may_buffer && room) {
            Decision::Dropped {
                reason: Drop::NotBuffered,
                resend,
            } if may_buffer => Decision::Dropped {
                reason: Drop::TooManyPeers,
                resend,
            },
            d => d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_time;

    fn t(s: i64) -> Instant {
        parse_time("t", "2026-10-08T00:00:00Z").unwrap() + time::Duration::seconds(s)
    }

    fn h(n: u64, salt: &str) -> String {
        format!("{:0>64}", format!("{n}{salt}"))
    }

    /// A chain of metas: seq i has prev = hash of i-1.
    fn chain(n: u64, salt: &str) -> Vec<Meta> {
        (1..=n)
            .map(|i| Meta {
                seq: i,
                prev: (i > 1).then(|| h(i - 1, salt)),
                hash: h(i, salt),
                created: t(i as i64 * 10),
            })
            .collect()
    }

    fn delivered(d: Decision<u64>) -> Vec<u64> {
        match d {
            Decision::Deliver { items, fork: None } => items,
            other => panic!("expected delivery, got {other:?}"),
        }
    }

    #[test]
    fn in_order_delivery_and_replay_dropped() {
        let c = chain(3, "a");
        let mut ch = Inbound::new();
        for m in &c {
            assert_eq!(delivered(ch.receive(m, m.seq, true)), vec![m.seq]);
        }
        assert_eq!(
            ch.receive(&c[1], 2, true),
            Decision::Duplicate,
            "relay replay dropped silently"
        );
        assert_eq!(ch.head().unwrap().0, 3);
    }

    #[test]
    fn gap_is_buffered_then_drained_with_resend_range() {
        let c = chain(5, "a");
        let mut ch = Inbound::new();
        delivered(ch.receive(&c[0], 1, true));
        assert_eq!(
            ch.receive(&c[3], 4, true),
            Decision::Buffered {
                resend: Some((2, 3))
            }
        );
        assert_eq!(
            ch.receive(&c[4], 5, true),
            Decision::Buffered {
                resend: Some((2, 3))
            }
        );
        assert_eq!(
            ch.receive(&c[2], 3, true),
            Decision::Buffered {
                resend: Some((2, 2))
            }
        );
        assert_eq!(delivered(ch.receive(&c[1], 2, true)), vec![2, 3, 4, 5]);
        assert_eq!(ch.buffered(), 0);
    }

    #[test]
    fn buffer_is_bounded_per_peer() {
        let c = chain(CHANNEL_MAX_BUFFERED_PER_PEER as u64 + 3, "a");
        let mut ch = Inbound::new();
        for m in &c[2..2 + CHANNEL_MAX_BUFFERED_PER_PEER] {
            assert!(matches!(
                ch.receive(m, m.seq, true),
                Decision::Buffered { .. }
            ));
        }
        let last = &c[2 + CHANNEL_MAX_BUFFERED_PER_PEER];
        assert!(matches!(
            ch.receive(last, last.seq, true),
            Decision::Dropped {
                reason: Drop::BufferFull,
                ..
            }
        ));
    }

    #[test]
    fn buffers_are_bounded_across_peers() {
        let mut chans: Channels<u64> = Channels::new();
        let c = chain(3, "a");
        for i in 0..CHANNEL_MAX_BUFFERED_PEERS as u8 {
            let id = crate::AgentKey::from_seed([i; 32]).id().clone();
            assert!(matches!(
                chans.receive(&id, Admission::Buffered, &c[2], 3),
                Decision::Buffered { .. }
            ));
        }
        let extra = crate::AgentKey::from_seed([200; 32]).id().clone();
        assert!(matches!(
            chans.receive(&extra, Admission::Buffered, &c[2], 3),
            Decision::Dropped {
                reason: Drop::TooManyPeers,
                ..
            }
        ));
        // In-order envelopes from that peer still flow.
        assert_eq!(
            delivered(chans.receive(&extra, Admission::Buffered, &c[0], 1)),
            vec![1]
        );
    }

    #[test]
    fn tracked_peers_do_not_buffer() {
        let mut chans: Channels<u64> = Channels::new();
        let id = crate::AgentKey::from_seed([1; 32]).id().clone();
        let c = chain(3, "a");
        assert_eq!(
            chans.receive(&id, Admission::Tracked, &c[2], 3),
            Decision::Dropped {
                reason: Drop::NotBuffered,
                resend: Some((1, 2))
            }
        );
    }

    #[test]
    fn strangers_keep_no_state() {
        let mut chans: Channels<u64> = Channels::new();
        let c = chain(9, "a");
        for i in 0..1000u16 {
            let mut seed = [0u8; 32];
            seed[..2].copy_from_slice(&i.to_be_bytes());
            let id = crate::AgentKey::from_seed(seed).id().clone();
            assert_eq!(
                delivered(chans.receive(&id, Admission::Stranger, &c[8], 9)),
                vec![9]
            );
        }
        assert!(chans.is_empty(), "no state per unknown sender");
    }

    #[test]
    fn reused_seq_in_window_is_a_fork_and_refuses_until_resync() {
        let c = chain(3, "a");
        let alt = chain(3, "b");
        let mut ch = Inbound::new();
        for m in &c {
            delivered(ch.receive(m, m.seq, true));
        }
        let mut forked = alt[1].clone();
        forked.prev = Some(h(1, "a"));
        assert_eq!(
            ch.receive(&forked, 2, true),
            Decision::Forked(Fork::SeqReused { seq: 2 })
        );
        let next = Meta {
            seq: 4,
            prev: Some(h(3, "a")),
            hash: h(4, "a"),
            created: t(40),
        };
        assert_eq!(
            ch.receive(&next, 4, true),
            Decision::Refused,
            "not accepted on its own"
        );
        assert!(ch.refused().is_some());
    }

    #[test]
    fn prev_mismatch_is_a_fork() {
        let c = chain(2, "a");
        let mut ch = Inbound::new();
        delivered(ch.receive(&c[0], 1, true));
        let bad = Meta {
            seq: 2,
            prev: Some(h(9, "x")),
            hash: h(2, "x"),
            created: t(20),
        };
        assert_eq!(
            ch.receive(&bad, 2, true),
            Decision::Forked(Fork::PrevMismatch { seq: 2 })
        );
    }

    #[test]
    fn reused_seq_below_window_fork_if_newer_else_replay() {
        let c = chain(20, "a");
        let mut ch = Inbound::new();
        for m in &c {
            delivered(ch.receive(m, m.seq, true));
        }
        // seq 2 is below the 8-hash window.
        let old = Meta {
            seq: 2,
            prev: Some(h(1, "a")),
            hash: h(2, "old"),
            created: t(5),
        };
        assert_eq!(
            ch.receive(&old, 2, true),
            Decision::Duplicate,
            "indistinguishable from a replay"
        );
        let newer = Meta {
            seq: 2,
            prev: Some(h(1, "a")),
            hash: h(2, "new"),
            created: t(500),
        };
        assert_eq!(
            ch.receive(&newer, 2, true),
            Decision::Forked(Fork::SeqReused { seq: 2 })
        );
    }

    #[test]
    fn human_resync_adopts_next_newer_and_sets_floor() {
        let c = chain(3, "a");
        let mut ch = Inbound::new();
        for m in &c {
            delivered(ch.receive(m, m.seq, true));
        }
        let fork = Meta {
            seq: 2,
            prev: Some(h(1, "a")),
            hash: h(2, "b"),
            created: t(25),
        };
        assert!(matches!(ch.receive(&fork, 2, true), Decision::Forked(_)));
        ch.human_resync();
        // A replay of the old chain is never newer: a duplicate.
        let old_replay = Meta {
            seq: 2,
            prev: Some(h(1, "b")),
            hash: h(2, "zz"),
            created: t(30),
        };
        assert_eq!(ch.receive(&old_replay, 2, true), Decision::Duplicate);
        // The next newer envelope becomes the head, whatever its seq or prev.
        let newer = Meta {
            seq: 7,
            prev: Some(h(6, "b")),
            hash: h(7, "b"),
            created: t(100),
        };
        assert_eq!(delivered(ch.receive(&newer, 7, true)), vec![7]);
        assert_eq!(ch.head().unwrap().0, 7);
        // Anything not newer than the old chain's newest stays a duplicate.
        let stale = Meta {
            seq: 8,
            prev: Some(h(7, "b")),
            hash: h(8, "q"),
            created: t(30),
        };
        assert_eq!(ch.receive(&stale, 8, true), Decision::Duplicate);
        let next = Meta {
            seq: 8,
            prev: Some(h(7, "b")),
            hash: h(8, "b"),
            created: t(110),
        };
        assert_eq!(delivered(ch.receive(&next, 8, true)), vec![8]);
    }

    #[test]
    fn restored_notice_rebases_but_never_lifts_a_fork() {
        let c = chain(3, "a");
        let mut ch = Inbound::new();
        for m in &c {
            delivered(ch.receive(m, m.seq, true));
        }
        let notice = Meta {
            seq: 1_791_417_600_000,
            prev: Some(h(1, "a")),
            hash: h(99, "n"),
            created: t(100),
        };
        assert_eq!(ch.on_restored(&notice, t(100)), RestoredDecision::Rebased);
        assert_eq!(ch.on_restored(&notice, t(100)), RestoredDecision::Replay);
        // Envelopes not newer than the notice are replays of the old chain.
        let old = Meta {
            seq: 4,
            prev: Some(h(3, "a")),
            hash: h(4, "a"),
            created: t(40),
        };
        assert_eq!(ch.receive(&old, 4, true), Decision::Duplicate);
        let next = Meta {
            seq: notice.seq + 1,
            prev: Some(notice.hash.clone()),
            hash: h(100, "n"),
            created: t(110),
        };
        assert_eq!(delivered(ch.receive(&next, 0, true)), vec![0]);

        let mut forked: Inbound<u64> = Inbound::new();
        delivered(forked.receive(&c[0], 1, true));
        let f = Meta {
            seq: 1,
            prev: None,
            hash: h(1, "z"),
            created: t(15),
        };
        assert!(matches!(forked.receive(&f, 1, true), Decision::Forked(_)));
        assert_eq!(
            forked.on_restored(&notice, t(100)),
            RestoredDecision::Refused
        );
    }

    #[test]
    fn restored_notices_rate_limited_per_day() {
        let mut ch: Inbound<u64> = Inbound::new();
        for i in 0..RESTORED_MAX_PER_DAY as i64 {
            let n = Meta {
                seq: 10 + i as u64,
                prev: None,
                hash: h(50 + i as u64, "n"),
                created: t(100 + i),
            };
            assert_eq!(ch.on_restored(&n, t(100 + i)), RestoredDecision::Rebased);
        }
        let n = Meta {
            seq: 99,
            prev: None,
            hash: h(99, "n"),
            created: t(200),
        };
        assert_eq!(ch.on_restored(&n, t(200)), RestoredDecision::RateLimited);
        assert_eq!(
            ch.on_restored(&n, t(200 + 86400)),
            RestoredDecision::Rebased,
            "a day later it is allowed"
        );
    }

    #[test]
    fn outbound_restore_ack_and_resend() {
        let mut out = Outbound::new();
        let a = crate::AgentKey::from_seed([1; 32]);
        let b = crate::AgentKey::from_seed([2; 32]);
        let mut prev: Option<String> = None;
        for seq in 1..=3u64 {
            let p = crate::envelope::SealParams {
                from: &a,
                to: b.id(),
                seq,
                prev: prev.as_deref(),
                created: t(seq as i64),
                ttl: "48h",
                ephemeral: [seq as u8; 32],
                nonce: [1; 12],
            };
            let env = crate::envelope::seal(&json!({"type": "x"}), &p).unwrap();
            let hd = crate::envelope::verify(&crate::canon::to_vec(&env).unwrap(), t(10))
                .unwrap()
                .into_parts()
                .0;
            out.record(&hd, env);
            prev = Some(hd.hash);
        }
        assert_eq!(out.next().0, 4);
        assert_eq!(out.resend(2, 3).len(), 2);
        let (ack, resent) = out.ack(&h(1, "n"), 1, t(50));
        assert_eq!(resent.len(), 2);
        assert_eq!(ack["from_seq"], 2);
        assert_eq!(ack["floor"], "2026-10-08T00:00:01.999Z", "created − 1 ms");
        let notice = out.restore(t(1000), 5, None);
        assert!(
            out.next().0 >= 1_791_417_600_000,
            "epoch jumps to restore time in ms"
        );
        assert_eq!(notice["in_seq"], 5);
    }

    #[test]
    fn restored_ack_taken_once_and_moves_head_forward_only() {
        let mut out = Outbound::new();
        out.record_notice(&h(1, "n"));
        let ack = RestoredAck {
            notice: h(1, "n"),
            from_seq: 9,
            prev: Some(h(8, "p")),
            floor: t(70),
        };
        assert!(out.take_ack(&ack));
        assert!(!out.take_ack(&ack), "once");
        let mut inb: Inbound<u64> = Inbound::new();
        inb.on_restored_ack(&ack);
        assert_eq!(inb.head(), Some((8, h(8, "p").as_str())));
        let replay = Meta {
            seq: 9,
            prev: Some(h(8, "p")),
            hash: h(9, "p"),
            created: t(60),
        };
        assert_eq!(
            inb.receive(&replay, 9, true),
            Decision::Duplicate,
            "not newer than floor"
        );
        let fresh = Meta {
            seq: 9,
            prev: Some(h(8, "p")),
            hash: h(9, "q"),
            created: t(80),
        };
        assert_eq!(delivered(inb.receive(&fresh, 9, true)), vec![9]);
        let behind = RestoredAck {
            notice: h(1, "n"),
            from_seq: 3,
            prev: Some(h(2, "p")),
            floor: t(10),
        };
        inb.on_restored_ack(&behind);
        assert_eq!(inb.head().unwrap().0, 9, "never backwards");
    }

    #[test]
    fn resend_shape() {
        assert_eq!(parse_resend(&resend_payload(2, 5)).unwrap(), (2, 5));
        for bad in [
            json!({"type": "rdv/resend", "from_seq": 5, "to_seq": 2}),
            json!({"type": "rdv/resend", "from_seq": 0, "to_seq": 2}),
            json!({"type": "rdv/resend", "from_seq": 1, "to_seq": 65}),
            json!({"type": "rdv/resend", "from_seq": 1, "to_seq": 2, "x": 1}),
        ] {
            assert!(parse_resend(&bad).is_err(), "{bad} accepted");
        }
    }

    /// A time with a nanosecond part, so any rounding in a snapshot shows.
    fn tn(s: i64, ns: i64) -> Instant {
        t(s) + time::Duration::nanoseconds(ns)
    }

    fn id(n: u8) -> AgentId {
        crate::AgentKey::from_seed([n; 32]).id().clone()
    }

    fn meta(seq: u64, prev: Option<String>, hash: String, created: Instant) -> Meta {
        Meta {
            seq,
            prev,
            hash,
            created,
        }
    }

    /// Saved and restored as a store would: JSON text and back. Writing the
    /// copy again gives the same text.
    fn snapshot<S: Serialize + DeserializeOwned>(s: &S) -> S {
        let text = serde_json::to_string(s).unwrap();
        let back: S = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
        back
    }

    /// Cuts the script after every step, restores a copy from a snapshot,
    /// and feeds the copy and the live state the rest: every output and
    /// every observation must be the same.
    fn replay_from_every_snapshot<S, I, O>(
        fresh: S,
        steps: &[I],
        apply: impl Fn(&mut S, &I) -> O,
        observe: impl Fn(&S) -> String,
    ) where
        S: Clone + Serialize + DeserializeOwned + std::fmt::Debug,
        O: PartialEq + std::fmt::Debug,
    {
        replay_from_every_copy(fresh, steps, apply, observe, snapshot)
    }

    /// [`replay_from_every_snapshot`] with any way of copying the state.
    fn replay_from_every_copy<S, I, O>(
        fresh: S,
        steps: &[I],
        apply: impl Fn(&mut S, &I) -> O,
        observe: impl Fn(&S) -> String,
        copy_of: impl Fn(&S) -> S,
    ) where
        S: Clone + std::fmt::Debug,
        O: PartialEq + std::fmt::Debug,
    {
        for cut in 0..=steps.len() {
            let mut live = fresh.clone();
            for step in &steps[..cut] {
                apply(&mut live, step);
            }
            let mut copy = copy_of(&live);
            // Debug shows every private field, times at full precision.
            assert_eq!(format!("{copy:?}"), format!("{live:?}"), "after step {cut}");
            for (i, step) in steps.iter().enumerate().skip(cut) {
                assert_eq!(
                    apply(&mut copy, step),
                    apply(&mut live, step),
                    "restored after step {cut}, step {i}"
                );
                assert_eq!(
                    observe(&copy),
                    observe(&live),
                    "restored after step {cut}, step {i}"
                );
            }
        }
    }

    #[derive(Debug, Clone)]
    enum In {
        Recv(u8, Admission, Meta, u64),
        Resync(u8),
        Notice(u8, Meta, Instant),
        Ack(u8, RestoredAck),
        Admit(u8, Option<Meta>),
        Forget(u8),
    }

    #[derive(Debug, PartialEq)]
    enum InOut {
        Decision(Decision<u64>),
        Restored(Option<RestoredDecision>),
        Unit,
    }

    /// In order, a gap buffered and drained, replays, a fork and the refusal,
    /// a notice refused, the human's re-sync, the floor, restore notices up to
    /// the daily cap, an ack, a tracked peer, a stranger, an anchored admit,
    /// a gap left open and a forgotten peer. Times carry nanoseconds, and
    /// inputs sit exactly on the stored times (a rounded copy decides otherwise).
    fn inbound_script() -> Vec<In> {
        use Admission::{Buffered, Stranger, Tracked};
        let a = |i: u64| h(i, "a");
        let m = |seq: u64, prev: Option<String>, hash: String, c: Instant| meta(seq, prev, hash, c);
        let mut s = vec![
            In::Recv(1, Buffered, m(1, None, a(1), tn(10, 111)), 1),
            In::Recv(1, Buffered, m(2, Some(a(1)), a(2), tn(20, 222)), 2),
            In::Recv(1, Buffered, m(4, Some(a(3)), a(4), tn(40, 444)), 4),
            In::Recv(1, Buffered, m(5, Some(a(4)), a(5), tn(50, 555)), 5),
            In::Recv(1, Buffered, m(3, Some(a(2)), a(3), tn(30, 333)), 3),
            In::Recv(1, Buffered, m(3, Some(a(2)), a(3), tn(30, 333)), 3),
            // A different envelope at seq 1, older than all: in the 8-hash
            // window, so a fork, not a replay; then everything is refused.
            In::Recv(1, Buffered, m(1, None, h(1, "b"), tn(5, 0)), 40),
            In::Recv(1, Buffered, m(6, Some(a(5)), a(6), tn(60, 0)), 6),
            In::Notice(1, m(900, Some(a(5)), h(900, "n"), tn(70, 0)), tn(70, 0)),
            In::Resync(1),
            // Exactly the old chain's newest: a replay.
            In::Recv(
                1,
                Buffered,
                m(7, Some(h(6, "b")), h(7, "b"), tn(50, 555)),
                7,
            ),
            // One nanosecond newer: the new head.
            In::Recv(
                1,
                Buffered,
                m(8, Some(h(7, "b")), h(8, "b"), tn(50, 556)),
                8,
            ),
            // At the floor (the old newest), in order: still a replay.
            In::Recv(
                1,
                Buffered,
                m(9, Some(h(8, "b")), h(9, "x"), tn(50, 555)),
                90,
            ),
            In::Recv(1, Buffered, m(9, Some(h(8, "b")), h(9, "b"), tn(90, 9)), 9),
        ];
        // Three notices in a day are taken, a fourth a nanosecond short of a
        // day after the first is not, one a full day after is.
        for (i, ns) in [(0u64, 1i64), (1, 2), (2, 3)] {
            let c = tn(100 + i as i64, ns);
            s.push(In::Notice(1, m(1000 + i, None, h(1000 + i, "n"), c), c));
        }
        let day = 86_400;
        s.push(In::Notice(
            1,
            m(2000, None, h(2000, "n"), tn(200, 0)),
            tn(100 + day, 0),
        ));
        s.push(In::Notice(
            1,
            m(2001, None, h(2001, "n"), tn(201, 0)),
            tn(100 + day, 1),
        ));
        // The chain goes on after the notice; then the peer's ack moves the
        // head forward, and nothing at or before its floor is taken.
        s.push(In::Recv(
            1,
            Buffered,
            m(2002, Some(h(2001, "n")), h(2002, "n"), tn(300, 7)),
            2002,
        ));
        s.push(In::Ack(
            1,
            RestoredAck {
                notice: h(1, "notice"),
                from_seq: 3000,
                prev: Some(h(2999, "p")),
                floor: tn(400, 77),
            },
        ));
        s.push(In::Recv(
            1,
            Buffered,
            m(3000, Some(h(2999, "p")), h(3000, "old"), tn(400, 77)),
            3000,
        ));
        s.push(In::Recv(
            1,
            Buffered,
            m(3000, Some(h(2999, "p")), h(3000, "p"), tn(400, 78)),
            3001,
        ));
        // A tracked peer does not buffer; a stranger keeps no state.
        s.push(In::Recv(
            2,
            Tracked,
            m(2, Some(h(1, "t")), h(2, "t"), tn(5, 5)),
            22,
        ));
        s.push(In::Recv(2, Tracked, m(1, None, h(1, "t"), tn(4, 4)), 21));
        s.push(In::Recv(
            3,
            Stranger,
            m(7, Some(h(6, "s")), h(7, "s"), tn(5, 5)),
            37,
        ));
        // An anchored admit, then a gap held open with its item.
        s.push(In::Admit(
            4,
            Some(m(40, Some(h(39, "d")), h(40, "d"), tn(8, 8))),
        ));
        s.push(In::Recv(
            4,
            Buffered,
            m(42, Some(h(41, "d")), h(42, "d"), tn(9, 9)),
            42,
        ));
        s.push(In::Forget(2));
        s.push(In::Recv(
            2,
            Tracked,
            m(3, Some(h(2, "t")), h(3, "t"), tn(6, 6)),
            23,
        ));
        s.push(In::Recv(
            4,
            Buffered,
            m(41, Some(h(40, "d")), h(41, "d"), tn(9, 1)),
            41,
        ));
        s
    }

    fn observe_inbound(c: &Inbound<u64>) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {} {} {}",
            c.head(),
            c.newest(),
            c.floor(),
            c.refused(),
            c.is_refused(),
            c.is_resyncing(),
            c.buffered()
        )
    }

    #[test]
    fn channels_restored_from_any_snapshot_decide_identically() {
        let apply = |c: &mut Channels<u64>, step: &In| match step {
            In::Recv(p, adm, m, item) => InOut::Decision(c.receive(&id(*p), *adm, m, *item)),
            In::Resync(p) => {
                c.get_mut(&id(*p)).unwrap().human_resync();
                InOut::Unit
            }
            In::Notice(p, m, now) => {
                InOut::Restored(c.get_mut(&id(*p)).map(|ch| ch.on_restored(m, *now)))
            }
            In::Ack(p, ack) => {
                c.get_mut(&id(*p)).unwrap().on_restored_ack(ack);
                InOut::Unit
            }
            In::Admit(p, first) => {
                c.admit(id(*p), first.as_ref());
                InOut::Unit
            }
            In::Forget(p) => {
                c.forget(&id(*p));
                InOut::Unit
            }
        };
        let observe = |c: &Channels<u64>| {
            let peers: Vec<String> = c
                .iter()
                .map(|(id, ch)| format!("{id} {}", observe_inbound(ch)))
                .collect();
            format!("{} {peers:?}", c.len())
        };
        let script = inbound_script();
        // The script reaches every decision it means to.
        let mut live = Channels::new();
        let outs: Vec<InOut> = script.iter().map(|st| apply(&mut live, st)).collect();
        let has = |f: &dyn Fn(&InOut) -> bool| outs.iter().any(f);
        assert!(has(&|o| matches!(
            o,
            InOut::Decision(Decision::Buffered { .. })
        )));
        assert!(has(&|o| matches!(o, InOut::Decision(Decision::Forked(_)))));
        assert!(has(&|o| matches!(o, InOut::Decision(Decision::Refused))));
        assert!(has(&|o| matches!(
            o,
            InOut::Decision(Decision::Dropped {
                reason: Drop::NotBuffered,
                ..
            })
        )));
        assert!(has(
            &|o| *o == InOut::Restored(Some(RestoredDecision::Refused))
        ));
        assert!(has(
            &|o| *o == InOut::Restored(Some(RestoredDecision::RateLimited))
        ));
        assert_eq!(
            outs[4],
            InOut::Decision(Decision::Deliver {
                items: vec![3, 4, 5],
                fork: None
            })
        );
        assert_eq!(live.get(&id(4)).unwrap().head().unwrap().0, 42);
        replay_from_every_snapshot(Channels::new(), &script, apply, observe);
    }

    #[test]
    fn inbound_restored_from_any_snapshot_decides_identically() {
        let script: Vec<In> = inbound_script()
            .into_iter()
            .filter(|s| {
                matches!(
                    s,
                    In::Recv(1, ..) | In::Resync(1) | In::Notice(1, ..) | In::Ack(1, _)
                )
            })
            .collect();
        let apply = |c: &mut Inbound<u64>, step: &In| match step {
            In::Recv(_, adm, m, item) => {
                InOut::Decision(c.receive(m, *item, *adm == Admission::Buffered))
            }
            In::Resync(_) => {
                c.human_resync();
                InOut::Unit
            }
            In::Notice(_, m, now) => InOut::Restored(Some(c.on_restored(m, *now))),
            In::Ack(_, ack) => {
                c.on_restored_ack(ack);
                InOut::Unit
            }
            In::Admit(..) | In::Forget(_) => InOut::Unit,
        };
        replay_from_every_snapshot(Inbound::new(), &script, apply, observe_inbound);
    }

    #[derive(Debug, Clone)]
    enum Out {
        Record(u64, Option<String>, String, Instant),
        Notice(String),
        Resend(u64, u64),
        Ack(String, u64, Instant),
        TakeAck(String),
        Restore(Instant, u64, Option<Instant>),
        Many(u64),
    }

    #[derive(Debug, PartialEq)]
    enum OutOut {
        Values(Vec<Value>),
        Ack(Value, Vec<Value>),
        Took(bool),
        Notice(Value),
    }

    fn header(seq: u64, prev: Option<String>, hash: String, created: Instant) -> Header {
        Header {
            from: id(1),
            to: id(2),
            seq,
            prev,
            created_raw: crate::time::format_time(created),
            created,
            ttl_secs: 172_800,
            hash,
        }
    }

    #[test]
    fn next_created_is_newer_than_every_envelope_sent() {
        let mut out = Outbound::new();
        let half = time::Duration::milliseconds(500);
        assert_eq!(out.next_created(t(10) + half), t(10), "whole seconds");
        // Three envelopes within one second: each one newer than the last.
        for (i, want) in [t(10), t(11), t(12)].into_iter().enumerate() {
            let c = out.next_created(t(10) + half);
            assert_eq!(c, want);
            out.record(&header(i as u64 + 1, None, h(i as u64, "c"), c), json!({}));
        }
        // Once the clock passes the burst, it is the clock again.
        assert_eq!(out.next_created(t(40)), t(40));
        // A long burst within one second stops 60 s ahead, never further
        // (receivers refuse 5 minutes ahead, §6.4), and never goes back.
        let mut last = t(40);
        for i in 0..200u64 {
            let c = out.next_created(t(40) + half);
            assert!(c >= last && c <= t(100), "{i}: {c}");
            out.record(&header(i + 10, None, h(i, "b"), c), json!({}));
            last = c;
        }
        assert_eq!(last, t(100));
    }

    #[test]
    fn outbound_restored_from_any_snapshot_decides_identically() {
        let o = |i: u64| h(i, "o");
        let env = |seq: u64| json!({"seq": seq, "text": format!("envelope {seq}")});
        let script = vec![
            Out::Record(1, None, o(1), tn(1, 1)),
            Out::Record(2, Some(o(1)), o(2), tn(2, 2)),
            Out::Record(3, Some(o(2)), o(3), tn(3, 3)),
            Out::Resend(2, 3),
            Out::Notice(h(1, "n")),
            Out::TakeAck(h(2, "n")),
            Out::Ack(h(9, "peer"), 1, tn(10, 10)),
            Out::Ack(h(9, "peer"), 3, tn(10, 10)),
            Out::Restore(tn(1000, 1_000_001), 5, Some(tn(500, 123))),
            Out::Record(1_791_418_600_001, Some(o(3)), o(4), tn(1000, 5)),
            Out::TakeAck(h(1, "n")),
            Out::TakeAck(h(1, "n")),
            Out::Many(70),
            Out::Resend(1, 64),
            Out::Ack(h(9, "peer"), 0, tn(2000, 0)),
        ];
        let apply = |c: &mut Outbound, step: &Out| {
            let r = match step {
                Out::Record(seq, prev, hash, created) => {
                    c.record(
                        &header(*seq, prev.clone(), hash.clone(), *created),
                        env(*seq),
                    );
                    OutOut::Values(vec![])
                }
                Out::Notice(n) => {
                    c.record_notice(n);
                    OutOut::Values(vec![])
                }
                Out::Resend(from, to) => {
                    OutOut::Values(c.resend(*from, *to).into_iter().cloned().collect())
                }
                Out::Ack(n, in_seq, now) => {
                    let (ack, resent) = c.ack(n, *in_seq, *now);
                    OutOut::Ack(ack, resent.into_iter().cloned().collect())
                }
                Out::TakeAck(n) => OutOut::Took(c.take_ack(&RestoredAck {
                    notice: n.clone(),
                    from_seq: 1,
                    prev: None,
                    floor: t(0),
                })),
                Out::Restore(at, in_seq, backup) => {
                    OutOut::Notice(c.restore(*at, *in_seq, *backup))
                }
                Out::Many(n) => {
                    for _ in 0..*n {
                        let (seq, prev) = c.next();
                        let prev = prev.map(str::to_string);
                        c.record(
                            &header(seq, prev, h(seq, "m"), tn(seq as i64 % 997, 3)),
                            env(seq),
                        );
                    }
                    OutOut::Values(vec![])
                }
            };
            (r, c.next().0, c.next().1.map(str::to_string))
        };
        let observe =
            |c: &Outbound| format!("{} {:?} {:?}", c.outbox_len(), c.pending_notice(), c.next());
        let mut live = Outbound::new();
        for st in &script {
            apply(&mut live, st);
        }
        assert_eq!(live.outbox_len(), CHANNEL_OUTBOX);
        replay_from_every_snapshot(Outbound::new(), &script, apply, observe);
        // Stored as a head and one record per entry, as the agent keeps it.
        replay_from_every_copy(Outbound::new(), &script, apply, observe, split_snapshot);
    }

    /// Saved as [`Outbound::head`] and each [`Outbound::sent`] entry apart,
    /// as JSON text, and put back with [`Outbound::from_parts`].
    fn split_snapshot(o: &Outbound) -> Outbound {
        let head: OutboundHead = snapshot(&o.head());
        let sent: Vec<Sent> = o.sent().map(snapshot).collect();
        Outbound::from_parts(head, sent).unwrap()
    }

    #[test]
    fn outbound_parts_are_read_strictly() {
        let mut out = Outbound::new();
        for seq in 1..=CHANNEL_OUTBOX as u64 + 3 {
            let (_, prev) = out.next();
            let prev = prev.map(str::to_string);
            out.record(
                &header(seq, prev, h(seq, "o"), tn(seq as i64, 1)),
                json!({}),
            );
        }
        out.record_notice(&h(1, "n"));
        let sent: Vec<Sent> = out.sent().cloned().collect();
        assert_eq!(sent.len(), CHANNEL_OUTBOX);
        assert_eq!(sent[0].seq(), 4);
        let whole = Outbound::from_parts(out.head(), sent.clone()).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{out:?}"));

        let err =
            |head: OutboundHead, sent: Vec<Sent>| Outbound::from_parts(head, sent).unwrap_err();
        let mut over = sent.clone();
        over.insert(0, sent[0].clone());
        over[0].seq = 3;
        assert!(err(out.head(), over).contains("outbox over 64"));
        let mut swapped = sent.clone();
        swapped.swap(0, 1);
        assert!(err(out.head(), swapped).contains("increasing seq"));
        let mut dup = sent.clone();
        dup[1].seq = dup[0].seq;
        assert!(err(out.head(), dup).contains("increasing seq"));
        let mut behind = out.head();
        behind.next_seq = sent[CHANNEL_OUTBOX - 1].seq;
        assert!(err(behind, sent.clone()).contains("not below the next"));

        let mut v = serde_json::to_value(out.head()).unwrap();
        v["outbox"] = json!([]);
        let e = serde_json::from_value::<OutboundHead>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `outbox`"), "{e}");
        let mut v = serde_json::to_value(&sent[0]).unwrap();
        v["x"] = json!(1);
        let e = serde_json::from_value::<Sent>(v).unwrap_err().to_string();
        assert!(e.contains("unknown field `x`"), "{e}");
    }

    #[test]
    fn stored_state_is_read_strictly() {
        let err = |json: Value| {
            serde_json::from_value::<Inbound<u64>>(json)
                .unwrap_err()
                .to_string()
        };
        let mut live: Inbound<u64> = Inbound::new();
        for m in &chain(2, "a") {
            delivered(live.receive(m, m.seq, true));
        }
        let mut gap = chain(4, "a")[3].clone();
        gap.created = tn(40, 1);
        live.receive(&gap, 4, true);
        let good = serde_json::to_value(&live).unwrap();
        assert_eq!(
            format!(
                "{:?}",
                serde_json::from_value::<Inbound<u64>>(good.clone()).unwrap()
            ),
            format!("{live:?}")
        );
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = good.clone();
            f(&mut v);
            v
        };
        assert!(err(with(&|v| v["x"] = json!(1))).contains("unknown field `x`"));
        assert!(
            err(with(&|v| {
                v.as_object_mut().unwrap().remove("floor");
            }))
            .contains("missing field `floor`")
        );
        let nine: Vec<Value> = (1..=9).map(|i| json!([i, h(i, "a")])).collect();
        assert!(err(with(&|v| v["recent"] = json!(nine))).contains("over its bounds"));
        // A buffered envelope at or below the head could never be delivered.
        assert!(
            err(with(&|v| v["buffer"]["2"] = v["buffer"]["4"].clone())).contains("at or below")
        );
        assert!(err(with(&|v| v["state"] = json!("forked"))).contains("refused without a fork"));
        let e = err(with(&|v| v["newest"] = json!("yesterday")));
        assert!(e.contains("could not be parsed"), "{e}");

        let mut out = Outbound::new();
        for seq in 1..=CHANNEL_OUTBOX as u64 {
            let (_, prev) = out.next();
            let prev = prev.map(str::to_string);
            out.record(
                &header(seq, prev, h(seq, "o"), tn(seq as i64, 1)),
                json!({}),
            );
        }
        let mut v = serde_json::to_value(&out).unwrap();
        serde_json::from_value::<Outbound>(v.clone()).unwrap();
        let extra = v["outbox"][0].clone();
        v["outbox"].as_array_mut().unwrap().push(extra);
        let e = serde_json::from_value::<Outbound>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outbox over 64"), "{e}");

        // Channels are keyed by agent IDs, read as strictly as anywhere.
        let mut chans: Channels<u64> = Channels::new();
        chans.admit(id(1), None);
        let mut v = serde_json::to_value(&chans).unwrap();
        let peers = v["peers"].as_object_mut().unwrap();
        let (k, c) = peers
            .iter()
            .next()
            .map(|(k, c)| (k.clone(), c.clone()))
            .unwrap();
        peers.remove(&k);
        peers.insert(k.to_uppercase(), c);
        let e = serde_json::from_value::<Channels<u64>>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid agent id"), "{e}");
    }

    #[test]
    fn ack_floor_is_one_millisecond_before_the_first_resent() {
        let mut out = Outbound::new();
        // seq 2 was created with a sub-millisecond part: the floor is still
        // strictly before it, written in milliseconds.
        out.record(&header(1, None, h(1, "c"), t(1)), json!({"seq": 1}));
        out.record(
            &header(2, Some(h(1, "c")), h(2, "c"), tn(2, 500_000)),
            json!({"seq": 2}),
        );
        let (ack, resent) = out.ack(&h(1, "e"), 1, t(50));
        assert_eq!(resent, vec![&json!({"seq": 2})]);
        assert_eq!(ack["floor"], "2026-10-08T00:00:01.999Z");
        let ack = RestoredAck::parse(&ack).unwrap();
        assert_eq!(ack.floor, tn(1, 999_000_000));
        // The restored side takes the resent envelope, not one at the floor.
        let mut inb: Inbound<u64> = Inbound::new();
        delivered(inb.receive(&meta(1, None, h(1, "c"), t(1)), 1, true));
        inb.on_restored_ack(&ack);
        assert_eq!(
            inb.receive(&meta(2, Some(h(1, "c")), h(2, "x"), ack.floor), 0, true),
            Decision::Duplicate
        );
        assert_eq!(
            delivered(inb.receive(
                &meta(2, Some(h(1, "c")), h(2, "c"), tn(2, 500_000)),
                2,
                true
            )),
            vec![2]
        );

        // Holding nothing after in_seq, the floor is just before the next
        // envelope, sealed at `now` in whole seconds: that one is taken.
        let now = tn(60, 700_000_000);
        let (ack, resent) = out.ack(&h(1, "e"), 2, now);
        assert!(resent.is_empty());
        assert_eq!(ack["from_seq"], 3);
        assert_eq!(ack["floor"], "2026-10-08T00:00:59.999Z");
        let ack = RestoredAck::parse(&ack).unwrap();
        inb.on_restored_ack(&ack);
        let next = meta(3, Some(h(2, "c")), h(3, "c"), t(60));
        assert_eq!(delivered(inb.receive(&next, 3, true)), vec![3]);
    }
    #[test]
    fn restore_on_a_chain_with_nothing_sent_opens_after_no_envelope() {
        // §6.4.1: the lost copy may have written after the backup, so the
        // notice goes above it too; §6.4 allows prev null only at seq 1.
        let a = crate::AgentKey::from_seed([1; 32]);
        let b = crate::AgentKey::from_seed([2; 32]);
        let mut out = Outbound::new();
        let notice = out.restore(t(1000), 0, None);
        let (seq, prev) = out.next();
        assert!(
            seq >= 1_791_417_600_000,
            "epoch jumps to restore time in ms"
        );
        assert_eq!(prev, Some(NO_ENVELOPE));
        let p = crate::envelope::SealParams {
            from: &a,
            to: b.id(),
            seq,
            prev,
            created: t(1000),
            ttl: "48h",
            ephemeral: [7; 32],
            nonce: [1; 12],
        };
        let env = crate::envelope::seal(&notice, &p).expect("the notice seals");
        let hd = crate::envelope::verify(&crate::canon::to_vec(&env).unwrap(), t(1000))
            .unwrap()
            .into_parts()
            .0;
        out.record(&hd, env);
        assert_eq!(out.next(), (seq + 1, Some(hd.hash.as_str())));
        // A chain that has sent keeps its own prev.
        let mut sent = Outbound::new();
        sent.record(&header(1, None, h(1, "s"), t(1)), json!({"seq": 1}));
        sent.restore(t(1000), 0, None);
        assert_eq!(sent.next().1, Some(h(1, "s").as_str()));
    }

    #[test]
    fn ack_with_null_prev_past_seq_1_never_sets_the_head_back() {
        let c = chain(3, "a");
        let mut inb: Inbound<u64> = Inbound::new();
        for m in &c {
            delivered(inb.receive(m, m.seq, true));
        }
        let floor = inb.floor();
        let bad = RestoredAck {
            notice: h(1, "n"),
            from_seq: 9,
            prev: None,
            floor: t(70),
        };
        inb.on_restored_ack(&bad);
        assert_eq!(
            inb.head(),
            Some((3, h(3, "a").as_str())),
            "not moved to none"
        );
        assert_eq!(inb.floor(), floor, "nothing of it is taken");
        let next = Meta {
            seq: 4,
            prev: Some(h(3, "a")),
            hash: h(4, "a"),
            created: t(40),
        };
        assert_eq!(delivered(inb.receive(&next, 4, true)), vec![4]);
    }
}
