//! The crate's one error type. Refusals of client input are data
//! ([`crate::http::Refusal`]); these are operator-side failures.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("key file {path}: {reason}")]
    KeyFile { path: String, reason: String },
    #[error("config: {0}")]
    Config(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Protocol(#[from] rdv_directory_client::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
