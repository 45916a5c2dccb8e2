//! The crate's one error type: every refusal a client or server can name.

/// Why a directory operation was refused or failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// A protocol-core refusal (canonical JSON, signature, card, address).
    #[error(transparent)]
    Proto(#[from] rdv_proto::Error),
    /// An element, proof or key that does not decode as RFC 9497 P-256.
    #[error("invalid {0}")]
    Encoding(&'static str),
    /// The DLEQ proof does not verify against the key (§4.5: the server may
    /// be tagging this user with a key of its own).
    #[error("the evaluation proof does not verify")]
    BadProof,
    /// The server answered with a key the directory does not list.
    #[error("key {0} is not listed by the directory")]
    UnknownKey(String),
    /// A batch that is empty, too large, or answered with the wrong count.
    #[error("batch: {0}")]
    Batch(String),
    /// The sealed card does not open under the derived key.
    #[error("sealed card does not open")]
    Unseal,
    /// A listing whose card does not verify, is not the listing agent's, or
    /// does not claim the address looked up.
    #[error("listing refused: {0}")]
    Listing(String),
    /// The server refused a request; `code` is its machine-readable reason.
    #[error("server refused ({status} {code}): {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<u64>,
    },
    /// Transport failure (connection, TLS, malformed response).
    #[error("transport: {0}")]
    Transport(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
