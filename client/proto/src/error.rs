//! The crate's one error type. Refusals of attacker input are errors here
//! because the core has no verdict to keep: callers map them to their own.

/// Why an input was refused or an operation could not be done.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// Not JSON, or JSON outside the canonical subset (§4.6).
    #[error("invalid JSON: {0}")]
    Json(String),
    /// Larger than the limit that applies.
    #[error("too large: {what} is {len} bytes, limit {limit}")]
    TooLarge {
        what: &'static str,
        len: usize,
        limit: usize,
    },
    /// A field is missing, of the wrong type, or breaks a shape rule.
    #[error("invalid {field}: {reason}")]
    Shape { field: String, reason: String },
    /// A field the spec does not allow here (§4.6, §7.8.1).
    #[error("unknown field {0}")]
    UnknownField(String),
    /// The Ed25519 signature does not verify.
    #[error("bad signature")]
    BadSignature,
    /// Decryption failed (wrong key, tampered ciphertext or header).
    #[error("decryption failed")]
    Decrypt,
    /// The document or envelope has expired.
    #[error("expired")]
    Expired,
    /// A timestamp is too far ahead of the clock.
    #[error("{0} is too far in the future")]
    FromFuture(&'static str),
    /// Not an email or phone in the §4.6 sense.
    #[error("invalid address: {0}")]
    Address(String),
    /// Not an agent ID in the §4.2 sense.
    #[error("invalid agent id: {0}")]
    AgentId(String),
    /// A key that cannot be used (low-order point, out-of-range scalar).
    #[error("invalid key: {0}")]
    Key(String),
    /// The RDV/1 mail block is missing, duplicated or malformed (§5.2.1).
    #[error("mail block: {0}")]
    MailBlock(String),
    /// A Nostr event that does not verify or does not follow §6.2.
    #[error("nostr event: {0}")]
    Nostr(String),
}

impl Error {
    pub(crate) fn shape(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Shape {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
