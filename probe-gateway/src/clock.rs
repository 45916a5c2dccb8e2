//! Injected time and randomness, so expiry, windows and codes are testable
//! without waiting or guessing (shared with the other services).

pub use rdv_service_kit::clock::{
    Clock, CountingEntropy, Entropy, ManualClock, OsEntropy, SystemClock,
};
