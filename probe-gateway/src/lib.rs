//! The probe and invite gateway (SPEC §5.2.1, §5.2.2): the mail-rule
//! endpoint where attacker-written mail meets the protocol. The gate is
//! deterministic and bounded; verdicts and refusals are data.
//!
//! [`gate`] (with [`headers`], [`auth`], [`limiter`], [`verdict`]) decides
//! about one message, assembled once (`gate::Gate::run`); [`cookie`] makes
//! the stateless challenges; [`address_key`] keys stored addresses and
//! opt-out tokens; [`store`] keeps the state on SQLite or Postgres;
//! [`state`] is what the adapters work on; [`delivery`] is the one inbound
//! path, with [`http`] (the API) and [`smtp`] (the mail listener) as its
//! adapters; [`pages`] are what an invited person opens; [`server`] binds,
//! serves, purges and shuts down.

pub mod address_key;
pub mod api_refusal;
pub mod auth;
pub mod clock;
pub mod config;
pub mod cookie;
pub mod delivery;
pub mod error;
pub mod extract;
pub mod flows;
pub mod forwarding;
pub mod gate;
pub mod headers;
pub mod http;
pub mod limiter;
pub mod limits;
pub mod mailer;
pub mod pages;
pub mod received;
pub mod secret_files;
pub mod server;
pub mod signed;
pub mod smtp;
pub mod state;
pub mod store;
pub mod verdict;

pub use error::Error;
