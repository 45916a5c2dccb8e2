//! The Rendezvous agent library and the `rdv` command line.
//!
//! Layers, bottom up: the protocol core (`rdv-proto`), the agent's rules
//! as a sans-I/O state machine (`rdv-agent-core`), then here: the home and
//! its key (`home`), the store that commits each input before its effects
//! (`store`), the carriers (`transport`), the runtime that drives them
//! (`runtime`, `discovery`), and the front-end (`cli`, `agent_cli`,
//! `agent_cmd`; `rdv proto`, `rdv directory|bridge|gateway` for the services).

pub mod agent_cli;
pub mod agent_cmd;
pub mod backup_cmd;
pub mod bridge_cmd;
pub mod calendar;
pub mod cli;
pub mod conformance;
pub mod demo;
pub mod directory_cmd;
pub mod discovery;
pub mod dns;
pub mod error;
pub mod fetch;
pub mod file_cmd;
pub mod gateway_cmd;
pub mod home;
pub mod mailbox;
pub mod mcp;
pub mod meeting_cmd;
pub mod runtime;
pub mod store;
pub mod suggest;
pub mod task_cmd;
pub mod terminal;
pub mod transport;

pub use error::{Error, Result};
