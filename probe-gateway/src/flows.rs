//! The mail flows the gateway runs for registered agents (§5.2.1, §5.2.2):
//! gateway addresses, sending probes and invites, the SYN-ACK, the ACK
//! leg, per-address limits and the opt-out.

use serde::{Deserialize, Serialize};

/// `[flows]` settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FlowConfig {}

impl FlowConfig {
    pub fn check(&self) -> Result<(), crate::error::Error> {
        Ok(())
    }
}
