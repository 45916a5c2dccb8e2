//! Signed listing and removal documents (§4.5, §4.6, issue #3).
//!
//! A listing binds an agent's sealed card to one `lookup_id` under one
//! directory key; a removal withdraws it. Both are signed by the agent
//! (`rdv1/sig:` ‖ canonical JSON), and only a later `updated` wins, so a
//! replayed older document changes nothing.

use rdv_proto::consts::{
    DIR_LISTING_MAX_BYTES, DIR_LISTING_MAX_LIFETIME_SECS, DIR_LISTING_TYPE, DIR_MAX_AHEAD_SECS,
    DIR_REMOVE_TYPE,
};
use rdv_proto::doc::obj::Obj;
use rdv_proto::encoding::is_hash;
use rdv_proto::sign;
use rdv_proto::time::{Instant, format_time};
use rdv_proto::{AgentId, AgentKey};
use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::seal::{SEALED_MAX_B64, SEALED_MIN_RAW};

/// A removal is small: its header only.
pub const REMOVE_MAX_BYTES: usize = 1024;

fn shape(field: &str, reason: &str) -> Error {
    Error::Proto(rdv_proto::Error::Shape {
        field: field.into(),
        reason: reason.into(),
    })
}

/// A verified listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    pub agent: AgentId,
    pub key_id: String,
    pub lookup_id: String,
    pub sealed: String,
    pub updated: Instant,
    pub expires: Instant,
    /// The signed document, stored and served as is.
    pub doc: Value,
}

/// A verified removal.
#[derive(Debug, Clone, PartialEq)]
pub struct Removal {
    pub agent: AgentId,
    pub key_id: String,
    pub lookup_id: String,
    pub updated: Instant,
}

/// Steps 1–2 of every reader (§4.6): bound, then verify the signature by
/// the agent the document names, before any other field is trusted.
fn open<'a>(doc: &'a Value, max: usize) -> Result<(Obj<'a>, AgentId)> {
    let (o, agent, _hash) = rdv_proto::doc::open_signed(doc, "", "document", "agent", Some(max))?;
    Ok((o, agent))
}

fn hex_field<'a>(o: &mut Obj<'a>, key: &'a str) -> Result<String> {
    let s = o.str(key)?;
    if !is_hash(s) {
        return Err(shape(key, "must be 64 lowercase hex digits"));
    }
    Ok(s.to_string())
}

impl Listing {
    /// Builds and signs a listing.
    pub fn sign(
        key: &AgentKey,
        key_id: &str,
        lookup_id: &str,
        sealed: &str,
        updated: Instant,
        expires: Instant,
    ) -> Result<Value> {
        let m: Map<String, Value> = json!({
            "v": 1,
            "type": DIR_LISTING_TYPE,
            "agent": key.id().as_str(),
            "key_id": key_id,
            "lookup_id": lookup_id,
            "sealed": sealed,
            "updated": format_time(updated),
            "expires": format_time(expires),
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        Ok(Value::Object(sign::sign(m, key)?))
    }

    /// Signature and shape, without the clock: what a requester checks on
    /// each listing it found.
    pub fn parse_signed(doc: &Value) -> Result<Self> {
        let (mut o, agent) = open(doc, DIR_LISTING_MAX_BYTES)?;
        o.version()?;
        o.doc_type(DIR_LISTING_TYPE)?;
        let key_id = hex_field(&mut o, "key_id")?;
        let lookup_id = hex_field(&mut o, "lookup_id")?;
        let sealed = o.str("sealed")?;
        // The raw length is bounded from the base64 length before decoding.
        let min_b64 = SEALED_MIN_RAW.div_ceil(3) * 4;
        if sealed.len() < min_b64 || sealed.len() > SEALED_MAX_B64 {
            return Err(shape("sealed", "wrong size for a sealed card"));
        }
        rdv_proto::encoding::base64_decode(sealed).map_err(|_| shape("sealed", "not base64"))?;
        let updated = o.time("updated")?;
        let expires = o.time("expires")?;
        if expires <= updated {
            return Err(shape("expires", "must be after updated"));
        }
        if (expires - updated).whole_seconds() > DIR_LISTING_MAX_LIFETIME_SECS {
            return Err(shape("expires", "at most 30 days after updated"));
        }
        o.deny_unknown()?;
        Ok(Self {
            agent,
            key_id,
            lookup_id,
            sealed: sealed.to_string(),
            updated,
            expires,
            doc: doc.clone(),
        })
    }

    /// What a server checks on publish: [`Listing::parse_signed`], not
    /// expired, and `updated` not ahead of the clock by more than the skew.
    pub fn verify(doc: &Value, now: Instant) -> Result<Self> {
        let l = Self::parse_signed(doc)?;
        if l.expires <= now {
            return Err(Error::Proto(rdv_proto::Error::Expired));
        }
        if (l.updated - now).whole_seconds() > DIR_MAX_AHEAD_SECS {
            return Err(Error::Proto(rdv_proto::Error::FromFuture("updated")));
        }
        Ok(l)
    }
}

impl Removal {
    /// Builds and signs a removal.
    pub fn sign(key: &AgentKey, key_id: &str, lookup_id: &str, updated: Instant) -> Result<Value> {
        let m: Map<String, Value> = json!({
            "v": 1,
            "type": DIR_REMOVE_TYPE,
            "agent": key.id().as_str(),
            "key_id": key_id,
            "lookup_id": lookup_id,
            "updated": format_time(updated),
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        Ok(Value::Object(sign::sign(m, key)?))
    }

    /// Signature, shape, and `updated` not ahead of the clock.
    pub fn verify(doc: &Value, now: Instant) -> Result<Self> {
        let (mut o, agent) = open(doc, REMOVE_MAX_BYTES)?;
        o.version()?;
        o.doc_type(DIR_REMOVE_TYPE)?;
        let key_id = hex_field(&mut o, "key_id")?;
        let lookup_id = hex_field(&mut o, "lookup_id")?;
        let updated = o.time("updated")?;
        o.deny_unknown()?;
        if (updated - now).whole_seconds() > DIR_MAX_AHEAD_SECS {
            return Err(Error::Proto(rdv_proto::Error::FromFuture("updated")));
        }
        Ok(Self {
            agent,
            key_id,
            lookup_id,
            updated,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rdv_proto::doc::resign;
    use rdv_proto::time::parse_time;

    fn t(s: &str) -> Instant {
        parse_time("t", s).unwrap()
    }

    fn sealed() -> String {
        crate::seal::seal(&json!({"a": 1}), &[1; 32], &mut rand_core::OsRng).unwrap()
    }

    fn listing(key: &AgentKey) -> Value {
        Listing::sign(
            key,
            &"a".repeat(64),
            &"b".repeat(64),
            &sealed(),
            t("2026-10-08T00:00:00Z"),
            t("2026-10-20T00:00:00Z"),
        )
        .unwrap()
    }

    #[test]
    fn listing_round_trip() {
        let k = AgentKey::from_seed([3; 32]);
        let d = listing(&k);
        let l = Listing::verify(&d, t("2026-10-08T00:01:00Z")).unwrap();
        assert_eq!(&l.agent, k.id());
        assert_eq!(l.lookup_id, "b".repeat(64));
    }

    #[test]
    fn listing_refusals() {
        let k = AgentKey::from_seed([3; 32]);
        let now = t("2026-10-08T00:01:00Z");
        let d = listing(&k);
        // Forged: signed by another key but naming k.
        let mut forged = d.clone();
        forged["sealed"] = json!(sealed());
        assert!(matches!(
            Listing::verify(&forged, now),
            Err(Error::Proto(rdv_proto::Error::BadSignature))
        ));
        // Expired.
        assert!(Listing::verify(&d, t("2026-10-21T00:00:00Z")).is_err());
        // From the future.
        assert!(Listing::verify(&d, t("2026-10-07T23:00:00Z")).is_err());
        // Too long a lifetime, unknown member, wrong type: each re-signed.
        for (field, value) in [
            ("expires", json!("2026-12-01T00:00:00Z")),
            ("extra", json!(1)),
            ("type", json!("rdv/dir-remove")),
            ("key_id", json!("XYZ")),
            ("sealed", json!("AAAA")),
        ] {
            let mut m = d.clone();
            m[field] = value;
            let m = resign(&m, &k).unwrap();
            assert!(Listing::verify(&m, now).is_err(), "{field} accepted");
        }
    }

    #[test]
    fn removal_round_trip_and_forgery() {
        let k = AgentKey::from_seed([3; 32]);
        let now = t("2026-10-08T00:01:00Z");
        let d = Removal::sign(&k, &"a".repeat(64), &"b".repeat(64), now).unwrap();
        assert_eq!(&Removal::verify(&d, now).unwrap().agent, k.id());
        let mut f = d.clone();
        f["updated"] = json!("2026-10-08T00:02:00Z");
        assert!(Removal::verify(&f, now).is_err());
    }
}
