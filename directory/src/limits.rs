//! Anti-enumeration (§4.5): evaluations are the attack surface, so each
//! client (an IPv4 address, an IPv6 /64) has token buckets for evaluated
//! elements, lookups and publishes, under a global ceiling on evaluations.
//! A refusal carries the wait, sent as `Retry-After`.
//!
//! The buckets run on the service's injected [`Clock`], so refills are
//! testable with a manual clock. The system clock is wall time: if it steps
//! back, buckets refill late (stricter), never early by more than the step.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::clock::Clock;
use crate::config::{Bucket, Limits};

/// The service clock as governor's clock: nanoseconds since the Unix epoch
/// (0 before it).
#[derive(Clone)]
pub struct ServiceClock(Arc<dyn Clock>);

impl GovernorClock for ServiceClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        let ns = self.0.now().unix_timestamp_nanos();
        Nanos::from(u64::try_from(ns).unwrap_or(0))
    }
}

type Keyed = RateLimiter<u128, DefaultKeyedStateStore<u128>, ServiceClock, NoOpMiddleware<Nanos>>;
type Direct = RateLimiter<NotKeyed, InMemoryState, ServiceClock, NoOpMiddleware<Nanos>>;

/// A verdict on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Refused; retry after this many seconds (at least 1).
    Limited {
        retry_after: u64,
    },
}

/// Which bucket a request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Evaluate,
    Lookup,
    Publish,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Evaluate => "evaluate",
            Self::Lookup => "lookup",
            Self::Publish => "publish",
        }
    }
}

pub struct Limiter {
    evaluate: Keyed,
    lookup: Keyed,
    publish: Keyed,
    global: Direct,
    clock: ServiceClock,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Limiter")
    }
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn quota(b: Bucket) -> Quota {
    let period = Duration::from_secs(86_400) / b.per_day.max(1);
    Quota::with_period(period.max(Duration::from_nanos(1)))
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(nz(b.burst))
}

/// The rate-limit key of an address: IPv4 as is (mapped), IPv6 by its /64.
pub fn client_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(v4.to_ipv6_mapped()),
            None => u128::from(v6) & !((1u128 << 64) - 1),
        },
    }
}

impl Limiter {
    /// Buckets per `l`, refilled on `clock`.
    pub fn new(l: &Limits, clock: Arc<dyn Clock>) -> Self {
        let clock = ServiceClock(clock);
        let keyed =
            |b| RateLimiter::new(quota(b), DefaultKeyedStateStore::default(), clock.clone());
        Self {
            evaluate: keyed(l.evaluate),
            lookup: keyed(l.lookup),
            publish: keyed(l.publish),
            global: RateLimiter::direct_with_clock(
                Quota::per_second(nz(l.global_evaluate_per_sec))
                    .allow_burst(nz(l.global_evaluate_per_sec)),
                clock.clone(),
            ),
            clock,
        }
    }

    /// Takes `n` tokens of `kind` for the client at `ip` (and, for
    /// evaluations, from the global ceiling).
    pub fn check(&self, kind: Kind, ip: IpAddr, n: u32) -> Verdict {
        let key = client_key(ip);
        let n = nz(n);
        let limiter = match kind {
            Kind::Evaluate => &self.evaluate,
            Kind::Lookup => &self.lookup,
            Kind::Publish => &self.publish,
        };
        let now = self.clock.now();
        match limiter.check_key_n(&key, n) {
            Ok(Ok(())) => {}
            Ok(Err(nu)) => return limited(nu.wait_time_from(now)),
            // More than the burst at once can never pass: wait a day.
            Err(_) => {
                return Verdict::Limited {
                    retry_after: 86_400,
                };
            }
        }
        if kind == Kind::Evaluate {
            match self.global.check_n(n) {
                Ok(Ok(())) => {}
                Ok(Err(nu)) => return limited(nu.wait_time_from(now)),
                Err(_) => return Verdict::Limited { retry_after: 1 },
            }
        }
        Verdict::Allowed
    }

    /// Forgets clients whose buckets are full again (bounded memory).
    pub fn shrink(&self) {
        self.evaluate.retain_recent();
        self.lookup.retain_recent();
        self.publish.retain_recent();
    }
}

fn limited(wait: Duration) -> Verdict {
    Verdict::Limited {
        retry_after: (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SystemClock};

    #[test]
    fn ipv6_keyed_by_slash_64_and_ipv4_by_address() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let b: IpAddr = "2001:db8:1:2:bbbb::9"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let v4: IpAddr = IpAddr::from([10, 0, 0, 1]);
        let v4b: IpAddr = IpAddr::from([10, 0, 0, 2]);
        assert_ne!(client_key(v4), client_key(v4b));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(client_key(v4), client_key(mapped));
    }

    #[test]
    fn burst_then_refused_with_retry_after() {
        let l = Limits {
            publish: Bucket {
                burst: 3,
                per_day: 24,
            },
            ..Limits::default()
        };
        let lim = Limiter::new(&l, Arc::new(SystemClock));
        let ip = IpAddr::from([192, 0, 2, 1]);
        for _ in 0..3 {
            assert_eq!(lim.check(Kind::Publish, ip, 1), Verdict::Allowed);
        }
        match lim.check(Kind::Publish, ip, 1) {
            Verdict::Limited { retry_after } => assert!(retry_after >= 1),
            Verdict::Allowed => panic!("fourth publish allowed"),
        }
        // Another client is unaffected.
        assert_eq!(
            lim.check(Kind::Publish, IpAddr::from([192, 0, 2, 2]), 1),
            Verdict::Allowed
        );
    }

    /// A refused client is served again once its bucket refills on the
    /// service clock, and not before: no sleeping, the clock is moved by hand.
    #[test]
    fn refill_follows_the_injected_clock() {
        let l = Limits {
            evaluate: Bucket {
                burst: 2,
                per_day: 24, // one token an hour
            },
            ..Limits::default()
        };
        let t0 = time::OffsetDateTime::from_unix_timestamp(1_800_000_000)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        let clock = Arc::new(ManualClock::new(t0));
        let lim = Limiter::new(&l, clock.clone());
        let ip = IpAddr::from([198, 51, 100, 7]);
        assert_eq!(lim.check(Kind::Evaluate, ip, 2), Verdict::Allowed);
        let retry = match lim.check(Kind::Evaluate, ip, 1) {
            Verdict::Limited { retry_after } => retry_after,
            Verdict::Allowed => panic!("allowed past the burst"),
        };
        assert!(
            (3_599..=3_600).contains(&retry),
            "one token per hour: retry after {retry}s"
        );
        // Just before the refill: still refused.
        clock.advance(time::Duration::seconds(3_590));
        assert!(matches!(
            lim.check(Kind::Evaluate, ip, 1),
            Verdict::Limited { .. }
        ));
        // After the refill interval: served again, once.
        clock.advance(time::Duration::seconds(11));
        assert_eq!(lim.check(Kind::Evaluate, ip, 1), Verdict::Allowed);
        assert!(matches!(
            lim.check(Kind::Evaluate, ip, 1),
            Verdict::Limited { .. }
        ));
        // A day later the whole burst is back.
        clock.advance(time::Duration::days(1));
        assert_eq!(lim.check(Kind::Evaluate, ip, 2), Verdict::Allowed);
    }
}
