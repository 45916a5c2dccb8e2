//! The Rendezvous agent as a sans-I/O state machine (SPEC §4–§7).
//!
//! Inputs are inbound carrier events, the human's decisions, commands and
//! timer ticks; the clock and randomness are passed in. Outputs are the
//! writes the store commits first and the effects the runtime then carries
//! out. No socket, file or clock inside.

pub mod a2a;
pub mod agent;
pub mod backup;
pub mod command;
pub mod consent;
pub mod contact;
pub mod directories;
pub mod error;
pub mod event;
pub mod file;
pub mod gate;
pub mod inbound;
pub mod invite;
pub mod limits;
pub mod mailbox;
pub mod meeting;
pub mod owner;
pub mod peer_text;
pub mod phrase;
pub mod record;
pub mod restore;
pub mod state;
pub mod task;
pub mod task_flow;

pub use agent::{Agent, Ctx, Effect, Input, Output, PublishOutcome, Subscriptions};
pub use command::{Command, RequestTo, Setup};
pub use error::{Error, Result};
pub use event::Event;
