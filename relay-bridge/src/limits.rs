//! Visitor limits (issue #5), as ntfy operators know them: per visitor (an
//! IPv4 address, or an IPv6 /64) a request bucket, open subscriptions and
//! bytes per day; and a global ceiling. Refusals carry a reason and, where
//! waiting helps, a `Retry-After`. HTTP and the embedded MQTT broker share
//! one `Limits`: a visitor's subscriptions and bytes per day are the same on
//! both. MQTT adds a cap on concurrent connections and has a packet bucket
//! of its own (issue #14), which slows a publisher instead of refusing it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::Clock as _;
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::LimitsConfig;
use crate::message::{Clock, UnixTime as _};

/// A visitor: an IPv4 address or an IPv6 /64 (IPv4-mapped IPv6 is IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Visitor(IpAddr);

impl Visitor {
    pub fn of(ip: IpAddr) -> Visitor {
        match ip {
            IpAddr::V4(v4) => Visitor(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Visitor(IpAddr::V4(v4)),
                None => {
                    let s = v6.segments();
                    Visitor(IpAddr::V6(Ipv6Addr::new(
                        s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                    )))
                }
            },
        }
    }
}

impl std::fmt::Display for Visitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    RequestRate,
    GlobalRate,
    Subscriptions,
    Subscribers,
    BytesPerDay,
    MqttConnections,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::RequestRate => "request limit reached",
            Refusal::GlobalRate => "server-wide request limit reached",
            Refusal::Subscriptions => "subscription limit reached for this visitor",
            Refusal::Subscribers => "server-wide subscriber limit reached",
            Refusal::BytesPerDay => "daily byte limit reached for this visitor",
            Refusal::MqttConnections => "MQTT connection limit reached for this visitor",
        }
    }
    pub fn metric(self) -> &'static str {
        match self {
            Refusal::RequestRate => "request_rate",
            Refusal::GlobalRate => "global_rate",
            Refusal::Subscriptions => "subscriptions",
            Refusal::Subscribers => "subscribers",
            Refusal::BytesPerDay => "bytes_per_day",
            Refusal::MqttConnections => "mqtt_connections",
        }
    }
}

/// A refusal and how long to wait before trying again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub refusal: Refusal,
    pub retry_after_secs: u64,
}

/// Which MQTT bucket held a packet back (issue #14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowedBy {
    /// The visitor's own (`mqtt_publish_burst`, `mqtt_publish_per_sec`).
    Visitor,
    /// The global one (`mqtt_global_publish_*`).
    Global,
}

impl SlowedBy {
    pub fn metric(self) -> &'static str {
        match self {
            SlowedBy::Visitor => "visitor",
            SlowedBy::Global => "global",
        }
    }
}

/// An MQTT packet that must wait: no token was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slowed {
    pub by: SlowedBy,
    pub wait: Duration,
}

/// A GCRA token bucket over the injected clock (nanoseconds): `burst`
/// tokens, one back every `interval`. Its state is one number, the
/// theoretical arrival time (`tat`) of the next token; a bucket whose `tat`
/// is past is full, so only buckets in use need to be kept.
#[derive(Debug, Clone, Copy)]
struct Gcra {
    interval: i128,
    /// How far `tat` may run ahead of now: (burst − 1) intervals.
    tolerance: i128,
}

impl Gcra {
    fn new(per_sec: u32, burst: u32) -> Gcra {
        let interval = (1_000_000_000 / i128::from(per_sec.max(1))).max(1);
        Gcra {
            interval,
            tolerance: interval * i128::from(burst.max(1) - 1),
        }
    }

    /// `tat` seen from `now`. A clock stepped back leaves at most an empty
    /// bucket (one interval to wait), never a long stall.
    fn clamp(&self, tat: i128, now: i128) -> i128 {
        tat.clamp(now, now + self.tolerance + self.interval)
    }

    /// Nanoseconds until a token is free (0: one is).
    fn wait(&self, tat: i128, now: i128) -> i128 {
        (self.clamp(tat, now) - self.tolerance - now).max(0)
    }

    /// The `tat` after taking a token (only when `wait` is 0).
    fn take(&self, tat: i128, now: i128) -> i128 {
        self.clamp(tat, now) + self.interval
    }
}

/// The MQTT buckets: per visitor, and the global one.
#[derive(Debug, Default)]
struct MqttBuckets {
    visitors: HashMap<Visitor, i128>,
    global: i128,
}

/// Most visitors' MQTT buckets kept; past it, full ones are forgotten.
const MQTT_BUCKETS_MAX: usize = 100_000;

/// The limiter state.
pub struct Limits {
    cfg: LimitsConfig,
    clock: Arc<dyn Clock>,
    visitors: DefaultKeyedRateLimiter<Visitor>,
    global: DefaultDirectRateLimiter,
    subs: Mutex<HashMap<Visitor, u32>>,
    total_subs: AtomicUsize,
    bytes: Mutex<HashMap<Visitor, (i64, u64)>>,
    /// Open MQTT connections per visitor.
    conns: Mutex<HashMap<Visitor, u32>>,
    mqtt_visitor: Gcra,
    mqtt_global: Gcra,
    mqtt: Mutex<MqttBuckets>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits").field("cfg", &self.cfg).finish()
    }
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n.max(1)).unwrap_or(NonZeroU32::MIN)
}

impl Limits {
    pub fn new(cfg: LimitsConfig, clock: Arc<dyn Clock>) -> Arc<Limits> {
        let per = Duration::from_millis(cfg.request_replenish_ms.max(1));
        let vq = Quota::with_period(per)
            .unwrap_or(Quota::per_second(NonZeroU32::MIN))
            .allow_burst(nz(cfg.request_burst));
        let gq =
            Quota::per_second(nz(cfg.global_requests_per_sec)).allow_burst(nz(cfg.global_burst));
        Arc::new(Limits {
            mqtt_visitor: Gcra::new(cfg.mqtt_publish_per_sec, cfg.mqtt_publish_burst),
            mqtt_global: Gcra::new(
                cfg.mqtt_global_publish_per_sec,
                cfg.mqtt_global_publish_burst,
            ),
            mqtt: Mutex::new(MqttBuckets::default()),
            visitors: RateLimiter::keyed(vq),
            global: RateLimiter::direct(gq),
            cfg,
            clock,
            subs: Mutex::new(HashMap::new()),
            total_subs: AtomicUsize::new(0),
            bytes: Mutex::new(HashMap::new()),
            conns: Mutex::new(HashMap::new()),
        })
    }

    pub fn message_size_limit(&self) -> usize {
        self.cfg.message_size_limit
    }

    /// Takes one token from the visitor's bucket and the global one.
    ///
    /// The limiters' own clock gives `now`: building a `DefaultClock` per
    /// call (it calibrates, reading CPUID) was an eighth of the broker
    /// thread's CPU at full MQTT rate (docs/benchmarks/relay-bridge.md).
    pub fn request(&self, v: Visitor) -> Result<(), Limited> {
        if let Err(nu) = self.visitors.check_key(&v) {
            let now = self.visitors.clock().now();
            return Err(Limited {
                refusal: Refusal::RequestRate,
                retry_after_secs: nu.wait_time_from(now).as_secs().max(1),
            });
        }
        if let Err(nu) = self.global.check() {
            let now = self.global.clock().now();
            return Err(Limited {
                refusal: Refusal::GlobalRate,
                retry_after_secs: nu.wait_time_from(now).as_secs().max(1),
            });
        }
        Ok(())
    }

    /// One MQTT packet (PUBLISH or SUBSCRIBE) of `v` (issue #14): a token
    /// from the visitor's MQTT bucket and one from the global MQTT bucket,
    /// both or neither. `Err` says how long to wait; the broker holds the
    /// packet and stops reading the connection until then.
    pub fn mqtt_packet(&self, v: Visitor) -> Result<(), Slowed> {
        let now = i128::from(self.clock.now_us()) * 1000;
        let mut b = self.mqtt.lock().unwrap_or_else(|p| p.into_inner());
        let tat = b.visitors.get(&v).copied().unwrap_or(now);
        let slowed = |by, ns: i128| Slowed {
            by,
            wait: Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)),
        };
        let w = self.mqtt_visitor.wait(tat, now);
        if w > 0 {
            return Err(slowed(SlowedBy::Visitor, w));
        }
        let w = self.mqtt_global.wait(b.global, now);
        if w > 0 {
            return Err(slowed(SlowedBy::Global, w));
        }
        b.global = self.mqtt_global.take(b.global, now);
        if b.visitors.len() >= MQTT_BUCKETS_MAX && !b.visitors.contains_key(&v) {
            b.visitors.retain(|_, t| *t > now);
        }
        b.visitors.insert(v, self.mqtt_visitor.take(tat, now));
        Ok(())
    }

    /// Whether `n` more bytes fit in the visitor's day, spending nothing.
    pub fn bytes_fit(&self, v: Visitor, n: u64) -> Result<(), Limited> {
        self.bytes(v, n, false)
    }

    /// Counts `n` published bytes against the visitor's day (UTC).
    pub fn spend_bytes(&self, v: Visitor, n: u64) -> Result<(), Limited> {
        self.bytes(v, n, true)
    }

    fn bytes(&self, v: Visitor, n: u64, spend: bool) -> Result<(), Limited> {
        let now = self.clock.now_secs();
        let day = now.div_euclid(86_400);
        let mut map = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 100_000 {
            map.retain(|_, (d, _)| *d == day);
        }
        let e = map.entry(v).or_insert((day, 0));
        if e.0 != day {
            *e = (day, 0);
        }
        if e.1.saturating_add(n) > self.cfg.bytes_per_day {
            let left = (day + 1) * 86_400 - now;
            return Err(Limited {
                refusal: Refusal::BytesPerDay,
                retry_after_secs: u64::try_from(left.max(1)).unwrap_or(1),
            });
        }
        if spend {
            e.1 += n;
        }
        Ok(())
    }

    /// Opens a subscription slot; dropping the guard frees it.
    pub fn subscribe(self: &Arc<Self>, v: Visitor) -> Result<SubGuard, Limited> {
        let mut map = self.subs.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(v).or_insert(0);
        if *n >= self.cfg.subscriptions_per_visitor {
            return Err(Limited {
                refusal: Refusal::Subscriptions,
                retry_after_secs: 30,
            });
        }
        if self.total_subs.load(Ordering::SeqCst) >= self.cfg.max_subscribers {
            return Err(Limited {
                refusal: Refusal::Subscribers,
                retry_after_secs: 30,
            });
        }
        *n += 1;
        self.total_subs.fetch_add(1, Ordering::SeqCst);
        metrics::gauge!("rdv_bridge_subscribers").increment(1.0);
        Ok(SubGuard {
            limits: self.clone(),
            v,
        })
    }

    /// Opens an MQTT connection slot for `v` (at most
    /// `mqtt_connections_per_visitor`); dropping the guard frees it.
    pub fn mqtt_connection(self: &Arc<Self>, v: Visitor) -> Result<ConnGuard, Limited> {
        let mut map = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(v).or_insert(0);
        if *n >= self.cfg.mqtt_connections_per_visitor {
            return Err(Limited {
                refusal: Refusal::MqttConnections,
                retry_after_secs: 30,
            });
        }
        *n += 1;
        Ok(ConnGuard {
            limits: self.clone(),
            v,
        })
    }

    pub fn subscribers(&self) -> usize {
        self.total_subs.load(Ordering::SeqCst)
    }

    /// Forgets idle buckets (called now and then).
    pub fn housekeeping(&self) {
        self.visitors.retain_recent();
        self.visitors.shrink_to_fit();
        let now = i128::from(self.clock.now_us()) * 1000;
        let mut b = self.mqtt.lock().unwrap_or_else(|p| p.into_inner());
        b.visitors.retain(|_, t| *t > now);
        b.visitors.shrink_to_fit();
    }
}

/// An open MQTT connection slot.
#[derive(Debug)]
pub struct ConnGuard {
    limits: Arc<Limits>,
    v: Visitor,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        release(&self.limits.conns, self.v);
    }
}

/// Gives back one of `v`'s slots in `counts`, forgetting `v` at zero (the
/// maps hold only visitors with something open).
fn release(counts: &Mutex<HashMap<Visitor, u32>>, v: Visitor) {
    let mut map = counts.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = map.get_mut(&v) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(&v);
        }
    }
}

/// An open subscription slot.
#[derive(Debug)]
pub struct SubGuard {
    limits: Arc<Limits>,
    v: Visitor,
}

impl Drop for SubGuard {
    fn drop(&mut self) {
        release(&self.limits.subs, self.v);
        self.limits.total_subs.fetch_sub(1, Ordering::SeqCst);
        metrics::gauge!("rdv_bridge_subscribers").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ManualClock, unix_us};

    fn limits(f: impl FnOnce(&mut LimitsConfig)) -> (Arc<Limits>, Arc<ManualClock>) {
        let mut c = LimitsConfig::default();
        f(&mut c);
        let clock = Arc::new(ManualClock::new(unix_us(1_700_000_000_000_000)));
        (Limits::new(c, clock.clone()), clock)
    }

    #[test]
    fn ipv6_slash64_is_one_visitor() {
        let a = Visitor::of("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = Visitor::of("2001:db8:1:2:bbbb::2".parse().unwrap());
        let c = Visitor::of("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        let m = Visitor::of("::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(m, Visitor::of("10.0.0.1".parse().unwrap()));
        assert_ne!(
            Visitor::of("10.0.0.1".parse().unwrap()),
            Visitor::of("10.0.0.2".parse().unwrap())
        );
    }

    #[test]
    fn request_bucket_per_visitor() {
        let (l, _) = limits(|c| {
            c.request_burst = 3;
            c.request_replenish_ms = 3_600_000;
        });
        let a = Visitor::of("10.0.0.1".parse().unwrap());
        let b = Visitor::of("10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            l.request(a).unwrap();
        }
        let e = l.request(a).unwrap_err();
        assert_eq!(e.refusal, Refusal::RequestRate);
        assert!(e.retry_after_secs >= 1);
        l.request(b).unwrap();
    }

    #[test]
    fn global_ceiling() {
        let (l, _) = limits(|c| {
            c.global_burst = 2;
            c.global_requests_per_sec = 1;
        });
        l.request(Visitor::of("10.0.0.1".parse().unwrap())).unwrap();
        l.request(Visitor::of("10.0.0.2".parse().unwrap())).unwrap();
        let e = l
            .request(Visitor::of("10.0.0.3".parse().unwrap()))
            .unwrap_err();
        assert_eq!(e.refusal, Refusal::GlobalRate);
    }

    /// The MQTT bucket (issue #14): a burst passes at once, then one
    /// packet per interval, with the wait told exactly and nothing taken
    /// while waiting; it is per visitor, apart from HTTP's bucket, and the
    /// global one holds everyone. Time is the injected clock.
    #[test]
    fn mqtt_bucket_paces_and_takes_nothing_while_waiting() {
        let (l, clock) = limits(|c| {
            c.mqtt_publish_burst = 3;
            c.mqtt_publish_per_sec = 4; // one every 250 ms
            c.request_burst = 1;
            c.request_replenish_ms = 3_600_000;
        });
        let a = Visitor::of("10.0.0.1".parse().unwrap());
        let b = Visitor::of("10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            l.mqtt_packet(a).unwrap();
        }
        let s = l.mqtt_packet(a).unwrap_err();
        assert_eq!(s.by, SlowedBy::Visitor);
        assert_eq!(s.wait, Duration::from_millis(250));
        // Asking again takes nothing: the wait shrinks only with time.
        clock.advance(time::Duration::milliseconds(100));
        assert_eq!(
            l.mqtt_packet(a).unwrap_err().wait,
            Duration::from_millis(150)
        );
        clock.advance(time::Duration::milliseconds(150));
        l.mqtt_packet(a).unwrap();
        assert_eq!(
            l.mqtt_packet(a).unwrap_err().wait,
            Duration::from_millis(250)
        );
        // Another visitor has its own bucket; HTTP's is another one.
        l.mqtt_packet(b).unwrap();
        l.request(a).unwrap();
        assert_eq!(l.request(a).unwrap_err().refusal, Refusal::RequestRate);
        l.mqtt_packet(b).unwrap();
        // An idle bucket refills to its burst, no further.
        clock.advance(time::Duration::seconds(3600));
        for _ in 0..3 {
            l.mqtt_packet(a).unwrap();
        }
        assert!(l.mqtt_packet(a).is_err());
        // Housekeeping forgets full buckets only.
        l.housekeeping();
        assert!(l.mqtt_packet(a).is_err(), "a's bucket is still empty");
    }

    #[test]
    fn mqtt_global_bucket_holds_every_visitor() {
        let (l, clock) = limits(|c| {
            c.mqtt_global_publish_burst = 2;
            c.mqtt_global_publish_per_sec = 10;
        });
        let v = |i: u8| Visitor::of(std::net::IpAddr::from([10, 0, 0, i]));
        l.mqtt_packet(v(1)).unwrap();
        l.mqtt_packet(v(2)).unwrap();
        let s = l.mqtt_packet(v(3)).unwrap_err();
        assert_eq!(s.by, SlowedBy::Global);
        assert_eq!(s.wait, Duration::from_millis(100));
        clock.advance(time::Duration::milliseconds(100));
        l.mqtt_packet(v(3)).unwrap();
        // A global wait took no token from the visitor's own bucket.
        let (l2, clock2) = limits(|c| {
            c.mqtt_global_publish_burst = 1;
            c.mqtt_global_publish_per_sec = 1;
            c.mqtt_publish_burst = 1;
            c.mqtt_publish_per_sec = 1;
        });
        l2.mqtt_packet(v(1)).unwrap();
        for _ in 0..3 {
            assert_eq!(l2.mqtt_packet(v(2)).unwrap_err().by, SlowedBy::Global);
        }
        clock2.advance(time::Duration::seconds(1));
        l2.mqtt_packet(v(2)).unwrap();
    }

    /// A clock stepped back leaves one interval to wait, not the step.
    #[test]
    fn mqtt_bucket_survives_a_clock_stepped_back() {
        let (l, clock) = limits(|c| {
            c.mqtt_publish_burst = 1;
            c.mqtt_publish_per_sec = 10;
        });
        let a = Visitor::of("10.0.0.1".parse().unwrap());
        l.mqtt_packet(a).unwrap();
        clock.advance(time::Duration::seconds(-3600));
        assert!(l.mqtt_packet(a).unwrap_err().wait <= Duration::from_millis(100));
    }

    #[test]
    fn bytes_fit_spends_nothing() {
        let (l, _) = limits(|c| c.bytes_per_day = 100);
        let a = Visitor::of("10.0.0.1".parse().unwrap());
        for _ in 0..5 {
            l.bytes_fit(a, 100).unwrap();
        }
        assert_eq!(
            l.bytes_fit(a, 101).unwrap_err().refusal,
            Refusal::BytesPerDay
        );
        l.spend_bytes(a, 100).unwrap();
        assert!(l.bytes_fit(a, 1).is_err());
    }

    #[test]
    fn bytes_per_day_resets_at_midnight() {
        let (l, clock) = limits(|c| c.bytes_per_day = 100);
        let a = Visitor::of("10.0.0.1".parse().unwrap());
        l.spend_bytes(a, 60).unwrap();
        let e = l.spend_bytes(a, 60).unwrap_err();
        assert_eq!(e.refusal, Refusal::BytesPerDay);
        l.spend_bytes(Visitor::of("10.0.0.2".parse().unwrap()), 60)
            .unwrap();
        clock.advance(time::Duration::seconds(86_400));
        l.spend_bytes(a, 60).unwrap();
    }

    #[test]
    fn mqtt_connections_per_visitor() {
        let (l, _) = limits(|c| c.mqtt_connections_per_visitor = 2);
        let a = Visitor::of("10.0.0.1".parse().unwrap());
        let b = Visitor::of("10.0.0.2".parse().unwrap());
        let g1 = l.mqtt_connection(a).unwrap();
        let _g2 = l.mqtt_connection(a).unwrap();
        assert_eq!(
            l.mqtt_connection(a).unwrap_err().refusal,
            Refusal::MqttConnections
        );
        let _b = l.mqtt_connection(b).unwrap();
        drop(g1);
        let _g3 = l.mqtt_connection(a).unwrap();
    }

    #[test]
    fn subscriptions_are_released() {
        let (l, _) = limits(|c| c.subscriptions_per_visitor = 2);
        let a = Visitor::of("10.0.0.1".parse().unwrap());
        let g1 = l.subscribe(a).unwrap();
        let _g2 = l.subscribe(a).unwrap();
        assert_eq!(l.subscribe(a).unwrap_err().refusal, Refusal::Subscriptions);
        drop(g1);
        let _g3 = l.subscribe(a).unwrap();
        assert_eq!(l.subscribers(), 2);
    }
}
