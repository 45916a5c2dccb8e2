//! The Rendezvous discovery directory (SPEC §4.5, issue #3): a community-run
//! service mapping `dtopic(address)` to sealed, signed listings through
//! RFC 9497 VOPRF (P256-SHA256) blinded lookups, so the server learns
//! neither the contact point asked for nor which listing matched.
//!
//! Library with a thin binary: [`config`], [`keys`] (the OPRF key ring),
//! [`store`] (SQLite or Postgres), [`limits`] (anti-enumeration), [`http`]
//! (the API) and [`server`] (bind, serve, purge, shut down).

pub mod clock;
pub mod config;
pub mod error;
pub mod http;
pub mod keys;
pub mod limits;
pub mod server;
pub mod store;

pub use error::{Error, Result};
