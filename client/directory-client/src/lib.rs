//! Client side of the Rendezvous discovery directory (SPEC §4.5, issue #3).
//!
//! The protocol modules (`oprf`, `seal`, `listing`, `lookup`, `wire`) are
//! pure: no sockets, clocks or global randomness, so they are tested with
//! vectors and shared with the server. [`http::DirectoryClient`] (feature
//! `http`) is the typed blocking client over them.

pub(crate) mod dleq;
pub mod error;
#[cfg(feature = "http")]
pub mod http;
pub(crate) mod keymul;
pub mod listing;
pub mod lookup;
pub mod oprf;
pub mod seal;
pub mod wire;

pub use error::{Error, Result};
#[cfg(feature = "http")]
pub use http::DirectoryClient;
pub use lookup::{Derived, Found, FoundCard};
