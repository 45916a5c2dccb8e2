//! Anti-enumeration (§4.5): evaluations are the attack surface, so each
//! client (an IPv4 address, an IPv6 /64) has token buckets for evaluated
//! elements, lookups and publishes, under a global ceiling on evaluations.
//! A refusal carries the wait, sent as `Retry-After`.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::{Bucket, Limits};

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
    evaluate: DefaultKeyedRateLimiter<u128>,
    lookup: DefaultKeyedRateLimiter<u128>,
    publish: DefaultKeyedRateLimiter<u128>,
    global: DefaultDirectRateLimiter,
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
    pub fn new(l: &Limits) -> Self {
        Self {
            evaluate: RateLimiter::keyed(quota(l.evaluate)),
            lookup: RateLimiter::keyed(quota(l.lookup)),
            publish: RateLimiter::keyed(quota(l.publish)),
            global: RateLimiter::direct(
                Quota::per_second(nz(l.global_evaluate_per_sec))
                    .allow_burst(nz(l.global_evaluate_per_sec)),
            ),
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
        let now = DefaultClock::default().now();
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
        let lim = Limiter::new(&l);
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
}
