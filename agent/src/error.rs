//! The agent crate's error type.

/// Why an `rdv` command could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The protocol core refused an input.
    #[error("{0}")]
    Proto(#[from] rdv_proto::Error),
    /// A command-line argument or stdin is not what the command takes.
    #[error("{0}")]
    Input(String),
    /// A relay (ntfy server, MQTT broker) refused or could not be reached.
    #[error("{0}")]
    Carrier(String),
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The agent's home directory or its key file is missing, unsafe or malformed.
    #[error("{0}")]
    Home(String),
    /// The agent refused a command (the message says why).
    #[error("{0}")]
    Agent(#[from] rdv_agent_core::Error),
    /// The agent's database could not be opened, read or committed.
    #[error("{0}")]
    Store(String),
    /// A file fetch was refused or failed (SPEC §7.7), with why.
    #[error("{0}")]
    Fetch(#[from] crate::fetch::FetchError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
