/// Failures of the shared plumbing; each service wraps them in its own
/// error enum.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration file or an environment override is wrong.
    #[error("config: {0}")]
    Config(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}
