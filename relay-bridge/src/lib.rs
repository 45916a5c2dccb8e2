//! The relay bridge (SPEC §6.3, §4.4; issue #5): one box that speaks the ntfy
//! HTTP API and MQTT on one topic space, with a message cache so an agent that
//! was offline catches up with `since=`.
//!
//! Relays are dumb pipes (SPEC §3.4): the bridge never parses what it carries
//! beyond size and topic name.

pub mod auth;
pub mod bodies;
pub mod config;
pub mod content;
pub mod error;
pub mod http;
pub mod hub;
pub mod limits;
pub mod message;
pub mod metrics;
pub mod mqtt;
pub mod serve;
pub mod since;
pub mod store;
pub mod topic;

pub use config::Config;
pub use error::{Error, Result};
