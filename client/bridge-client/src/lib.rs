//! Carrier clients of the relay bridge (SPEC §6.3, §4.4; issue #5): the
//! agent's ntfy and MQTT transports. [`ntfy`] publishes and subscribes over
//! the ntfy HTTP API (any ntfy server or `rdv-relay-bridge`), with `since=`
//! catch-up; [`mqtt`] does the same over MQTT 3.1.1 via `rumqttc`.
//!
//! Relays are dumb pipes (SPEC §3.4): bodies go out and come back byte for
//! byte; nothing here parses them.

#[cfg(feature = "carriers")]
pub mod mqtt;
#[cfg(feature = "carriers")]
pub mod ntfy;
pub mod topic;

#[cfg(feature = "carriers")]
pub use mqtt::{MqttPublisher, MqttSubscription, Publication, QoS};
#[cfg(feature = "carriers")]
pub use ntfy::{Message, NtfyClient, Since, Subscription};
pub use topic::TOPIC_MAX_LEN;

/// Largest body the bridge carries by default (64 KiB, the relay bridge's
/// `limits.message_size_limit` default; ntfy's is 4,096 bytes): a sealed
/// envelope (at most 48 KiB, §6.4) or a card (16 KiB, §4.3) fits. Ours, not
/// the spec's: written once here for the bridge and its clients.
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// Room for an MQTT PUBLISH's fixed header, topic and properties above the
/// body limit: a packet may be this much larger than its payload.
pub const PACKET_OVERHEAD: usize = 1024;

/// Refuses a body over [`DEFAULT_MAX_BODY`] before it is sent.
pub fn check_body(len: usize) -> Result<()> {
    if len > DEFAULT_MAX_BODY {
        return Err(Error::Input(format!(
            "payload of {len} bytes is over {DEFAULT_MAX_BODY}"
        )));
    }
    Ok(())
}

/// What can go wrong talking to a bridge.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not a valid topic: 1 to 64 of `[-_A-Za-z0-9]` (ntfy's rule, [`topic`]).
    #[error("invalid topic {0:?}: want 1 to {TOPIC_MAX_LEN} of [-_A-Za-z0-9]")]
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

/// Checks a topic name (ntfy's `^[-_A-Za-z0-9]{1,64}$`, [`topic::check`]),
/// so it is safe in a URL path and an MQTT topic.
pub fn validate_topic(t: &str) -> Result<()> {
    topic::check(t).map_err(|_| Error::Topic(t.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_up_to_64_kib() {
        assert!(check_body(0).is_ok());
        assert!(check_body(64 * 1024).is_ok());
        assert_eq!(
            check_body(64 * 1024 + 1).unwrap_err().to_string(),
            "payload of 65537 bytes is over 65536"
        );
        // What the limit is for: the largest sealed envelope and card fit.
        assert!(check_body(rdv_proto::consts::ENVELOPE_MAX_BYTES).is_ok());
        assert!(check_body(rdv_proto::consts::CARD_MAX_BYTES).is_ok());
    }

    #[test]
    fn topics() {
        assert!(validate_topic("abc-_09").is_ok());
        assert!(validate_topic(&"a".repeat(64)).is_ok());
        let long = "a".repeat(65);
        assert!(matches!(validate_topic(&long), Err(Error::Topic(t)) if t == long));
        assert!(validate_topic("").is_err());
        assert!(validate_topic("a/b").is_err());
        assert!(validate_topic("a?b").is_err());
        assert!(validate_topic("a,b").is_err());
        assert_eq!(
            validate_topic("a,b").unwrap_err().to_string(),
            r#"invalid topic "a,b": want 1 to 64 of [-_A-Za-z0-9]"#
        );
    }
}
