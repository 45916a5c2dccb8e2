//! The signed-request header the gateway verifies (docs/probe-gateway.md
//! "Signed requests"): `X-Rdv-Auth: base64(canon(doc))`, where `doc` is a
//! §4.6 signed document binding the method, the path with its query and
//! the SHA-256 of the body, with a fresh UUID and the time, so a captured
//! header cannot be replayed or moved to another request.

use std::sync::{Arc, Mutex};

use rand_core::RngCore;
use rdv_proto::AgentKey;
use rdv_proto::time::Instant;

use crate::error::Result;

/// The header carrying the signed request and the signed document's type,
/// defined once in the core (shared with the gateway).
pub use rdv_proto::consts::{GW_AUTH_HEADER as AUTH_HEADER, GW_REQUEST_TYPE as REQUEST_TYPE};

/// The injected clock: the gateway refuses a `ts` outside its window.
pub type Now = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The header value for one request (pure: the id and time are given).
pub fn auth_header(
    key: &AgentKey,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    id: &str,
    ts: Instant,
) -> Result<String> {
    Ok(rdv_proto::doc::gw_request::header_value(
        key,
        method,
        path_and_query,
        body,
        id,
        ts,
    )?)
}

/// A random (version 4) UUID in the lowercase hyphenated form §5.1 pins.
pub fn fresh_uuid(rng: &mut (impl RngCore + ?Sized)) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    uuid::Builder::from_random_bytes(b)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// Signs requests as one agent, with an injected clock and randomness.
pub struct Signer {
    key: AgentKey,
    now: Now,
    rng: Mutex<Box<dyn RngCore + Send>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("agent", self.key.id())
            .finish_non_exhaustive()
    }
}

impl Signer {
    pub fn new(key: AgentKey, now: Now, rng: Box<dyn RngCore + Send>) -> Self {
        Self {
            key,
            now,
            rng: Mutex::new(rng),
        }
    }

    pub fn key(&self) -> &AgentKey {
        &self.key
    }

    pub fn now(&self) -> Instant {
        (self.now)()
    }

    /// A fresh UUID from the injected randomness.
    pub fn fresh_uuid(&self) -> String {
        let mut g = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        fresh_uuid(&mut **g)
    }

    /// The `X-Rdv-Auth` value for one request, with a fresh id and now.
    pub fn header(&self, method: &str, path_and_query: &str, body: &[u8]) -> Result<String> {
        let id = self.fresh_uuid();
        auth_header(&self.key, method, path_and_query, body, &id, self.now())
    }
}
