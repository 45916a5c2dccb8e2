//! The Rendezvous protocol core (SPEC rev 3): canonical JSON, keys and IDs,
//! addresses and topics, signed documents, the RDV/1 mail block, envelopes,
//! the channel state machine and the Nostr mapping.
//!
//! Pure by construction: no sockets, files, clocks or global randomness.
//! Every rule that depends on time or chance takes it as a parameter, so each
//! is testable with fixed vectors.

pub mod address;
pub mod canon;
pub mod channel;
pub mod consts;
pub mod doc;
pub mod encoding;
pub mod envelope;
pub mod error;
pub mod keys;
pub mod mailblock;
pub mod nostr_event;
pub mod sign;
pub mod time;

pub mod vectors;

pub use address::{Address, AddressKind, idtopic};
pub use error::{Error, Result};
pub use keys::{AgentId, AgentKey};
