//! The plumbing every Rendezvous service binary shares (directory, probe
//! gateway, relay bridge): written once so an operator meets the same
//! config layering, logs, database setup, refusal shape and shutdown in
//! each, and a fix lands in all of them.
//!
//! Protocol logic never lives here; that is `rdv-proto`'s.

pub mod cli_docs;
pub mod clock;
pub mod config;
pub mod db;
pub mod http;
pub mod shutdown;
pub mod telemetry;
pub mod testing;
