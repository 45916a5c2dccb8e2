//! The Rendezvous agent library and the `rdv` command line.
//!
//! This issue brings the `rdv proto` conformance commands; the agent's
//! contact book, transports and the other command groups build on the same
//! protocol core (`rdv-proto`).

pub mod bridge_cmd;
pub mod cli;
pub mod conformance;
pub mod directory_cmd;
pub mod error;
pub mod gateway_cmd;
pub mod terminal;

pub use error::{Error, Result};
