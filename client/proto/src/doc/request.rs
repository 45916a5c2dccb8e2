//! The contact request (§5.1), also the topic probe (§4.4) and the body of
//! the mailbox probe (§5.2.1). Signed by `from`.

use serde_json::{Value, json};

use crate::address::Address;
use crate::consts::{
    ADDRESS_MAX_LEN, CARD_MAX_CAPABILITIES, CARD_MAX_CAPABILITY_LEN, PROBE_LIFETIME_SECS,
    REQUEST_GREETING_MAX,
};
use crate::error::Result;
use crate::keys::{AgentId, AgentKey};
use crate::time::Instant;

use super::card::Card;
use super::{open_signed, sign_pairs, time_value, uri_list};

/// `type` of a contact request.
pub const REQUEST_TYPE: &str = "rdv/contact-request";

/// A verified contact request.
#[derive(Debug, Clone, PartialEq)]
pub struct ContactRequest {
    pub id: String,
    pub from: AgentId,
    /// The address the requester holds (a probe's, §4.4), or none.
    pub to_hint: Option<String>,
    /// The requester's card: verified, unexpired, `id` equal to `from`.
    pub card: Card,
    /// Peer text, display only (§5.6).
    pub greeting: String,
    pub capabilities_offered: Vec<String>,
    pub ts: Instant,
    pub hash: String,
    pub doc: Value,
}

impl ContactRequest {
    /// Verifies a request at `now`; `allow_ws` is passed to its card.
    pub fn verify(doc: &Value, now: Instant, allow_ws: bool) -> Result<Self> {
        Self::verify_at(doc, "", now, allow_ws)
    }

    pub(crate) fn verify_at(doc: &Value, path: &str, now: Instant, allow_ws: bool) -> Result<Self> {
        let (mut o, from, hash) = open_signed(doc, path, "contact request", "from", None)?;
        o.version()?;
        o.doc_type(REQUEST_TYPE)?;
        let id = o.uuid("id")?.to_string();
        let to_hint = match o.opt_str("to_hint")? {
            None => None,
            Some(s) if s.len() > ADDRESS_MAX_LEN => {
                return Err(o.err("to_hint", format!("longer than {ADDRESS_MAX_LEN} bytes")));
            }
            Some(s) => Some(s.to_string()),
        };
        let card = Card::verify_at(o.req("card")?, &o.path("card"), now, allow_ws)?;
        if card.id != from {
            return Err(o.err("card", "card.id is not the request's from"));
        }
        let greeting = o.text("greeting", REQUEST_GREETING_MAX)?.to_string();
        let capabilities_offered = uri_list(
            &mut o,
            "capabilities_offered",
            CARD_MAX_CAPABILITIES,
            CARD_MAX_CAPABILITY_LEN,
        )?;
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        Ok(Self {
            id,
            from,
            to_hint,
            card,
            greeting,
            capabilities_offered,
            ts,
            hash,
            doc: doc.clone(),
        })
    }

    /// `to_hint` as a contact point, when it is one.
    pub fn to_hint_address(&self) -> Option<Address> {
        self.to_hint.as_deref().and_then(|s| Address::parse(s).ok())
    }

    /// §5.2.1: a probe expires 14 days after its `ts`.
    pub fn probe_expired(&self, now: Instant) -> bool {
        (now - self.ts).whole_seconds() >= PROBE_LIFETIME_SECS
    }
}

/// A request before it is signed (§5.1).
#[derive(Debug, Clone)]
pub struct RequestBuilder {
    pub id: String,
    pub to_hint: Option<String>,
    /// The requester's signed card.
    pub card: Value,
    pub greeting: String,
    pub capabilities_offered: Vec<String>,
    pub ts: Instant,
}

impl RequestBuilder {
    /// The signed request, `from` being `key`'s.
    pub fn sign(&self, key: &AgentKey) -> Result<Value> {
        sign_pairs(
            vec![
                ("v", json!(1)),
                ("type", json!(REQUEST_TYPE)),
                ("id", json!(self.id)),
                ("from", json!(key.id().as_str())),
                ("to_hint", json!(self.to_hint)),
                ("card", self.card.clone()),
                ("greeting", json!(self.greeting)),
                ("capabilities_offered", json!(self.capabilities_offered)),
                ("ts", time_value(self.ts)),
            ],
            key,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use crate::doc::card::tests::card;
    use crate::doc::resign;
    use crate::doc::testutil::{key, now, t};
    use crate::error::Error;

    pub const REQ_ID: &str = "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

    pub fn builder(n: u8) -> RequestBuilder {
        RequestBuilder {
            id: REQ_ID.into(),
            to_hint: Some("john@doe.com".into()),
            card: card(n),
            greeting: "Alice's agent requests contact on Alice's behalf.".into(),
            capabilities_offered: vec!["a2a/0.3".into()],
            ts: t("2026-10-08T11:00:00Z"),
        }
    }

    pub fn request(n: u8) -> Value {
        builder(n).sign(&key(n)).unwrap()
    }

    fn with(f: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Value {
        let mut d = request(1);
        f(d.as_object_mut().unwrap());
        resign(&d, &key(1)).unwrap()
    }

    fn field_err(d: &Value) -> String {
        match ContactRequest::verify(d, now(), false).unwrap_err() {
            Error::Shape { field, .. } => field,
            Error::UnknownField(f) => format!("unknown {f}"),
            e => format!("{e:?}"),
        }
    }

    #[test]
    fn valid_request_verifies() {
        let r = ContactRequest::verify(&request(1), now(), false).unwrap();
        assert_eq!(&r.from, key(1).id());
        assert_eq!(r.to_hint_address().unwrap().canon(), "john@doe.com");
        assert!(!r.probe_expired(now()));
        assert!(r.probe_expired(t("2026-10-22T11:00:00Z")));
        let r = ContactRequest::verify(
            &with(|m| {
                m.insert("to_hint".into(), Value::Null);
            }),
            now(),
            false,
        )
        .unwrap();
        assert!(r.to_hint.is_none());
        ContactRequest::verify(
            &with(|m| {
                m.remove("to_hint");
            }),
            now(),
            false,
        )
        .unwrap();
    }

    #[test]
    fn tampered_fails_signature() {
        let mut d = request(1);
        d["greeting"] = json!("hi");
        assert_eq!(
            ContactRequest::verify(&d, now(), false),
            Err(Error::BadSignature)
        );
        let mut d = request(1);
        d["from"] = json!(key(2).id().as_str());
        assert_eq!(
            ContactRequest::verify(&d, now(), false),
            Err(Error::BadSignature)
        );
    }

    #[test]
    fn rules() {
        assert_eq!(
            field_err(&with(|m| {
                m["id"] = json!("req-1");
            })),
            "id"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["id"] = json!(REQ_ID.to_uppercase());
            })),
            "id"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["type"] = json!("rdv/contact-grant");
            })),
            "type"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["v"] = json!(2);
            })),
            "v"
        );
        assert_eq!(
            field_err(&with(|m| {
                m.insert("x".into(), json!(1));
            })),
            "unknown x"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["card"] = card(2);
            })),
            "card"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["card"] = json!(crate::canon::to_string(&card(1)).unwrap());
            })),
            "card"
        );
        let mut bad_card = card(1);
        bad_card["created"] = json!("2026-10-09T00:00:00Z");
        assert_eq!(
            field_err(&with(|m| {
                m["card"] = bad_card;
            })),
            "BadSignature"
        );
        let expired = resign(
            &{
                let mut c = card(1);
                c["expires"] = json!("2026-10-08T00:00:01Z");
                c
            },
            &key(1),
        )
        .unwrap();
        assert_eq!(
            field_err(&with(|m| {
                m["card"] = expired;
            })),
            "Expired"
        );
        let mut unk = card(1);
        unk["x"] = json!(1);
        let unk = resign(&unk, &key(1)).unwrap();
        assert_eq!(
            field_err(&with(|m| {
                m["card"] = unk;
            })),
            "unknown card.x"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["ts"] = json!("now");
            })),
            "ts"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["to_hint"] = json!(5);
            })),
            "to_hint"
        );
        assert_eq!(
            field_err(&with(|m| {
                m["capabilities_offered"] = json!(["x".repeat(201)]);
            })),
            "capabilities_offered[0]"
        );
        let caps: Vec<String> = (0..33).map(|i| i.to_string()).collect();
        assert_eq!(
            field_err(&with(|m| {
                m["capabilities_offered"] = json!(caps);
            })),
            "capabilities_offered"
        );
    }

    #[test]
    fn bounds() {
        let ok = |f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
            ContactRequest::verify(&with(f), now(), false).is_ok()
        };
        assert!(ok(&|m| {
            m["greeting"] = json!("é".repeat(REQUEST_GREETING_MAX));
        }));
        assert!(!ok(&|m| {
            m["greeting"] = json!("é".repeat(REQUEST_GREETING_MAX + 1));
        }));
        assert!(ok(&|m| {
            m["to_hint"] = json!("a".repeat(ADDRESS_MAX_LEN));
        }));
        assert!(!ok(&|m| {
            m["to_hint"] = json!("a".repeat(ADDRESS_MAX_LEN + 1));
        }));
    }
}
