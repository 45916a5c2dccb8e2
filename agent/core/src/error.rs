//! The core's one error type. Refusals of peer input are not errors: they
//! are verdicts and events (§5.6: data, shown to the human). Errors are for
//! the owner's own commands that cannot be done, and for stored state that
//! does not read.

/// Why a command could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The home has no agent yet (`rdv init`).
    #[error("no agent in this home: run `rdv init` first")]
    NoAgent,
    /// The home already has an agent (re-keying needs `--force`).
    #[error("this home already has an agent ({0}); `rdv init --force` re-keys it")]
    AgentExists(String),
    /// The owner's input is not what the command takes.
    #[error("{0}")]
    Input(String),
    /// No contact, request or candidate by that name.
    #[error("{0}")]
    NotFound(String),
    /// The command is refused by a protocol rule (the message says which).
    #[error("{0}")]
    Refused(String),
    /// The protocol core refused a document we built or hold.
    #[error("{0}")]
    Proto(#[from] rdv_proto::Error),
    /// Stored state does not read.
    #[error("{0}")]
    Store(String),
    /// A backup bundle could not be made or opened.
    #[error("{0}")]
    Backup(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
