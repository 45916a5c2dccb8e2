//! Injected time, so expiry, rotation and grace periods are testable
//! without waiting.

use std::sync::Mutex;

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
        if let Ok(mut g) = self.0.lock() {
            *g = t;
        }
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
