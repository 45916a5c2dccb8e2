//! The revocation (§5.4, pinned): `{"v": 1, "type": "rdv/revoke", "id",
//! "from", "to", "ts", "sig"}` and nothing else. Signed by `from`.

use serde_json::{Value, json};

use crate::error::Result;
use crate::keys::{AgentId, AgentKey};
use crate::time::Instant;

use super::{open_signed, sign_pairs, time_value};

/// `type` of a revoke.
pub const REVOKE_TYPE: &str = "rdv/revoke";

/// A verified revoke.
#[derive(Debug, Clone, PartialEq)]
pub struct Revoke {
    pub id: String,
    pub from: AgentId,
    pub to: AgentId,
    pub ts: Instant,
    pub hash: String,
}

impl Revoke {
    pub fn verify(doc: &Value) -> Result<Self> {
        let (mut o, from, hash) = open_signed(doc, "", "revoke", "from", None)?;
        o.version()?;
        o.doc_type(REVOKE_TYPE)?;
        let id = o.uuid("id")?.to_string();
        let to = o.id("to")?;
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        Ok(Self {
            id,
            from,
            to,
            ts,
            hash,
        })
    }

    /// The signed revoke of `to`, `from` being `key`'s.
    pub fn build(id: &str, to: &AgentId, ts: Instant, key: &AgentKey) -> Result<Value> {
        sign_pairs(
            vec![
                ("v", json!(1)),
                ("type", json!(REVOKE_TYPE)),
                ("id", json!(id)),
                ("from", json!(key.id().as_str())),
                ("to", json!(to.as_str())),
                ("ts", time_value(ts)),
            ],
            key,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::doc::resign;
    use crate::doc::testutil::{key, now};
    use crate::error::Error;

    const ID: &str = "9c1b2c3d-4e5f-4a6b-bc7d-9e0f1a2b3c4d";

    fn revoke() -> Value {
        Revoke::build(ID, key(1).id(), now(), &key(2)).unwrap()
    }

    #[test]
    fn valid_and_tampered() {
        let r = Revoke::verify(&revoke()).unwrap();
        assert_eq!(
            (&r.from, &r.to, r.id.as_str()),
            (key(2).id(), key(1).id(), ID)
        );
        let mut d = revoke();
        d["to"] = json!(key(3).id().as_str());
        assert_eq!(Revoke::verify(&d), Err(Error::BadSignature));
    }

    #[test]
    fn strict_shape() {
        let alter = |k: &str, v: Option<Value>| {
            let mut d = revoke();
            let m = d.as_object_mut().unwrap();
            match v {
                Some(v) => m.insert(k.into(), v),
                None => m.remove(k),
            };
            Revoke::verify(&resign(&d, &key(2)).unwrap()).unwrap_err()
        };
        assert_eq!(
            alter("reason", Some(json!("spam"))),
            Error::UnknownField("reason".into())
        );
        assert!(
            matches!(alter("id", Some(json!("r1"))), Error::Shape { field, .. } if field == "id")
        );
        assert!(
            matches!(alter("type", Some(json!("rdv/contact-grant"))), Error::Shape { field, .. } if field == "type")
        );
        assert!(matches!(alter("to", None), Error::Shape { field, .. } if field == "to"));
        assert!(matches!(alter("ts", None), Error::Shape { field, .. } if field == "ts"));
        assert!(matches!(alter("v", Some(json!(2))), Error::Shape { field, .. } if field == "v"));
    }
}
