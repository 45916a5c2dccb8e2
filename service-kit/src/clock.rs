//! Injected time and randomness, so expiry, windows, rotation and codes are
//! testable without waiting or guessing.

use std::sync::Mutex;

use rand_core::RngCore;
use time::OffsetDateTime;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that tests set by hand.
#[derive(Debug)]
pub struct ManualClock(Mutex<OffsetDateTime>);

impl ManualClock {
    pub fn new(t: OffsetDateTime) -> Self {
        Self(Mutex::new(t))
    }

    pub fn set(&self, t: OffsetDateTime) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }

    pub fn advance(&self, d: time::Duration) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Randomness for codes, tokens, ids and secrets.
pub trait Entropy: Send + Sync + 'static {
    fn fill(&self, buf: &mut [u8]);
}

/// The operating system's CSPRNG.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) {
        rand_core::OsRng.fill_bytes(buf);
    }
}

/// A counter-based stream for tests: reproducible, never for production.
#[derive(Debug, Default)]
pub struct CountingEntropy(Mutex<u64>);

impl Entropy for CountingEntropy {
    fn fill(&self, buf: &mut [u8]) {
        use sha2::{Digest, Sha256};
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for chunk in buf.chunks_mut(32) {
            *g += 1;
            let d = Sha256::digest(g.to_be_bytes());
            chunk.copy_from_slice(&d[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let t0 = OffsetDateTime::UNIX_EPOCH;
        let c = ManualClock::new(t0);
        assert_eq!(c.now(), t0);
        c.advance(time::Duration::seconds(90));
        assert_eq!(c.now(), t0 + time::Duration::seconds(90));
        c.set(t0);
        assert_eq!(c.now(), t0);
    }

    #[test]
    fn counting_entropy_is_reproducible_and_not_constant() {
        let (a, b) = (CountingEntropy::default(), CountingEntropy::default());
        let (mut x, mut y, mut z) = ([0u8; 40], [0u8; 40], [0u8; 40]);
        a.fill(&mut x);
        b.fill(&mut y);
        a.fill(&mut z);
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert_ne!(x[..32], x[32..]);
    }
}
