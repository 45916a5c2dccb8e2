//! Transports (§6): adapters that carry bytes between the agent and the
//! outside. The protocol core decides what to send and what a received
//! document means; a transport never interprets an envelope.

pub mod hints;
pub mod nostr;

pub use self::nostr::{
    CarrierOptions, NostrCarrier, PublishOutcome, Query, Received, Refusal, RelayOutcome,
    Subscription,
};
