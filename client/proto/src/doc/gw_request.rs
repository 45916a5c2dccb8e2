//! The probe gateway's signed request (docs/probe-gateway.md "Signed
//! requests"): a §4.6 document by the agent's key binding the method, the
//! path with its query and the body's SHA-256, carried base64 in
//! [`GW_AUTH_HEADER`](crate::consts::GW_AUTH_HEADER). Built here once for
//! the gateway's tests and the gateway client; the gateway verifies it.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::consts::GW_REQUEST_TYPE;
use crate::encoding::base64;
use crate::error::Result;
use crate::keys::AgentKey;
use crate::time::{Instant, format_time};

/// The header value for one request; the id (a UUID) and the time are
/// given, so it is deterministic.
pub fn header_value(
    key: &AgentKey,
    method: &str,
    path_and_query: &str,
    body: &[u8],
    id: &str,
    ts: Instant,
) -> Result<String> {
    let doc = json!({
        "type": GW_REQUEST_TYPE,
        "v": 1,
        "agent": key.id().as_str(),
        "method": method,
        "path": path_and_query,
        "id": id,
        "ts": format_time(ts),
        "body": hex::encode(Sha256::digest(body)),
    });
    let signed = crate::sign::sign_value(doc, key)?;
    Ok(base64(&crate::canon::to_vec(&signed)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::base64_decode;

    #[test]
    fn binds_method_path_body_and_verifies() {
        let key = AgentKey::from_seed([3; 32]);
        let ts = crate::time::parse_time("t", "2026-10-08T12:00:00Z").unwrap();
        let id = "00000000-0000-4000-8000-000000000001";
        let h = header_value(&key, "POST", "/v1/ack?x=1", b"{}", id, ts).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&base64_decode(&h).unwrap()).unwrap();
        assert_eq!(doc["type"], GW_REQUEST_TYPE);
        assert_eq!(doc["path"], "/v1/ack?x=1");
        assert_eq!(doc["body"], hex::encode(Sha256::digest(b"{}")));
        let map = doc.as_object().unwrap();
        assert!(crate::sign::verify(map, key.id()).is_ok());
        let stranger = AgentKey::from_seed([4; 32]);
        assert!(crate::sign::verify(map, stranger.id()).is_err());
        let other = header_value(&key, "POST", "/v1/ack?x=1", b"{ }", id, ts).unwrap();
        assert_ne!(h, other, "the body is bound");
    }
}
