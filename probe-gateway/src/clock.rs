//! Injected time and randomness, so expiry, windows and codes are testable
//! without waiting or guessing.

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

    pub fn advance(&self, d: time::Duration) {
        if let Ok(mut g) = self.0.lock() {
            *g += d;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        self.0
            .lock()
            .map(|g| *g)
            .unwrap_or_else(|p| *p.into_inner())
    }
}

/// Randomness for codes, tokens and secrets.
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
