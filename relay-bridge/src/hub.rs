//! The publish pipeline and fan-out: every message, from HTTP or MQTT, gets
//! its id and ordering key, goes to live subscribers and (if it came from
//! HTTP) to the MQTT side, in one order for all; the cache write follows in
//! the background, in batches, off the latency path (issue #5: p99 under
//! 5 ms at 1,000 msg/s). Until its batch is committed a message waits in
//! `pending`, which every catch-up reads beside the cache, so `since=` never
//! misses a message that was already fanned out.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::message::{Clock, Event, Filters, Message, UnixTime as _, new_id};
use crate::since::Since;
use crate::store::Store;
use crate::{Error, Result};

/// Where a message came from: a message goes back to MQTT only if it did
/// not come from there (no echo loops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Http,
    Mqtt,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Http => "http",
            Origin::Mqtt => "mqtt",
        }
    }
}

/// A message before it has an id.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub topic: String,
    pub body: bytes::Bytes,
    pub title: Option<String>,
    pub tags: Option<Vec<String>>,
    pub priority: Option<u8>,
    pub click: Option<String>,
    /// `X-Cache: no` turns this off.
    pub cache: bool,
}

/// What a subscription yields.
pub type Item = Arc<Message>;

/// A subscription request.
#[derive(Debug, Clone)]
pub struct SubRequest {
    pub topics: Vec<String>,
    pub since: Since,
    pub filters: Filters,
    pub poll: bool,
}

/// Most messages one cache transaction writes.
pub const WRITE_BATCH: usize = 512;
/// How long the cache writer waits for more messages before it commits a
/// batch smaller than `WRITE_BATCH`. Fan-out does not wait for the cache and
/// catch-ups read the queue, so this delays nothing a subscriber sees; it
/// turns a steady trickle into one transaction (and one hop to the SQLite
/// thread) per batch instead of per message: at 1,000 msg/s of 256 B the
/// bridge spent ~0.4 ms of CPU per message, mostly context switches; 50 ms
/// takes 15–20% off the 10 ms figure (docs/benchmarks/relay-bridge.md).
/// What a crash loses is what waits here. A flush never waits.
pub const WRITE_LINGER: Duration = Duration::from_millis(50);
/// Messages queued for the cache before publishers wait (backpressure on a
/// cache that cannot keep up; bounds `pending`).
pub const WRITE_QUEUE: usize = 65_536;
/// Default bytes queued for the cache before publishers wait
/// (`cache.queue_bytes`): 65,536 messages of 64 KiB would be 4 GiB.
pub const WRITE_QUEUE_BYTES: usize = 64 << 20;
/// What a queued message is charged beyond its text (its other fields and
/// its place in `pending`).
const QUEUE_OVERHEAD: usize = 256;

enum WriterCmd {
    Write(Item),
    Flush(oneshot::Sender<()>),
}

/// The bytes the cache writer's queue holds, as semaphore permits taken by
/// `publish` and given back once a batch is committed.
#[derive(Debug)]
struct Budget {
    permits: tokio::sync::Semaphore,
    total: u32,
}

impl Budget {
    fn new(bytes: usize) -> Budget {
        let total = u32::try_from(bytes.max(1)).unwrap_or(u32::MAX);
        Budget {
            permits: tokio::sync::Semaphore::new(total as usize),
            total,
        }
    }

    /// A message's charge: never more than the whole budget, so one message
    /// larger than it still goes (alone).
    fn cost(&self, m: &Message) -> u32 {
        let n = m.message.as_ref().map_or(0, |t| t.len()) + QUEUE_OVERHEAD;
        u32::try_from(n).unwrap_or(u32::MAX).min(self.total)
    }
}

/// Messages fanned out but not yet committed to the cache, by ordering key.
type Pending = Arc<Mutex<BTreeMap<i64, Item>>>;

/// The background cache writer's queue and what it has not committed yet.
struct Writer {
    tx: mpsc::Sender<WriterCmd>,
    pending: Pending,
    budget: Arc<Budget>,
}

/// The hub: shared by the HTTP handlers and the MQTT bridge.
pub struct Hub {
    store: Option<Store>,
    writer: Option<Writer>,
    cache_secs: i64,
    clock: Arc<dyn Clock>,
    rng: Mutex<rand::rngs::StdRng>,
    order: tokio::sync::Mutex<i64>,
    live: broadcast::Sender<Item>,
    to_mqtt: Mutex<Option<mpsc::UnboundedSender<Item>>>,
    shutdown: watch::Sender<bool>,
    keepalive: Duration,
    write_timeout: Duration,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("cache_secs", &self.cache_secs)
            .finish()
    }
}

/// Hub settings.
#[derive(Debug, Clone)]
pub struct HubOptions {
    pub cache_secs: i64,
    pub broadcast_capacity: usize,
    pub keepalive: Duration,
    pub write_timeout: Duration,
    /// Bytes queued for the cache before publishers wait.
    pub queue_bytes: usize,
    /// Messages queued for the cache before publishers wait
    /// (`WRITE_QUEUE`).
    pub queue_messages: usize,
}

impl Hub {
    pub fn new(store: Option<Store>, opts: HubOptions, clock: Arc<dyn Clock>) -> Arc<Hub> {
        let (live, _) = broadcast::channel(opts.broadcast_capacity.max(1));
        let (shutdown, _) = watch::channel(false);
        let store = if opts.cache_secs > 0 { store } else { None };
        let writer = store.clone().map(|st| {
            let (tx, rx) = mpsc::channel(opts.queue_messages.max(1));
            let pending = Pending::default();
            let budget = Arc::new(Budget::new(opts.queue_bytes));
            tokio::spawn(write_loop(st, pending.clone(), budget.clone(), rx));
            Writer {
                tx,
                pending,
                budget,
            }
        });
        Arc::new(Hub {
            store,
            writer,
            cache_secs: opts.cache_secs,
            clock,
            rng: Mutex::new(rand::rngs::StdRng::from_entropy()),
            order: tokio::sync::Mutex::new(0),
            live,
            to_mqtt: Mutex::new(None),
            shutdown,
            keepalive: opts.keepalive,
            write_timeout: opts.write_timeout,
        })
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    pub fn fresh_id(&self) -> String {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        new_id(&mut *rng)
    }

    /// Where messages from HTTP go to reach MQTT subscribers.
    pub fn set_mqtt_sink(&self, tx: mpsc::UnboundedSender<Item>) {
        *self.to_mqtt.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    /// Live subscribers right now.
    pub fn subscriber_count(&self) -> usize {
        self.live.receiver_count()
    }

    /// Publishes one message: fan-out first, the cache write queued behind
    /// it (one ordering key per message, strictly increasing, so per-topic
    /// order holds on every path and in the cache).
    pub async fn publish(&self, d: Draft, origin: Origin) -> Result<Item> {
        let mut last = self.order.lock().await;
        let key = self.clock.now_us().max(*last + 1);
        let mut m = Message::with_body(self.fresh_id(), key, d.topic, d.body);
        m.title = d.title;
        m.tags = d.tags;
        m.priority = d.priority;
        m.click = d.click;
        let cached = d.cache && self.writer.is_some();
        if cached {
            m.expires = Some(m.time + self.cache_secs);
        }
        let m = Arc::new(m);
        if let (true, Some(w)) = (cached, &self.writer) {
            // Room in the queue's bytes, then a place in it, both before
            // anything changes: a publish dropped while it waits (a client
            // that hung up) leaves no trace and holds no room.
            let room = w
                .budget
                .permits
                .acquire_many(w.budget.cost(&m))
                .await
                .map_err(|_| Error::CacheClosed)?;
            let slot = w.tx.reserve().await.map_err(|_| Error::CacheClosed)?;
            // Given back by the writer once the message is committed.
            room.forget();
            // Into `pending` before any subscriber can see it live: a
            // catch-up that starts now finds it there or in the cache.
            lock(&w.pending).insert(key, m.clone());
            slot.send(WriterCmd::Write(m.clone()));
        }
        *last = key;
        let _ = self.live.send(m.clone());
        if origin == Origin::Http
            && let Some(tx) = &*self.to_mqtt.lock().unwrap_or_else(|p| p.into_inner())
        {
            let _ = tx.send(m.clone());
        }
        drop(last);
        metrics::counter!("rdv_bridge_messages_in_total", "protocol" => origin.as_str())
            .increment(1);
        Ok(m)
    }

    /// Returns once every message published before the call is committed to
    /// the cache (or its write has failed for good). Shutdown calls it
    /// before closing the cache.
    pub async fn flush(&self) {
        if let Some(w) = &self.writer {
            let (tx, rx) = oneshot::channel();
            if w.tx.send(WriterCmd::Flush(tx)).await.is_ok() {
                let _ = rx.await;
            }
        }
    }

    /// Messages fanned out but not yet in the cache (for tests and metrics).
    pub fn pending_writes(&self) -> usize {
        self.writer.as_ref().map_or(0, |w| lock(&w.pending).len())
    }

    /// Bytes queued for the cache (charged as `publish` does), for
    /// `/metrics`.
    pub fn queued_bytes(&self) -> usize {
        self.writer.as_ref().map_or(0, |w| {
            (w.budget.total as usize).saturating_sub(w.budget.permits.available_permits())
        })
    }

    /// Asks every subscription to end (graceful shutdown drains them).
    pub fn shutdown(&self) {
        // send_replace: stored even when no subscription is listening.
        self.shutdown.send_replace(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Runs one subscription: `open` (unless polling), the cached messages
    /// `since` asks for, then live messages and keepalives, exactly once each,
    /// until the client goes, stops reading for the write timeout, or the
    /// bridge shuts down.
    pub async fn run_subscription(self: Arc<Self>, req: SubRequest, out: mpsc::Sender<Item>) {
        let mut live = self.live.subscribe();
        let mut stop = self.shutdown.subscribe();
        if *stop.borrow_and_update() {
            return;
        }
        if !req.poll
            && !self
                .emit(&out, self.control(Event::Open, &req.topics))
                .await
        {
            return;
        }
        let mut overlap = match self.catch_up(&req, &req.since, &out).await {
            Some(o) => o,
            None => return,
        };
        if req.poll {
            return;
        }
        let mut ka = tokio::time::interval(self.keepalive);
        ka.tick().await;
        loop {
            tokio::select! {
                r = live.recv() => match r {
                    Ok(m) => {
                        if overlap.skip(&m) || !req.topics.contains(&m.topic) || !req.filters.matches(&m) {
                            continue;
                        }
                        overlap.last_key = m.key;
                        if !self.emit(&out, m).await {
                            return;
                        }
                        metrics::counter!("rdv_bridge_messages_out_total", "protocol" => "http").increment(1);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Behind: catch up from the cache after the last sent.
                        let since = Since::Key(overlap.last_key);
                        overlap = match self.catch_up(&req, &since, &out).await {
                            Some(o) => o,
                            None => return,
                        };
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ka.tick() => {
                    if !self.emit(&out, self.control(Event::Keepalive, &req.topics)).await {
                        return;
                    }
                }
                _ = stop.changed() => return,
                _ = out.closed() => return,
            }
        }
    }

    fn control(&self, e: Event, topics: &[String]) -> Item {
        Arc::new(Message::control(
            e,
            self.fresh_id(),
            self.clock.now_secs(),
            topics,
        ))
    }

    async fn emit(&self, out: &mpsc::Sender<Item>, m: Item) -> bool {
        matches!(
            tokio::time::timeout(self.write_timeout, out.send(m)).await,
            Ok(Ok(()))
        )
    }

    async fn catch_up(
        &self,
        req: &SubRequest,
        since: &Since,
        out: &mpsc::Sender<Item>,
    ) -> Option<Overlap> {
        let floor = match since {
            Since::Key(k) => *k,
            _ => i64::MIN,
        };
        let mut ov = Overlap {
            floor,
            ids: HashSet::new(),
            max_key: floor,
            last_key: floor,
        };
        let (Some(store), Some(w)) = (&self.store, &self.writer) else {
            return Some(ov);
        };
        let cached = match cached_since(
            store,
            &w.pending,
            &req.topics,
            since,
            self.clock.now_secs(),
        )
        .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cache query failed");
                return None;
            }
        };
        for m in cached {
            ov.ids.insert(m.id.clone());
            ov.max_key = ov.max_key.max(m.key);
            ov.last_key = ov.max_key;
            if req.filters.matches(&m) {
                if !self.emit(out, m).await {
                    return None;
                }
                metrics::counter!("rdv_bridge_messages_out_total", "protocol" => "http")
                    .increment(1);
            }
        }
        Some(ov)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lowest ordering key (exclusive) `since` admits; None for `latest`
/// and `none`, which are not floors.
fn floor_of(since: &Since) -> Option<i64> {
    match since {
        Since::All => Some(i64::MIN),
        Since::Key(k) => Some(*k),
        Since::Time(t) => Some(t.saturating_mul(1_000_000).saturating_sub(1)),
        Since::None | Since::Latest | Since::Id(_) => None,
    }
}

/// What `since` selects for `topics`, oldest first: the cache and the
/// messages still on their way to it, once each. `pending` is read before
/// the cache: a message leaves `pending` only after its batch is committed,
/// so it is in one or the other.
async fn cached_since(
    store: &Store,
    pending: &Pending,
    topics: &[String],
    since: &Since,
    now_secs: i64,
) -> Result<Vec<Item>> {
    let snapshot: Vec<Item> = lock(pending).values().cloned().collect();
    let since = match since {
        Since::Id(id) => match snapshot.iter().find(|m| m.id == *id) {
            Some(m) => Since::Key(m.key),
            None => match store.key_of(id).await? {
                Some(k) => Since::Key(k),
                // ntfy: an unknown id returns everything cached.
                None => Since::All,
            },
        },
        other => other.clone(),
    };
    let fresh = snapshot
        .into_iter()
        .filter(|m| topics.contains(&m.topic) && m.expires.is_some_and(|e| e > now_secs));
    let mut out: Vec<Item> = store
        .query(topics, &since, now_secs)
        .await?
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut seen: HashSet<String> = out.iter().map(|m| m.id.clone()).collect();
    match since {
        Since::None => return Ok(Vec::new()),
        Since::Latest => {
            if let Some(m) = fresh.last()
                && out.first().is_none_or(|c| c.key < m.key)
            {
                out = vec![m];
            }
            return Ok(out);
        }
        _ => {}
    }
    // Shared mode: a pending message whose topic and payload are already
    // cached (written first by another bridge) is that row, not a second one.
    let shared = store.is_shared();
    let ck = |m: &Message| crate::content::content_key(&m.topic, &m.payload());
    let mut contents: HashSet<String> = if shared {
        out.iter().map(|m| ck(m)).collect()
    } else {
        HashSet::new()
    };
    let floor = floor_of(&since).unwrap_or(i64::MIN);
    for m in fresh.filter(|m| m.key > floor) {
        if seen.insert(m.id.clone()) && (!shared || contents.insert(ck(&m))) {
            out.push(m);
        }
    }
    out.sort_by_key(|m| m.key);
    Ok(out)
}

/// The background cache writer: one transaction per batch of queued
/// messages; a message leaves `pending` once committed. A batch that fails
/// three times is dropped and counted (the messages were delivered live but
/// will not be found by a later `since=`).
async fn write_loop(
    store: Store,
    pending: Pending,
    budget: Arc<Budget>,
    mut rx: mpsc::Receiver<WriterCmd>,
) {
    let mut cmds = Vec::with_capacity(WRITE_BATCH);
    while rx.recv_many(&mut cmds, WRITE_BATCH).await > 0 {
        let until = tokio::time::Instant::now() + WRITE_LINGER;
        while cmds.len() < WRITE_BATCH && !cmds.iter().any(|c| matches!(c, WriterCmd::Flush(_))) {
            let room = WRITE_BATCH - cmds.len();
            match tokio::time::timeout_at(until, rx.recv_many(&mut cmds, room)).await {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        let mut batch = Vec::with_capacity(cmds.len());
        let mut flushes = Vec::new();
        for c in cmds.drain(..) {
            match c {
                WriterCmd::Write(m) => batch.push(m),
                WriterCmd::Flush(t) => flushes.push(t),
            }
        }
        if !batch.is_empty() {
            for attempt in 1..=3u32 {
                match store.insert_batch(&batch).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, messages = batch.len(), attempt, "cache write failed");
                        if attempt == 3 {
                            metrics::counter!("rdv_bridge_cache_write_failures_total")
                                .increment(batch.len() as u64);
                        } else {
                            tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt)))
                                .await;
                        }
                    }
                }
            }
            let mut p = lock(&pending);
            let mut freed = 0;
            for m in &batch {
                p.remove(&m.key);
                freed += budget.cost(m) as usize;
            }
            drop(p);
            budget.permits.add_permits(freed);
        }
        for f in flushes {
            let _ = f.send(());
        }
    }
}

/// Live messages already sent (before `floor`, or by the cache query) are
/// skipped, so each message goes out exactly once.
struct Overlap {
    floor: i64,
    ids: HashSet<String>,
    max_key: i64,
    last_key: i64,
}

impl Overlap {
    fn skip(&mut self, m: &Message) -> bool {
        if m.key <= self.floor {
            return true;
        }
        if m.key <= self.max_key {
            return self.ids.contains(&m.id);
        }
        if !self.ids.is_empty() {
            self.ids = HashSet::new();
        }
        false
    }
}
