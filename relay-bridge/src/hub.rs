//! The publish pipeline and fan-out: every message, from HTTP or MQTT, gets
//! its id and ordering key, goes into the cache, then to live subscribers,
//! and (if it came from HTTP) to the MQTT side, in one order for all.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use tokio::sync::{broadcast, mpsc, watch};

use crate::Result;
use crate::message::{Clock, Event, Filters, Message, new_id};
use crate::since::Since;
use crate::store::Store;

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
    pub body: Vec<u8>,
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

/// The hub: shared by the HTTP handlers and the MQTT bridge.
pub struct Hub {
    store: Option<Store>,
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
}

impl Hub {
    pub fn new(store: Option<Store>, opts: HubOptions, clock: Arc<dyn Clock>) -> Arc<Hub> {
        let (live, _) = broadcast::channel(opts.broadcast_capacity.max(1));
        let (shutdown, _) = watch::channel(false);
        let store = if opts.cache_secs > 0 { store } else { None };
        Arc::new(Hub {
            store,
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

    /// Publishes one message.
    pub async fn publish(&self, d: Draft, origin: Origin) -> Result<Item> {
        let mut last = self.order.lock().await;
        let key = self.clock.now_us().max(*last + 1);
        let mut m = Message::with_body(self.fresh_id(), key, d.topic, &d.body);
        m.title = d.title;
        m.tags = d.tags;
        m.priority = d.priority;
        m.click = d.click;
        let cached = d.cache && self.store.is_some();
        if cached {
            m.expires = Some(m.time + self.cache_secs);
        }
        if let (true, Some(store)) = (cached, &self.store) {
            store.insert(&m).await?;
        }
        *last = key;
        let m = Arc::new(m);
        let _ = self.live.send(m.clone());
        if origin == Origin::Http
            && let Some(tx) = &*self.to_mqtt.lock().unwrap_or_else(|p| p.into_inner())
        {
            let _ = tx.send(m.clone());
        }
        metrics::counter!("rdv_bridge_messages_in_total", "protocol" => origin.as_str())
            .increment(1);
        Ok(m)
    }

    /// Asks every subscription to end (graceful shutdown drains them).
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
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
        let Some(store) = &self.store else {
            return Some(ov);
        };
        let cached = match store.query(&req.topics, since, self.clock.now_secs()).await {
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
                if !self.emit(out, Arc::new(m)).await {
                    return None;
                }
                metrics::counter!("rdv_bridge_messages_out_total", "protocol" => "http")
                    .increment(1);
            }
        }
        Some(ov)
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
