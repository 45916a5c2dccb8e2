//! The Nostr carrier (§6.2): kind 30417 events published to relays, fetched
//! and followed live, over `nostr-sdk`.
//!
//! It carries bytes and interprets nothing. Events from relays are
//! attacker-controlled: only kind 30417 events that match the query and
//! re-serialize to at most [`NOSTR_EVENT_MAX_BYTES`] are passed on, as JSON
//! for the core to verify (`rdv_proto::nostr_event::parse_event`). Relay text
//! is bounded to [`RELAY_TEXT_MAX_CHARS`] and kept as data. Logs name event
//! ids, never content, and quote relay text (`?`), never print it raw.
//!
//! `nostr-sdk` 0.44 brings its own `nostr` (0.44, where `rdv-proto` has
//! 0.45): events cross between the two as their NIP-01 JSON. It logs every
//! relay message, content included, at debug level, and a message it cannot
//! handle at error level: a subscriber should filter it out with
//! [`SDK_LOG_DIRECTIVE`].

use std::cmp;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nostr_sdk::pool::relay::Error as RelayError;
use nostr_sdk::pool::relay::limits::{RelayEventLimits, RelayMessageLimits};
use nostr_sdk::pool::{RelayLimits, RelayNotification};
use nostr_sdk::prelude::{
    Alphabet, ClientMessage, Event as SdkEvent, EventId, Filter, JsonUtil, Keys as SdkKeys,
    MatchEventOptions, RelayMessage, RelayUrl, ReqExitPolicy, SingleLetterTag, StreamExt,
    SubscriptionId, Timestamp,
};
use nostr_sdk::{Client, ClientOptions, Relay, RelayOptions, RelayPoolOptions, RelayStatus};
use rand_core::{OsRng, RngCore};
use rdv_proto::consts::{NOSTR_KIND, RELAY_URL_MAX_LEN};
use rdv_proto::nostr_event::NOSTR_EVENT_MAX_BYTES;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// Longest relay text kept (an OK false or CLOSED message, a connect error),
/// in characters. It is the relay's, untrusted: shown as data only.
pub const RELAY_TEXT_MAX_CHARS: usize = 300;
/// Events a query asks each relay for when it names no limit.
pub const QUERY_DEFAULT_LIMIT: usize = 500;
/// Largest `limit` a query may ask for.
pub const QUERY_MAX_LIMIT: usize = 1000;
/// Tag values (`#t` and `#d` together) one query may name.
pub const QUERY_MAX_VALUES: usize = 64;
/// An `EnvFilter` directive that silences the SDK, whose debug and error
/// logs carry whole relay messages (event content, untrusted text).
pub const SDK_LOG_DIRECTIVE: &str = concat!(
    "nostr_relay_pool=off,nostr_sdk=off,nostr_database=off,",
    "async_wsocket=off,tungstenite=off,tokio_tungstenite=off"
);

/// Most event bytes one fetch keeps from one relay.
const FETCH_MAX_BYTES_PER_RELAY: usize = 16 * 1024 * 1024;
/// Longest relay message read: an event at the limit with room for its
/// `["EVENT", <sub>, …]` frame and a relay's different escaping.
const RELAY_MESSAGE_MAX_BYTES: usize = 2 * NOSTR_EVENT_MAX_BYTES;
/// How often a subscription checks whether it can ask again for events a
/// full buffer dropped.
const CATCH_UP_TICK: Duration = Duration::from_millis(500);
/// Longest `#t` or `#d` value in a query.
const QUERY_VALUE_MAX_LEN: usize = 256;

/// How the carrier talks to relays.
#[derive(Debug, Clone)]
pub struct CarrierOptions {
    /// How long a relay may take to accept the WebSocket connection, for a
    /// publish or a fetch (a subscription's reconnections use the SDK's own
    /// 60 s).
    pub connect_timeout: Duration,
    /// How long a relay may take to answer an event with OK (the SDK waits
    /// 10 s at most).
    pub publish_timeout: Duration,
    /// Admit ws:// relay URLs (tests and local development only); otherwise
    /// only wss://.
    pub allow_ws: bool,
    /// Answer a relay's NIP-42 AUTH challenge with the carrier key.
    pub authenticate: bool,
    /// First wait before a subscription reconnects to a relay or re-sends a
    /// REQ the relay closed; doubles up to `reconnect_max`.
    pub reconnect_interval: Duration,
    /// Longest wait between reconnection attempts.
    pub reconnect_max: Duration,
    /// How far before the newest event seen a resumed subscription asks
    /// from (`since`), for clock skew and late publishes.
    pub resume_margin: Duration,
    /// Event ids a subscription remembers to drop duplicates.
    pub dedupe_window: usize,
    /// Events a subscription buffers for `recv`; past it they are dropped
    /// and asked for again once there is room.
    pub channel_capacity: usize,
    /// Most relays the carrier keeps in its pool.
    pub max_relays: usize,
}

impl Default for CarrierOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            publish_timeout: Duration::from_secs(10),
            allow_ws: false,
            authenticate: true,
            reconnect_interval: Duration::from_secs(10),
            reconnect_max: Duration::from_secs(300),
            resume_margin: Duration::from_secs(300),
            dedupe_window: 4096,
            channel_capacity: 1024,
            max_relays: 256,
        }
    }
}

/// Why a relay refused an event: the NIP-01 prefix of its OK false message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    Blocked,
    RateLimited,
    Restricted,
    Duplicate,
    Invalid,
    /// Any other prefix (`pow:`, `error:`, `auth-required:` …) or none.
    Other,
}

impl Refusal {
    /// Classifies a relay's OK false message by its prefix.
    pub fn from_message(message: &str) -> Self {
        let Some((prefix, _)) = message.split_once(':') else {
            return Self::Other;
        };
        let prefix = prefix.trim();
        let is = |p: &str| prefix.eq_ignore_ascii_case(p);
        if is("blocked") {
            Self::Blocked
        } else if is("rate-limited") {
            Self::RateLimited
        } else if is("restricted") {
            Self::Restricted
        } else if is("duplicate") {
            Self::Duplicate
        } else if is("invalid") {
            Self::Invalid
        } else {
            Self::Other
        }
    }
}

/// What one relay did with a published event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// OK true: the relay holds the event (§6.2 counts one as delivered).
    Accepted,
    /// OK false. `message` is the relay's text, untrusted, at most
    /// [`RELAY_TEXT_MAX_CHARS`] characters.
    Refused { kind: Refusal, message: String },
    /// Not sent or not answered: a bad URL, a failed or timed-out connection,
    /// no OK in time.
    Unreachable { reason: String },
}

/// One relay's [`PublishOutcome`]; `relay` is the URL as the caller gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayOutcome {
    pub relay: String,
    pub outcome: PublishOutcome,
}

/// True when at least one relay accepted the event (§6.2).
pub fn delivered(outcomes: &[RelayOutcome]) -> bool {
    outcomes
        .iter()
        .any(|o| o.outcome == PublishOutcome::Accepted)
}

/// Which kind 30417 events to ask for. At least one of `p`, `topics` and
/// `d` must be set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// The recipient's Ed25519 key, lowercase hex (the `#p` tag, §6.2).
    pub p: Option<String>,
    /// Discovery or ID topics (`#t`).
    pub topics: Vec<String>,
    /// `#d` values: envelope hashes, card pointers.
    pub d: Vec<String>,
    /// Unix seconds; older events are not asked for.
    pub since: Option<u64>,
    /// Events asked for per relay ([`QUERY_DEFAULT_LIMIT`] if unset, at most
    /// [`QUERY_MAX_LIMIT`]).
    pub limit: Option<usize>,
}

impl Query {
    /// Envelopes for the agent whose Ed25519 key is `key_hex`.
    pub fn recipient(key_hex: impl Into<String>) -> Self {
        Self {
            p: Some(key_hex.into()),
            ..Self::default()
        }
    }

    /// Cards and probes on these topics.
    pub fn topics<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    fn filter(&self) -> Result<Filter> {
        let bad = |why: &str| Err(Error::Input(format!("nostr query: {why}")));
        if self.p.is_none() && self.topics.is_empty() && self.d.is_empty() {
            return bad("no p, t or d value");
        }
        if self.topics.len() + self.d.len() > QUERY_MAX_VALUES {
            return bad("too many tag values");
        }
        if self
            .topics
            .iter()
            .chain(&self.d)
            .any(|v| v.is_empty() || v.len() > QUERY_VALUE_MAX_LEN)
        {
            return bad("empty or overlong tag value");
        }
        let mut f = Filter::new().kind(nostr_sdk::Kind::Custom(NOSTR_KIND));
        if let Some(p) = &self.p {
            let hex = p.len() == 64 && p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !hex {
                return bad("p must be 64 lowercase hex digits");
            }
            // A custom tag: an Ed25519 key need not be a valid secp256k1 key.
            f = f.custom_tag(SingleLetterTag::lowercase(Alphabet::P), p.clone());
        }
        if !self.topics.is_empty() {
            f = f.custom_tags(
                SingleLetterTag::lowercase(Alphabet::T),
                self.topics.iter().cloned(),
            );
        }
        if !self.d.is_empty() {
            f = f.custom_tags(
                SingleLetterTag::lowercase(Alphabet::D),
                self.d.iter().cloned(),
            );
        }
        if let Some(since) = self.since {
            f = f.since(Timestamp::from_secs(since));
        }
        let limit = self.limit.unwrap_or(QUERY_DEFAULT_LIMIT);
        Ok(f.limit(limit.min(QUERY_MAX_LIMIT)))
    }
}

/// An event from a relay, for the core to verify and open.
#[derive(Clone, PartialEq, Eq)]
pub struct Received {
    /// The relay URL as the caller gave it.
    pub relay: String,
    /// The event JSON, re-serialized; at most [`NOSTR_EVENT_MAX_BYTES`].
    pub json: Vec<u8>,
}

impl fmt::Debug for Received {
    // Never the content: it is peer text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("relay", &self.relay)
            .field("json_len", &self.json.len())
            .finish()
    }
}

/// A `nostr-sdk` client that carries the agent's kind 30417 events (§6.2).
/// The carrier key answers NIP-42 AUTH; events come signed by the core.
#[derive(Debug)]
pub struct NostrCarrier {
    client: Client,
    opts: Arc<CarrierOptions>,
}

impl NostrCarrier {
    /// A carrier with no relay yet: relays are added as they are used.
    pub async fn new(carrier_keys: ::nostr::key::Keys, opts: CarrierOptions) -> Result<Self> {
        if opts.dedupe_window == 0 || opts.channel_capacity == 0 || opts.max_relays == 0 {
            return Err(Error::Input(
                "carrier options: dedupe_window, channel_capacity and max_relays must be positive"
                    .into(),
            ));
        }
        // The SDK has its own `nostr` (0.44): the key crosses as bytes.
        let keys = nostr_sdk::SecretKey::from_slice(carrier_keys.secret_key().as_secret_bytes())
            .map(SdkKeys::new)
            .map_err(|e| Error::Input(format!("carrier key: {e}")))?;
        let client_opts = ClientOptions::new()
            .automatic_authentication(opts.authenticate)
            .pool(RelayPoolOptions::new().max_relays(Some(opts.max_relays)));
        let mut builder = Client::builder().opts(client_opts);
        if opts.authenticate {
            builder = builder.signer(keys);
        }
        Ok(Self {
            client: builder.build(),
            opts: Arc::new(opts),
        })
    }

    /// Publishes `event` to exactly these relays (connecting them as needed)
    /// and returns one outcome per distinct relay, in order. One
    /// [`PublishOutcome::Accepted`] means delivered (§6.2).
    pub async fn publish(
        &self,
        event: &::nostr::event::Event,
        relays: &[String],
    ) -> Vec<RelayOutcome> {
        let labels = distinct(relays);
        let event = match to_sdk_event(event) {
            Ok(event) => Arc::new(event),
            Err(reason) => {
                return labels
                    .into_iter()
                    .map(|relay| RelayOutcome {
                        relay,
                        outcome: PublishOutcome::Unreachable {
                            reason: reason.clone(),
                        },
                    })
                    .collect();
            }
        };
        let mut outcomes: Vec<Option<PublishOutcome>> = labels.iter().map(|_| None).collect();
        let mut tasks = JoinSet::new();
        for (i, label) in labels.iter().enumerate() {
            match self.relay_url(label) {
                Err(reason) => outcomes[i] = Some(PublishOutcome::Unreachable { reason }),
                Ok(url) => {
                    let (client, opts, event) =
                        (self.client.clone(), self.opts.clone(), event.clone());
                    tasks
                        .spawn(async move { (i, publish_one(&client, &opts, &url, &event).await) });
                }
            }
        }
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((i, outcome)) => outcomes[i] = Some(outcome),
                Err(e) => tracing::warn!(error = %e, "nostr publish task failed"),
            }
        }
        labels
            .into_iter()
            .zip(outcomes)
            .map(|(relay, outcome)| RelayOutcome {
                relay,
                outcome: outcome.unwrap_or_else(|| PublishOutcome::Unreachable {
                    reason: "publish task failed".into(),
                }),
            })
            .collect()
    }

    /// One-shot fetch: a REQ to each relay until EOSE or `timeout`, events
    /// deduplicated by id, each with the first relay (in the order given)
    /// that returned it. Unusable relay URLs are skipped; an unreachable
    /// relay returns nothing. Errs only on an invalid query.
    pub async fn fetch(
        &self,
        relays: &[String],
        q: &Query,
        timeout: Duration,
    ) -> Result<Vec<Received>> {
        let filter = q.filter()?;
        let mut tasks = JoinSet::new();
        for (i, label) in distinct(relays).into_iter().enumerate() {
            let url = match self.relay_url(&label) {
                Ok(url) => url,
                Err(reason) => {
                    tracing::debug!(relay = ?bounded(&label), reason = ?reason, "nostr relay skipped");
                    continue;
                }
            };
            let (client, opts, filter) = (self.client.clone(), self.opts.clone(), filter.clone());
            tasks.spawn(async move {
                let got = fetch_one(&client, &opts, label, &url, &filter, timeout).await;
                (i, got)
            });
        }
        let mut per_relay = Vec::new();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(got) => per_relay.push(got),
                Err(e) => tracing::warn!(error = %e, "nostr fetch task failed"),
            }
        }
        per_relay.sort_by_key(|(i, _)| *i);
        let mut seen = HashSet::new();
        Ok(per_relay
            .into_iter()
            .flat_map(|(_, got)| got)
            .filter(|(id, _)| seen.insert(*id))
            .map(|(_, r)| r)
            .collect())
    }

    /// Follows these relays: every event matching `q` arrives once on the
    /// returned [`Subscription`]. After a disconnection each relay is
    /// reconnected (with backoff) and asked again from the newest event it
    /// had delivered, less [`CarrierOptions::resume_margin`], so nothing
    /// published meanwhile is missed; duplicates are dropped within
    /// [`CarrierOptions::dedupe_window`] ids.
    pub async fn subscribe(&self, relays: &[String], q: Query) -> Result<Subscription> {
        let filter = q.filter()?;
        let urls = relay_urls(&self.opts, relays)?;
        let (tx, rx) = mpsc::channel(self.opts.channel_capacity);
        let mut sub = Subscription {
            rx,
            tx: tx.downgrade(),
            client: self.client.clone(),
            opts: self.opts.clone(),
            seen: Arc::new(Mutex::new(SeenIds::new(self.opts.dedupe_window))),
            query: q,
            filter,
            workers: HashMap::new(),
        };
        for (label, url) in urls {
            sub.spawn_worker(&tx, label, url);
        }
        Ok(sub)
    }

    /// Disconnects every relay; subscriptions then end (`recv` gives `None`).
    pub async fn shutdown(self) {
        self.client.shutdown().await;
    }

    fn relay_url(&self, s: &str) -> std::result::Result<RelayUrl, String> {
        relay_url(&self.opts, s)
    }
}

/// A live subscription (§6.2): events from its relays, once each.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Received>,
    // Weak: the channel closes when every relay worker has ended (shutdown).
    tx: mpsc::WeakSender<Received>,
    client: Client,
    opts: Arc<CarrierOptions>,
    seen: Arc<Mutex<SeenIds>>,
    query: Query,
    filter: Filter,
    workers: HashMap<String, WorkerHandle>,
}

#[derive(Debug)]
struct WorkerHandle {
    // Dropping it stops the worker, which sends CLOSE.
    _stop: oneshot::Sender<()>,
}

impl Subscription {
    /// The next event, or `None` once the carrier is shut down.
    pub async fn recv(&mut self) -> Option<Received> {
        self.rx.recv().await
    }

    /// Changes the relays and the query. Relays kept under the same query
    /// keep their REQ; a changed query re-asks every relay.
    pub async fn resubscribe(&mut self, relays: &[String], q: Query) -> Result<()> {
        let filter = q.filter()?;
        let urls = relay_urls(&self.opts, relays)?;
        // Held across the change so the channel never closes in between.
        let tx = self
            .tx
            .upgrade()
            .ok_or_else(|| Error::Carrier("the nostr carrier was shut down".into()))?;
        if q != self.query {
            let old = std::mem::take(&mut self.workers);
            self.query = q;
            self.filter = filter;
            for (label, url) in urls {
                self.spawn_worker(&tx, label, url);
            }
            drop(old);
        } else {
            let keep: HashSet<&str> = urls.iter().map(|(l, _)| l.as_str()).collect();
            self.workers
                .retain(|label, _| keep.contains(label.as_str()));
            for (label, url) in urls {
                if !self.workers.contains_key(&label) {
                    self.spawn_worker(&tx, label, url);
                }
            }
        }
        Ok(())
    }

    /// The relays followed, as given.
    pub fn relays(&self) -> Vec<String> {
        let mut v: Vec<String> = self.workers.keys().cloned().collect();
        v.sort();
        v
    }

    /// The query followed.
    pub fn query(&self) -> &Query {
        &self.query
    }

    fn spawn_worker(&mut self, tx: &mpsc::Sender<Received>, label: String, url: RelayUrl) {
        let (stop_tx, stop_rx) = oneshot::channel();
        let worker = Worker::new(
            url,
            label.clone(),
            self.filter.clone(),
            tx.clone(),
            self.seen.clone(),
            self.opts.clone(),
        );
        tokio::spawn(worker.run(self.client.clone(), stop_rx));
        self.workers.insert(label, WorkerHandle { _stop: stop_tx });
    }
}

/// One relay of a subscription: its REQ, reconnections and resume point.
struct Worker {
    url: RelayUrl,
    label: String,
    sub_id: SubscriptionId,
    filter: Filter,
    tx: mpsc::Sender<Received>,
    seen: Arc<Mutex<SeenIds>>,
    opts: Arc<CarrierOptions>,
    /// Newest created_at (capped at now) of the events delivered while
    /// caught up (after EOSE): the resume point.
    committed: Option<Timestamp>,
    /// Newest created_at of the current REQ's stored events, committed at EOSE.
    session_newest: Option<Timestamp>,
    live: bool,
    closed: bool,
    /// Oldest created_at dropped on a full channel, asked for again later.
    overflow_since: Option<Timestamp>,
    reconnect_at: Option<Instant>,
    reconnect_wait: Duration,
    req_at: Option<Instant>,
    req_wait: Duration,
}

impl Worker {
    fn new(
        url: RelayUrl,
        label: String,
        filter: Filter,
        tx: mpsc::Sender<Received>,
        seen: Arc<Mutex<SeenIds>>,
        opts: Arc<CarrierOptions>,
    ) -> Self {
        let mut id = [0u8; 16];
        OsRng.fill_bytes(&mut id);
        Self {
            url,
            label,
            sub_id: SubscriptionId::new(hex::encode(id)),
            filter,
            tx,
            seen,
            committed: None,
            session_newest: None,
            live: false,
            closed: false,
            overflow_since: None,
            reconnect_at: None,
            reconnect_wait: opts.reconnect_interval,
            req_at: None,
            req_wait: opts.reconnect_interval,
            opts,
        }
    }

    async fn run(mut self, client: Client, mut stop: oneshot::Receiver<()>) {
        let relay = match pooled(&client, &self.url).await {
            Ok(relay) => relay,
            Err(reason) => {
                tracing::warn!(relay = %self.url, reason = ?reason, "nostr subscription not started");
                return;
            }
        };
        drop(client);
        // Listen first, so no status change is missed.
        let mut notes = relay.notifications();
        match relay.status() {
            RelayStatus::Connected => self.send_req(&relay, None),
            s if can_connect(s) => relay.connect(),
            _ => {}
        }
        let mut tick = tokio::time::interval(CATCH_UP_TICK);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                note = notes.recv() => match note {
                    Ok(note) => {
                        if !self.on_notification(&relay, note) {
                            break;
                        }
                    }
                    // Notifications were lost: ask again from the resume point.
                    Err(RecvError::Lagged(n)) => {
                        tracing::debug!(relay = %self.url, lost = n, "nostr notifications lagged");
                        if relay.status() == RelayStatus::Connected {
                            self.send_req(&relay, None);
                        }
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = at(self.reconnect_at) => {
                    self.reconnect_at = None;
                    if can_connect(relay.status()) {
                        tracing::debug!(relay = %self.url, "nostr relay reconnecting");
                        relay.connect();
                    }
                }
                _ = at(self.req_at) => {
                    self.req_at = None;
                    if relay.status() == RelayStatus::Connected {
                        self.send_req(&relay, None);
                    }
                }
                _ = tick.tick() => self.catch_up(&relay),
            }
        }
        if relay.status() == RelayStatus::Connected {
            let _ = relay.send_msg(ClientMessage::close(self.sub_id.clone()));
        }
        tracing::debug!(relay = %self.url, sub = %self.sub_id, "nostr subscription ended");
    }

    /// Handles one relay notification; false ends the worker.
    fn on_notification(&mut self, relay: &Relay, note: RelayNotification) -> bool {
        match note {
            RelayNotification::RelayStatus { status } => match status {
                RelayStatus::Connected => {
                    self.reconnect_at = None;
                    self.send_req(relay, None);
                }
                RelayStatus::Disconnected => self.live = false,
                RelayStatus::Terminated => {
                    self.live = false;
                    if self.reconnect_at.is_none() {
                        self.reconnect_at = Some(Instant::now() + jittered(self.reconnect_wait));
                        self.reconnect_wait =
                            cmp::min(self.reconnect_wait * 2, self.opts.reconnect_max);
                    }
                }
                RelayStatus::Banned => return false,
                _ => {}
            },
            RelayNotification::Message { message } => match message {
                RelayMessage::Event {
                    subscription_id,
                    event,
                } if *subscription_id == self.sub_id => return self.on_event(&event),
                RelayMessage::EndOfStoredEvents(id) if *id == self.sub_id => {
                    self.live = true;
                    self.committed = cmp::max(self.committed, self.session_newest);
                    self.reconnect_wait = self.opts.reconnect_interval;
                    self.req_wait = self.opts.reconnect_interval;
                }
                RelayMessage::Closed {
                    subscription_id,
                    message,
                } if *subscription_id == self.sub_id => {
                    self.live = false;
                    self.closed = true;
                    tracing::debug!(
                        relay = %self.url,
                        message = ?bounded(&message),
                        "nostr relay closed the subscription"
                    );
                    self.req_at = Some(Instant::now() + jittered(self.req_wait));
                    self.req_wait = cmp::min(self.req_wait * 2, self.opts.reconnect_max);
                }
                _ => {}
            },
            RelayNotification::Authenticated if self.closed => self.send_req(relay, None),
            // The relay was disconnected on purpose: the carrier shut down.
            RelayNotification::Shutdown => return false,
            _ => {}
        }
        true
    }

    /// Forwards an admitted, new event; false when nobody listens any more.
    fn on_event(&mut self, event: &SdkEvent) -> bool {
        let Some(json) = admit(event, &self.filter) else {
            tracing::debug!(relay = %self.url, id = %event.id, "nostr event dropped");
            return true;
        };
        // A future created_at must not move the resume point past now.
        let ts = cmp::min(event.created_at, Timestamp::now());
        self.session_newest = cmp::max(self.session_newest, Some(ts));
        if self.live {
            self.committed = cmp::max(self.committed, Some(ts));
        }
        if !lock(&self.seen).insert(event.id) {
            return true;
        }
        let received = Received {
            relay: self.label.clone(),
            json,
        };
        match self.tx.try_send(received) {
            Ok(()) => {
                tracing::debug!(relay = %self.url, id = %event.id, "nostr event received");
                true
            }
            Err(TrySendError::Full(_)) => {
                lock(&self.seen).remove(&event.id);
                self.overflow_since = Some(match self.overflow_since {
                    Some(t) => cmp::min(t, event.created_at),
                    None => event.created_at,
                });
                tracing::debug!(relay = %self.url, id = %event.id, "nostr subscription full, event asked for later");
                true
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }

    /// Re-asks for what a full channel dropped, once it has room again.
    fn catch_up(&mut self, relay: &Relay) {
        let Some(from) = self.overflow_since else {
            return;
        };
        if self.tx.capacity() * 2 < self.tx.max_capacity()
            || relay.status() != RelayStatus::Connected
        {
            return;
        }
        self.overflow_since = None;
        self.send_req(relay, Some(from));
    }

    /// Sends the REQ, from `from` (less the margin) or the resume point.
    fn send_req(&mut self, relay: &Relay, from: Option<Timestamp>) {
        let since = self.since(from.or(self.committed));
        let mut filter = self.filter.clone();
        if let Some(since) = since {
            filter = filter.since(since);
        }
        self.live = false;
        self.closed = false;
        self.session_newest = None;
        self.req_at = None;
        match relay.send_msg(ClientMessage::req(self.sub_id.clone(), vec![filter])) {
            Ok(()) => tracing::debug!(
                relay = %self.url,
                sub = %self.sub_id,
                since = ?since.map(|t| t.as_secs()),
                "nostr subscription sent"
            ),
            Err(e) => {
                tracing::debug!(relay = %self.url, error = ?bounded(&e.to_string()), "nostr REQ not sent");
                self.req_at = Some(Instant::now() + jittered(self.req_wait));
            }
        }
    }

    /// `since` for a REQ resuming at `from`: less the margin, never before
    /// the query's own `since`.
    fn since(&self, from: Option<Timestamp>) -> Option<Timestamp> {
        let Some(from) = from else {
            return self.filter.since;
        };
        let resumed = from
            .as_secs()
            .saturating_sub(self.opts.resume_margin.as_secs());
        let floor = self.filter.since.map_or(0, |t| t.as_secs());
        Some(Timestamp::from_secs(cmp::max(resumed, floor)))
    }
}

/// The event in the SDK's own `nostr` types: the same NIP-01 JSON.
fn to_sdk_event(event: &::nostr::event::Event) -> std::result::Result<SdkEvent, String> {
    let converted =
        SdkEvent::from_json(event.as_json()).map_err(|e| format!("event not encodable: {e}"))?;
    if converted.id.to_bytes() != event.id.to_bytes() {
        return Err("event id changed in conversion".into());
    }
    Ok(converted)
}

fn relay_url(opts: &CarrierOptions, s: &str) -> std::result::Result<RelayUrl, String> {
    if s.len() > RELAY_URL_MAX_LEN {
        return Err("relay URL too long".into());
    }
    let url = RelayUrl::parse(s).map_err(|_| "not a relay URL".to_string())?;
    // The URL is normalized: its scheme is lowercase.
    if url.as_str().starts_with("wss://") || (opts.allow_ws && url.as_str().starts_with("ws://")) {
        Ok(url)
    } else {
        Err("ws:// relays are allowed only in a test or dev setup".into())
    }
}

/// Distinct relay URLs, all valid, at least one: a subscription's relays
/// are the agent's own, so a bad one is an error, not a skip.
fn relay_urls(opts: &CarrierOptions, relays: &[String]) -> Result<Vec<(String, RelayUrl)>> {
    let labels = distinct(relays);
    if labels.is_empty() {
        return Err(Error::Input("nostr subscription: no relay".into()));
    }
    labels
        .into_iter()
        .map(|label| match relay_url(opts, &label) {
            Ok(url) => Ok((label, url)),
            Err(why) => Err(Error::Input(format!(
                "nostr relay {:?}: {why}",
                bounded(&label)
            ))),
        })
        .collect()
}

/// Relay options: bounded messages, no reconnection of its own (the
/// subscriptions reconnect, publishes connect on demand), and no check of
/// events against SDK-held subscriptions (ours send their own REQs).
fn relay_options() -> RelayOptions {
    let limits = RelayLimits {
        messages: RelayMessageLimits {
            max_size: u32::try_from(RELAY_MESSAGE_MAX_BYTES).ok(),
        },
        events: RelayEventLimits::default(),
    };
    RelayOptions::new()
        .reconnect(false)
        .verify_subscriptions(false)
        .limits(limits)
}

/// The relay, added to the pool if needed.
async fn pooled(client: &Client, url: &RelayUrl) -> std::result::Result<Relay, String> {
    let pool = client.pool();
    if let Ok(relay) = pool.relay(url).await {
        return Ok(relay);
    }
    pool.add_relay(url, relay_options())
        .await
        .map_err(|e| bounded(&e.to_string()))?;
    pool.relay(url)
        .await
        .map_err(|_| "relay not admitted to the pool".to_string())
}

/// The relay, connected within `wait`.
async fn connected(
    client: &Client,
    url: &RelayUrl,
    wait: Duration,
) -> std::result::Result<Relay, String> {
    let relay = pooled(client, url).await?;
    let status = relay.status();
    if status == RelayStatus::Connected {
        return Ok(relay);
    }
    if status == RelayStatus::Banned {
        return Err("relay banned".into());
    }
    if can_connect(status)
        && let Err(e) = relay.try_connect(wait).await
    {
        return Err(match e {
            RelayError::Timeout => format!("connect timed out after {} ms", wait.as_millis()),
            e => format!("connect failed: {}", bounded(&e.to_string())),
        });
    }
    // Another task may be connecting it.
    if relay.status() != RelayStatus::Connected {
        relay.wait_for_connection(wait).await;
    }
    if relay.status() == RelayStatus::Connected {
        Ok(relay)
    } else {
        Err(format!("not connected within {} ms", wait.as_millis()))
    }
}

async fn publish_one(
    client: &Client,
    opts: &CarrierOptions,
    url: &RelayUrl,
    event: &SdkEvent,
) -> PublishOutcome {
    let relay = match connected(client, url, opts.connect_timeout).await {
        Ok(relay) => relay,
        Err(reason) => {
            tracing::debug!(relay = %url, id = %event.id, reason = ?reason, "nostr relay unreachable");
            return PublishOutcome::Unreachable { reason };
        }
    };
    let no_ok = || PublishOutcome::Unreachable {
        reason: format!("no OK within {} ms", opts.publish_timeout.as_millis()),
    };
    let outcome = match tokio::time::timeout(opts.publish_timeout, relay.send_event(event)).await {
        Ok(Ok(_)) => PublishOutcome::Accepted,
        // OK false: the relay's own message.
        Ok(Err(RelayError::RelayMessage(message))) => {
            let message = bounded(&message);
            PublishOutcome::Refused {
                kind: Refusal::from_message(&message),
                message,
            }
        }
        Ok(Err(RelayError::Timeout)) | Err(_) => no_ok(),
        Ok(Err(e)) => PublishOutcome::Unreachable {
            reason: bounded(&e.to_string()),
        },
    };
    match &outcome {
        PublishOutcome::Accepted => {
            tracing::debug!(relay = %url, id = %event.id, "nostr event accepted")
        }
        PublishOutcome::Refused { kind, message } => {
            tracing::debug!(relay = %url, id = %event.id, ?kind, message = ?message, "nostr event refused")
        }
        PublishOutcome::Unreachable { reason } => {
            tracing::debug!(relay = %url, id = %event.id, reason = ?reason, "nostr event not delivered")
        }
    }
    outcome
}

async fn fetch_one(
    client: &Client,
    opts: &CarrierOptions,
    label: String,
    url: &RelayUrl,
    filter: &Filter,
    timeout: Duration,
) -> Vec<(EventId, Received)> {
    let deadline = Instant::now() + timeout;
    let relay = match connected(client, url, cmp::min(opts.connect_timeout, timeout)).await {
        Ok(relay) => relay,
        Err(reason) => {
            tracing::debug!(relay = %url, reason = ?reason, "nostr relay unreachable");
            return Vec::new();
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Vec::new();
    }
    let mut stream = match relay
        .stream_events(filter.clone(), left, ReqExitPolicy::ExitOnEOSE)
        .await
    {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!(relay = %url, error = ?bounded(&e.to_string()), "nostr REQ not sent");
            return Vec::new();
        }
    };
    let cap = filter.limit.unwrap_or(QUERY_DEFAULT_LIMIT);
    let (mut out, mut seen, mut bytes) = (Vec::new(), HashSet::new(), 0usize);
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                let Some(json) = admit(&event, filter) else {
                    tracing::debug!(relay = %url, id = %event.id, "nostr event dropped");
                    continue;
                };
                if !seen.insert(event.id) {
                    continue;
                }
                bytes += json.len();
                out.push((
                    event.id,
                    Received {
                        relay: label.clone(),
                        json,
                    },
                ));
                if out.len() >= cap || bytes >= FETCH_MAX_BYTES_PER_RELAY {
                    break;
                }
            }
            Err(e) => {
                tracing::debug!(relay = %url, message = ?bounded(&e.to_string()), "nostr relay closed the query");
                break;
            }
        }
    }
    out
}

/// The event's JSON if it may reach the core: kind 30417, matching `filter`,
/// at most [`NOSTR_EVENT_MAX_BYTES`] re-serialized.
fn admit(event: &SdkEvent, filter: &Filter) -> Option<Vec<u8>> {
    if event.kind.as_u16() != NOSTR_KIND || event.content.len() > NOSTR_EVENT_MAX_BYTES {
        return None;
    }
    if !filter.match_event(event, MatchEventOptions::new()) {
        return None;
    }
    let json = event.as_json();
    (json.len() <= NOSTR_EVENT_MAX_BYTES).then(|| json.into_bytes())
}

/// Relay text cut to [`RELAY_TEXT_MAX_CHARS`] characters.
fn bounded(s: &str) -> String {
    s.chars().take(RELAY_TEXT_MAX_CHARS).collect()
}

fn distinct(relays: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    relays
        .iter()
        .filter(|r| seen.insert(r.as_str()))
        .cloned()
        .collect()
}

fn can_connect(status: RelayStatus) -> bool {
    matches!(
        status,
        RelayStatus::Initialized | RelayStatus::Terminated | RelayStatus::Sleeping
    )
}

/// Waits until `t`, or forever when there is none.
async fn at(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// `d` ± 10 %, so agents do not reconnect in step after a relay restarts.
fn jittered(d: Duration) -> Duration {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let j = ms / 10;
    if j == 0 {
        return d;
    }
    Duration::from_millis(ms - j + OsRng.next_u64() % (2 * j + 1))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The last `cap` event ids forwarded, oldest first out.
#[derive(Debug)]
struct SeenIds {
    cap: usize,
    order: VecDeque<EventId>,
    set: HashSet<EventId>,
}

impl SeenIds {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    /// False if `id` is already in the window.
    fn insert(&mut self, id: EventId) -> bool {
        if !self.set.insert(id) {
            return false;
        }
        self.order.push_back(id);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    fn remove(&mut self, id: &EventId) {
        if self.set.remove(id) {
            self.order.retain(|x| x != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use nostr_sdk::prelude::{EventBuilder, Kind, Tag};

    use super::*;

    fn event(kind: u16, content: &str, p: &str) -> SdkEvent {
        EventBuilder::new(Kind::Custom(kind), content)
            .tag(Tag::parse(["p", p]).unwrap())
            .sign_with_keys(&SdkKeys::generate())
            .unwrap()
    }

    #[test]
    fn admit_checks_kind_size_and_filter() {
        let p = "ab".repeat(32);
        let filter = Query::recipient(p.clone()).filter().unwrap();
        let ok = event(NOSTR_KIND, "{}", &p);
        let json = admit(&ok, &filter).unwrap();
        assert_eq!(json, ok.as_json().into_bytes());
        // Another kind, another recipient.
        assert!(admit(&event(1, "{}", &p), &filter).is_none());
        assert!(admit(&event(NOSTR_KIND, "{}", &"cd".repeat(32)), &filter).is_none());
        // Content at the limit makes the JSON larger than the limit.
        let big = event(NOSTR_KIND, &"x".repeat(NOSTR_EVENT_MAX_BYTES - 100), &p);
        assert!(big.as_json().len() > NOSTR_EVENT_MAX_BYTES);
        assert!(admit(&big, &filter).is_none());
        let huge = event(NOSTR_KIND, &"x".repeat(NOSTR_EVENT_MAX_BYTES + 1), &p);
        assert!(admit(&huge, &filter).is_none());
    }

    #[test]
    fn refusal_prefixes() {
        use Refusal::*;
        for (m, k) in [
            ("blocked: no", Blocked),
            ("rate-limited: slow down", RateLimited),
            ("restricted: pay", Restricted),
            ("duplicate: have it", Duplicate),
            ("invalid: bad sig", Invalid),
            ("pow: 20 bits", Other),
            ("auth-required: who", Other),
            ("no prefix", Other),
            ("", Other),
            (" Blocked : spaced", Blocked),
        ] {
            assert_eq!(Refusal::from_message(m), k, "{m}");
        }
    }

    #[test]
    fn bounded_counts_characters() {
        let s = "é".repeat(400);
        let b = bounded(&s);
        assert_eq!(b.chars().count(), RELAY_TEXT_MAX_CHARS);
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn query_filters() {
        assert!(Query::default().filter().is_err());
        assert!(Query::recipient("AB".repeat(32)).filter().is_err());
        assert!(Query::recipient("ab".repeat(31)).filter().is_err());
        assert!(Query::topics([""]).filter().is_err());
        let many: Vec<String> = (0..=QUERY_MAX_VALUES).map(|i| i.to_string()).collect();
        assert!(Query::topics(many).filter().is_err());
        let f = Query {
            limit: Some(10 * QUERY_MAX_LIMIT),
            since: Some(5),
            ..Query::topics(["abc"])
        }
        .filter()
        .unwrap();
        assert_eq!(f.limit, Some(QUERY_MAX_LIMIT));
        assert_eq!(f.since, Some(Timestamp::from_secs(5)));
        assert_eq!(
            Query::topics(["abc"]).filter().unwrap().limit,
            Some(QUERY_DEFAULT_LIMIT)
        );
    }

    #[test]
    fn seen_ids_window() {
        let mut s = SeenIds::new(2);
        let ids: Vec<EventId> = (0..3)
            .map(|i| event(NOSTR_KIND, &i.to_string(), &"ab".repeat(32)).id)
            .collect();
        assert!(s.insert(ids[0]));
        assert!(!s.insert(ids[0]));
        assert!(s.insert(ids[1]));
        assert!(s.insert(ids[2]));
        // The oldest fell out of the window.
        assert!(s.insert(ids[0]));
        s.remove(&ids[0]);
        assert!(s.insert(ids[0]));
    }

    #[test]
    fn resume_since_margin_and_floor() {
        let (tx, _rx) = mpsc::channel(1);
        let opts = Arc::new(CarrierOptions {
            resume_margin: Duration::from_secs(60),
            ..CarrierOptions::default()
        });
        let mut w = Worker::new(
            RelayUrl::parse("wss://relay.example").unwrap(),
            "wss://relay.example".into(),
            Query::topics(["abc"]).filter().unwrap(),
            tx,
            Arc::new(Mutex::new(SeenIds::new(4))),
            opts,
        );
        assert_eq!(w.since(None), None);
        assert_eq!(
            w.since(Some(Timestamp::from_secs(1000))),
            Some(Timestamp::from_secs(940))
        );
        assert_eq!(
            w.since(Some(Timestamp::from_secs(30))),
            Some(Timestamp::from_secs(0))
        );
        w.filter = w.filter.clone().since(Timestamp::from_secs(950));
        assert_eq!(
            w.since(Some(Timestamp::from_secs(1000))),
            Some(Timestamp::from_secs(950))
        );
        assert_eq!(w.since(None), Some(Timestamp::from_secs(950)));
    }
}
