//! Signed documents (§4.6): `sig` is base64 of Ed25519 over `rdv1/sig:` ‖
//! canon(doc without sig); a document's hash is hex SHA-256 of canon(doc).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::canon;
use crate::encoding::{base64, base64_array};
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};

/// Signs an object that has no `sig` yet and returns it with one.
pub fn sign(doc: Map<String, Value>, key: &AgentKey) -> Result<Map<String, Value>> {
    if doc.contains_key("sig") {
        return Err(Error::shape("sig", "document is already signed"));
    }
    let mut doc = doc;
    let sig = key.sign_prefixed(&canon::to_vec_without(&doc, "sig")?);
    doc.insert("sig".into(), Value::String(base64(&sig)));
    Ok(doc)
}

/// Signs a `Value` that must be an object.
pub fn sign_value(doc: Value, key: &AgentKey) -> Result<Value> {
    match doc {
        Value::Object(m) => Ok(Value::Object(sign(m, key)?)),
        _ => Err(Error::shape("document", "must be an object")),
    }
}

/// Verifies `doc.sig` against `signer`. Shape checks belong to the caller
/// and come after this (nothing a document says is trusted before its sig).
pub fn verify(doc: &Map<String, Value>, signer: &AgentId) -> Result<()> {
    let sig = match doc.get("sig") {
        Some(Value::String(s)) => base64_array::<64>("sig", s)?,
        Some(_) => return Err(Error::shape("sig", "must be a string")),
        None => return Err(Error::shape("sig", "missing")),
    };
    signer.verify_prefixed(&canon::to_vec_without(doc, "sig")?, &sig)
}

/// [`verify`] and [`hash`] from one serialization; also returns the
/// canonical length so callers bound the size first. `max` is checked
/// before the signature is.
pub fn verify_hashed(doc: &Map<String, Value>, signer: &AgentId, max: usize) -> Result<String> {
    let sig = match doc.get("sig") {
        Some(Value::String(s)) => base64_array::<64>("sig", s)?,
        Some(_) => return Err(Error::shape("sig", "must be a string")),
        None => return Err(Error::shape("sig", "missing")),
    };
    let (full, range) = canon::to_vec_marking(doc, "sig")?;
    if full.len() > max {
        return Err(Error::TooLarge {
            what: "document",
            len: full.len(),
            limit: max,
        });
    }
    let range = range.ok_or_else(|| Error::shape("sig", "missing"))?;
    let prefix = crate::consts::SIG_PREFIX;
    let mut input = Vec::with_capacity(prefix.len() + full.len() - range.len());
    input.extend_from_slice(prefix);
    input.extend_from_slice(&full[..range.start]);
    input.extend_from_slice(&full[range.end..]);
    signer.verify_signing_input(&input, &sig)?;
    Ok(hex::encode(Sha256::digest(&full)))
}

/// §4.6: lowercase hex SHA-256 of the canonical JSON of the whole document.
pub fn hash(doc: &Value) -> Result<String> {
    Ok(hex::encode(Sha256::digest(canon::to_vec(doc)?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn sign_verify_round_trip_and_tamper() {
        let k = AgentKey::from_seed([1; 32]);
        let d = sign(obj(json!({"v": 1, "b": "x", "a": [1, 2]})), &k).unwrap();
        verify(&d, k.id()).unwrap();
        let mut t = d.clone();
        t.insert("b".into(), json!("y"));
        assert_eq!(verify(&t, k.id()), Err(Error::BadSignature));
        let other = AgentKey::from_seed([2; 32]);
        assert_eq!(verify(&d, other.id()), Err(Error::BadSignature));
        assert!(sign(d.clone(), &k).is_err(), "double signing refused");
    }

    #[test]
    fn member_order_does_not_matter() {
        let k = AgentKey::from_seed([1; 32]);
        let a = sign(obj(json!({"a": 1, "b": 2})), &k).unwrap();
        let b = sign(obj(json!({"b": 2, "a": 1})), &k).unwrap();
        assert_eq!(a.get("sig"), b.get("sig"));
        assert_eq!(
            hash(&Value::Object(a.clone())).unwrap(),
            hash(&Value::Object(b.clone())).unwrap()
        );
        assert_eq!(hash(&Value::Object(a.clone())).unwrap().len(), 64);
    }

    #[test]
    fn malformed_sig_refused() {
        let k = AgentKey::from_seed([1; 32]);
        let mut d = sign(obj(json!({"a": 1})), &k).unwrap();
        d.insert("sig".into(), json!("AAAA"));
        assert!(matches!(verify(&d, k.id()), Err(Error::Shape { .. })));
        d.insert("sig".into(), json!(5));
        assert!(verify(&d, k.id()).is_err());
        d.remove("sig");
        assert!(verify(&d, k.id()).is_err());
    }
}
