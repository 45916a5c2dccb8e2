//! The probe and invite gateway (SPEC §5.2.1, §5.2.2): the mail-rule
//! endpoint where attacker-written mail meets the protocol. The gate is
//! deterministic and bounded; verdicts and refusals are data.

pub mod auth;
pub mod cookie;
pub mod error;
pub mod gate;
pub mod limits;
pub mod verdict;

pub use error::Error;
