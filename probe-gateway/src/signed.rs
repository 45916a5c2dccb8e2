//! Agent-signed API requests (issue #4 "Agents and delivery"). A request
//! carries, in the `X-Rdv-Auth` header, base64 of a §4.6 signed document:
//!
//! `{"type":"rdv/gw-request","v":1,"agent":…,"method":…,"path":…,"id":<uuid>,"ts":…,"body":<hex SHA-256 of the body>,"sig":…}`
//!
//! The signature binds the method, the path with its query and the body;
//! `ts` must be within the window of the gateway's clock; the id is
//! remembered past the window, so a replay is refused (§5.4).

use rdv_proto::AgentId;
use rdv_proto::doc::obj::Obj;
use rdv_proto::encoding::base64_decode;
use rdv_proto::time::Instant;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The header carrying the signed request and the document type, defined
/// once in the core (shared with `rdv-gateway-client`).
pub use rdv_proto::consts::{GW_AUTH_HEADER as AUTH_HEADER, GW_REQUEST_TYPE as REQUEST_TYPE};
/// Largest header value accepted, bytes (checked before decoding).
pub const AUTH_MAX_BYTES: usize = 4096;

/// A verified request: who signed it, its id and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRequest {
    pub agent: AgentId,
    pub id: String,
    pub ts: Instant,
}

/// Why a signed request was refused. Stable codes for the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthRefusal {
    #[error("missing X-Rdv-Auth")]
    Missing,
    #[error("malformed X-Rdv-Auth: {0}")]
    Malformed(String),
    #[error("bad signature")]
    BadSignature,
    #[error("signed for another method, path or body")]
    Mismatch,
    #[error("timestamp outside the window")]
    Stale,
    #[error("request id already used")]
    Replayed,
}

impl AuthRefusal {
    pub fn code(&self) -> &'static str {
        match self {
            AuthRefusal::Missing => "unauthenticated",
            AuthRefusal::Malformed(_) => "malformed_auth",
            AuthRefusal::BadSignature => "bad_signature",
            AuthRefusal::Mismatch => "auth_mismatch",
            AuthRefusal::Stale => "stale",
            AuthRefusal::Replayed => "replayed",
        }
    }
}

fn body_hash(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// Signs a request (the agent side): the core builds it, for this crate's
/// tests and the gateway client alike.
pub use rdv_proto::doc::gw_request::header_value as sign;

/// Verifies the header value against the request and the clock. The
/// caller still has to claim the id ([`crate::store::Store::claim_nonce`]).
pub fn verify(
    header: Option<&[u8]>,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    now: Instant,
    window_secs: i64,
) -> Result<SignedRequest, AuthRefusal> {
    let header = header.ok_or(AuthRefusal::Missing)?;
    if header.len() > AUTH_MAX_BYTES {
        return Err(AuthRefusal::Malformed("too long".into()));
    }
    let text =
        std::str::from_utf8(header).map_err(|_| AuthRefusal::Malformed("not text".into()))?;
    let raw = base64_decode(text.trim()).map_err(|e| AuthRefusal::Malformed(e.to_string()))?;
    let doc: Value = rdv_proto::canon::parse(&raw, AUTH_MAX_BYTES)
        .map_err(|e| AuthRefusal::Malformed(e.to_string()))?;
    let mut o = Obj::new(&doc, "auth").map_err(|e| AuthRefusal::Malformed(e.to_string()))?;
    let bad = |e: rdv_proto::Error| AuthRefusal::Malformed(e.to_string());
    // The signature first: nothing the document says is trusted before it.
    let agent = o.id("agent").map_err(bad)?;
    rdv_proto::sign::verify(o.map(), &agent).map_err(|_| AuthRefusal::BadSignature)?;
    o.doc_type(REQUEST_TYPE).map_err(bad)?;
    o.version().map_err(bad)?;
    let m = o.str("method").map_err(bad)?;
    let p = o.str("path").map_err(bad)?;
    let id = o.uuid("id").map_err(bad)?.to_string();
    let ts = o.time("ts").map_err(bad)?;
    let b = o.hash("body").map_err(bad)?;
    o.str("sig").map_err(bad)?;
    o.deny_unknown().map_err(bad)?;
    if m != method || p != path_and_query || b != body_hash(body) {
        return Err(AuthRefusal::Mismatch);
    }
    if (now - ts).whole_seconds().abs() > window_secs {
        return Err(AuthRefusal::Stale);
    }
    Ok(SignedRequest { agent, id, ts })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rdv_proto::AgentKey;
    use rdv_proto::encoding::base64;
    use time::macros::datetime;

    const ID: &str = "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f";

    #[test]
    fn round_trip_and_every_refusal() {
        let k = AgentKey::from_seed([3; 32]);
        let t = datetime!(2026-10-08 12:00 UTC);
        let h = sign(&k, "POST", "/v1/register", b"{}", ID, t).unwrap();
        let ok = verify(Some(h.as_bytes()), "POST", "/v1/register", b"{}", t, 300).unwrap();
        assert_eq!((&ok.agent, ok.id.as_str()), (k.id(), ID));
        let v = |m: &str, p: &str, b: &[u8], now| verify(Some(h.as_bytes()), m, p, b, now, 300);
        assert_eq!(
            v("GET", "/v1/register", b"{}", t),
            Err(AuthRefusal::Mismatch)
        );
        assert_eq!(
            v("POST", "/v1/verify", b"{}", t),
            Err(AuthRefusal::Mismatch)
        );
        assert_eq!(
            v("POST", "/v1/register", b"{ }", t),
            Err(AuthRefusal::Mismatch)
        );
        let late = t + time::Duration::seconds(301);
        assert_eq!(
            v("POST", "/v1/register", b"{}", late),
            Err(AuthRefusal::Stale)
        );
        let early = t - time::Duration::seconds(301);
        assert_eq!(
            v("POST", "/v1/register", b"{}", early),
            Err(AuthRefusal::Stale)
        );
        assert_eq!(
            verify(None, "POST", "/v1/register", b"{}", t, 300),
            Err(AuthRefusal::Missing)
        );
        // Another key's signature over the same document.
        let mut doc: Value = serde_json::from_slice(&base64_decode(&h).unwrap()).unwrap();
        let other = AgentKey::from_seed([4; 32]);
        doc["agent"] = Value::String(other.id().as_str().into());
        let forged = base64(&rdv_proto::canon::to_vec(&doc).unwrap());
        assert_eq!(
            verify(
                Some(forged.as_bytes()),
                "POST",
                "/v1/register",
                b"{}",
                t,
                300
            ),
            Err(AuthRefusal::BadSignature)
        );
        // Not a UUID.
        let h2 = sign(&k, "POST", "/v1/register", b"{}", "not-a-uuid", t).unwrap();
        assert!(matches!(
            verify(Some(h2.as_bytes()), "POST", "/v1/register", b"{}", t, 300),
            Err(AuthRefusal::Malformed(_))
        ));
        let long = vec![b'A'; AUTH_MAX_BYTES + 1];
        assert!(matches!(
            verify(Some(&long), "POST", "/v1/register", b"{}", t, 300),
            Err(AuthRefusal::Malformed(_))
        ));
    }
}
