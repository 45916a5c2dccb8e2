//! Injected time, so expiry, rotation and grace periods are testable
//! without waiting (shared with the other services).

pub use rdv_service_kit::clock::{Clock, ManualClock, SystemClock};
