//! rdv patch: what the router holds in memory, readable from other threads.
//!
//! The router runs on a thread of its own and owns its maps; it stores these
//! figures after every loop so an embedding application can export them
//! (the relay bridge's `/metrics`) and tests can see memory come back.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live figures of one router. Each is a plain store: readers may see one
/// loop's filters with the previous loop's bytes.
#[derive(Debug, Default)]
pub struct RouterGauges {
    filters: AtomicU64,
    log_bytes: AtomicU64,
    topic_cache: AtomicU64,
    subscriptions: AtomicU64,
    retained: AtomicU64,
    retained_bytes: AtomicU64,
    retained_refused: AtomicU64,
    saved_sessions: AtomicU64,
    lagged: AtomicU64,
}

/// One reading of [`RouterGauges`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GaugeReading {
    /// Filters with a log (one per distinct filter someone subscribes to).
    pub filters: u64,
    /// Bytes of publications held in all filter logs.
    pub log_bytes: u64,
    /// Topics whose matching filters are cached.
    pub topic_cache: u64,
    /// Distinct subscription filters with a live subscriber.
    pub subscriptions: u64,
    /// Retained messages.
    pub retained: u64,
    /// Bytes of retained messages (topic and payload).
    pub retained_bytes: u64,
    /// Retained publications not kept because of `max_retained_bytes`.
    pub retained_refused: u64,
    /// Persistent sessions kept for clients that are away.
    pub saved_sessions: u64,
    /// Publications that subscribers missed because they fell further
    /// behind than a filter's log holds (cumulative).
    pub lagged: u64,
}

impl RouterGauges {
    pub fn read(&self) -> GaugeReading {
        GaugeReading {
            filters: self.filters.load(Relaxed),
            log_bytes: self.log_bytes.load(Relaxed),
            topic_cache: self.topic_cache.load(Relaxed),
            subscriptions: self.subscriptions.load(Relaxed),
            retained: self.retained.load(Relaxed),
            retained_bytes: self.retained_bytes.load(Relaxed),
            retained_refused: self.retained_refused.load(Relaxed),
            saved_sessions: self.saved_sessions.load(Relaxed),
            lagged: self.lagged.load(Relaxed),
        }
    }

    pub(crate) fn store(&self, r: GaugeReading) {
        self.filters.store(r.filters, Relaxed);
        self.log_bytes.store(r.log_bytes, Relaxed);
        self.topic_cache.store(r.topic_cache, Relaxed);
        self.subscriptions.store(r.subscriptions, Relaxed);
        self.retained.store(r.retained, Relaxed);
        self.retained_bytes.store(r.retained_bytes, Relaxed);
        self.retained_refused.store(r.retained_refused, Relaxed);
        self.saved_sessions.store(r.saved_sessions, Relaxed);
        self.lagged.store(r.lagged, Relaxed);
    }
}
