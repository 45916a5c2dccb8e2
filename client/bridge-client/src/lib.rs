//! Carrier clients of the relay bridge (SPEC §6.3, §4.4; issue #5): the
//! agent's ntfy and MQTT transports. [`ntfy`] publishes and subscribes over
//! the ntfy HTTP API (any ntfy server or `rdv-relay-bridge`), with `since=`
//! catch-up; [`mqtt`] does the same over MQTT 3.1.1 via `rumqttc`.
//!
//! Relays are dumb pipes (SPEC §3.4): bodies go out and come back byte for
//! byte; nothing here parses them.

pub mod mqtt;
pub mod ntfy;

pub use mqtt::{MqttPublisher, MqttSubscription, Publication, QoS};
pub use ntfy::{Message, NtfyClient, Since, Subscription};

/// Largest body the bridge carries by default (64 KiB, `relay-bridge`
/// config `limits.message_size_limit`): a sealed envelope (~45 KB, §6.4) or
/// a card (16 KiB, §4.3) fits.
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// What can go wrong talking to a bridge.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not a valid topic: 1 to 64 of `[-_A-Za-z0-9]` (ntfy's rule).
    #[error("invalid topic {0:?}: want 1 to 64 of [-_A-Za-z0-9]")]
    Topic(String),
    /// A URL or `since` value this client cannot use.
    #[error("{0}")]
    Input(String),
    /// The server answered with an error status.
    #[error("refused with HTTP {status}: {reason}")]
    Refused { status: u16, reason: String },
    /// The connection failed.
    #[error("transport: {0}")]
    Transport(String),
    /// The server sent something that is not the ntfy message JSON.
    #[error("malformed answer: {0}")]
    Malformed(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The MQTT client or broker failed.
    #[error("mqtt: {0}")]
    Mqtt(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks a topic name (ntfy's `^[-_A-Za-z0-9]{1,64}$`), so it is safe in a
/// URL path and an MQTT topic.
pub fn validate_topic(t: &str) -> Result<()> {
    if (1..=64).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(())
    } else {
        Err(Error::Topic(t.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics() {
        assert!(validate_topic("abc-_09").is_ok());
        assert!(validate_topic(&"a".repeat(64)).is_ok());
        assert!(validate_topic(&"a".repeat(65)).is_err());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("a/b").is_err());
        assert!(validate_topic("a?b").is_err());
        assert!(validate_topic("a,b").is_err());
    }
}
