//! The crate's one error type: configuration, storage and I/O trouble.
//! Refused mail is not an error (see `verdict::Refusal`).

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("dns resolver: {0}")]
    Dns(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
}
