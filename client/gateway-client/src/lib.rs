//! Client of the Rendezvous probe and invite gateway (SPEC §5.2.1,
//! §5.2.2; docs/probe-gateway.md): an agent proves a mailbox, reads the
//! probes and invites the gateway admitted for it, and has the gateway
//! mail its probes, SYN-ACKs, echoes and invites.
//!
//! `signed` builds the `X-Rdv-Auth` header (pure, with an injected clock
//! and randomness), `wire` holds the JSON bodies, `sse` reads the inbox
//! stream, `client` (feature `http`, default) is the blocking HTTP client
//! over them. The gateway shares `wire` (without `http`, with `openapi`):
//! the request bodies are parsed by the very types that write them.

#[cfg(feature = "http")]
pub mod client;
pub mod error;
pub mod signed;
pub mod sse;
pub mod wire;

#[cfg(feature = "http")]
pub use client::{EventStream, GatewayClient, inbound_with};
pub use error::{Error, Result};
pub use wire::{
    ForwardingConfirmation, InboxItem, InviteAnswer, ItemKind, ItemStatus, StreamEvent,
};
