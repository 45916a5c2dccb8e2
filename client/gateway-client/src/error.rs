//! The crate's one error type.

/// Why a gateway call did not give an answer.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The gateway refused the request: `code` is its stable reason
    /// (`unregistered`, `address_limited`, a gate refusal such as
    /// `to_hint`, …), `message` its human text, `retry_after` the seconds
    /// to wait when it said (`address_limited`, `rate_limited`).
    #[error("gateway refused ({status} {code}): {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<u64>,
    },
    /// The gateway could not be reached, or the connection broke.
    #[error("transport: {0}")]
    Transport(String),
    /// The gateway answered something this client does not accept: not
    /// JSON of the expected shape, or over the size bound.
    #[error("bad answer from the gateway: {0}")]
    BadAnswer(String),
    /// An argument the client refuses before sending (not a UUID, not a
    /// mailbox, a mail over the bound).
    #[error("{0}")]
    Input(String),
    /// The protocol core refused to sign or parse a document.
    #[error(transparent)]
    Proto(#[from] rdv_proto::Error),
}

impl Error {
    /// The gateway's refusal code, when the gateway refused.
    pub fn refusal_code(&self) -> Option<&str> {
        match self {
            Error::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
