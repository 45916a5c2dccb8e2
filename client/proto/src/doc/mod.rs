//! Signed documents (§4.3, §5.1, §5.3, §5.4, §7.8) and the unsigned payloads
//! that carry or accompany them (§4.3 card-update, §6.4.1 restored).
//!
//! Every reader follows one order: bound the size (where the spec gives one),
//! verify the signature against the signer the document names, and only then
//! read the shape, strictly, so nothing a document says is trusted before its
//! signature (§4.6, §7.8.3).

use std::str::FromStr;

use serde_json::{Map, Value};

use crate::canon;
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};
use crate::sign;
use crate::time::Instant;

pub mod card;
pub mod card_update;
pub mod grant;
pub mod group;
pub mod group_msg;
pub mod gw_request;
pub mod obj;
pub mod request;
pub mod restored;
pub mod revoke;

use obj::Obj;

/// The documents the CLI can verify by name (`rdv verify <kind>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    Card,
    ContactRequest,
    ContactGrant,
    Revoke,
    GroupState,
    GroupInvite,
    GroupJoin,
    GroupLeave,
    GroupMsgHeader,
}

impl FromStr for DocKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "card" => Self::Card,
            "contact-request" => Self::ContactRequest,
            "contact-grant" => Self::ContactGrant,
            "revoke" => Self::Revoke,
            "group-state" => Self::GroupState,
            "group-invite" => Self::GroupInvite,
            "group-join" => Self::GroupJoin,
            "group-leave" => Self::GroupLeave,
            "group-msg-header" => Self::GroupMsgHeader,
            _ => return Err(Error::shape("kind", format!("unknown document kind {s:?}"))),
        })
    }
}

/// Verifies `doc` as a `kind` at `now` (ws:// relays refused) and returns its
/// §4.6 hash.
pub fn verify_doc(kind: DocKind, doc: &Value, now: Instant) -> Result<String> {
    Ok(match kind {
        DocKind::Card => card::Card::verify(doc, now, false)?.hash,
        DocKind::ContactRequest => request::ContactRequest::verify(doc, now, false)?.hash,
        DocKind::ContactGrant => grant::Grant::verify(doc, now, false)?.hash,
        DocKind::Revoke => revoke::Revoke::verify(doc)?.hash,
        DocKind::GroupState => group::GroupState::verify(doc)?.hash,
        DocKind::GroupInvite => group::GroupInvite::verify(doc, now)?.hash,
        DocKind::GroupJoin => group::GroupJoin::verify(doc, now, false)?.hash,
        DocKind::GroupLeave => group::GroupLeave::verify(doc)?.hash,
        DocKind::GroupMsgHeader => group_msg::GroupMsgHeader::verify(doc)?.hash,
    })
}

/// Drops `sig` and signs again: how tests and vector generators alter one
/// field of a valid document.
pub fn resign(doc: &Value, key: &AgentKey) -> Result<Value> {
    let mut m = doc
        .as_object()
        .cloned()
        .ok_or_else(|| Error::shape("document", "must be an object"))?;
    m.remove("sig");
    Ok(Value::Object(sign::sign(m, key)?))
}

/// The canonical size of `v`, refused over `max` (§4.6 sizes are canonical).
pub(crate) fn bound(v: &Value, what: &'static str, max: usize) -> Result<usize> {
    let len = canon::to_vec(v)?.len();
    if len > max {
        return Err(Error::TooLarge {
            what,
            len,
            limit: max,
        });
    }
    Ok(len)
}

/// Steps 1 and 2 of every reader: bound the canonical size, then verify
/// `sig` against the agent ID in `signer_field`, from one serialization.
/// Returns a reader with the signer and `sig` already read, the signer, and
/// the document's §4.6 hash.
pub fn open_signed<'a>(
    v: &'a Value,
    path: &str,
    what: &'static str,
    signer_field: &'a str,
    max: Option<usize>,
) -> Result<(Obj<'a>, AgentId, String)> {
    let mut o = Obj::new(v, path)?;
    let signer = o.id(signer_field)?;
    let hash =
        sign::verify_hashed(o.map(), &signer, max.unwrap_or(usize::MAX)).map_err(|e| match e {
            Error::Shape { field, reason } if field == "sig" => Error::shape(o.path("sig"), reason),
            Error::TooLarge { len, limit, .. } => Error::TooLarge { what, len, limit },
            e => e,
        })?;
    o.opt("sig");
    Ok((o, signer, hash))
}

/// A list of capability URIs (§4.3, §5.1): at most `max` non-empty strings of
/// at most `max_len` characters.
pub(crate) fn uri_list<'a>(
    o: &mut Obj<'a>,
    key: &'a str,
    max: usize,
    max_len: usize,
) -> Result<Vec<String>> {
    let arr = o.array(key)?;
    if arr.len() > max {
        return Err(o.err(key, format!("more than {max} entries")));
    }
    let mut out = Vec::with_capacity(arr.len());
    for (i, x) in arr.iter().enumerate() {
        let p = format!("{key}[{i}]");
        let s = x
            .as_str()
            .ok_or_else(|| Error::shape(o.path(&p), "must be a string"))?;
        if s.is_empty() || s.chars().count() > max_len {
            return Err(Error::shape(
                o.path(&p),
                format!("must be 1 to {max_len} characters"),
            ));
        }
        out.push(s.to_string());
    }
    Ok(out)
}

/// `scheme://host…`: printable ASCII, a non-empty host, no userinfo.
pub(crate) fn url_with_scheme(s: &str, scheme: &str, max_len: usize) -> bool {
    let Some(rest) = s.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    s.len() <= max_len
        && s.bytes().all(|b| b.is_ascii_graphic())
        && !host.is_empty()
        && !host.contains('@')
}

/// Builds an object from pairs.
pub(crate) fn object(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Signs an object built from pairs.
pub(crate) fn sign_pairs(pairs: Vec<(&str, Value)>, key: &AgentKey) -> Result<Value> {
    Ok(Value::Object(sign::sign(object(pairs), key)?))
}

/// A time as documents write it, or null.
pub(crate) fn opt_time_value(t: Option<Instant>) -> Value {
    t.map_or(Value::Null, |t| Value::String(crate::time::format_time(t)))
}

pub(crate) fn time_value(t: Instant) -> Value {
    Value::String(crate::time::format_time(t))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod testutil {
    use crate::keys::AgentKey;
    use crate::time::{Instant, parse_time};

    pub fn key(n: u8) -> AgentKey {
        AgentKey::from_seed([n; 32])
    }

    pub fn t(s: &str) -> Instant {
        parse_time("t", s).unwrap()
    }

    /// The fixed "now" of the tests.
    pub fn now() -> Instant {
        t("2026-10-08T12:00:00Z")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_by_name() {
        for (s, k) in [
            ("card", DocKind::Card),
            ("contact-request", DocKind::ContactRequest),
            ("contact-grant", DocKind::ContactGrant),
            ("revoke", DocKind::Revoke),
            ("group-state", DocKind::GroupState),
            ("group-invite", DocKind::GroupInvite),
            ("group-join", DocKind::GroupJoin),
            ("group-leave", DocKind::GroupLeave),
            ("group-msg-header", DocKind::GroupMsgHeader),
        ] {
            assert_eq!(s.parse::<DocKind>().unwrap(), k);
        }
        assert!("Card".parse::<DocKind>().is_err());
        assert!("envelope".parse::<DocKind>().is_err());
    }

    #[test]
    fn verify_doc_each_kind() {
        use serde_json::json;
        use testutil::{key, now, t};
        let state = group::tests::state0();
        let s0 = group::GroupState::verify(&state).unwrap();
        let join = group::GroupJoinBuilder {
            id: "3a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d".into(),
            group: group::tests::GROUP.into(),
            to: key(1).id().clone(),
            invite_ref: None,
            state: s0.hash.clone(),
            card: card::tests::card(1),
            invoke: json!({}),
            max_frequency: "20/day".into(),
            ts: now(),
        }
        .sign(&key(1))
        .unwrap();
        let msg = group_msg::GroupMsgBuilder {
            group: group::tests::GROUP.into(),
            epoch: 0,
            state: s0.hash.clone(),
            to: group_msg::GroupTo::Board {
                gseq: 1,
                gprev: None,
            },
            heads: Default::default(),
            ts: now(),
        }
        .sign(&json!({"type": "rdv/note"}), &key(1))
        .unwrap();
        let invite_id = "2a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
        let docs = [
            (DocKind::Card, card::tests::card(1)),
            (DocKind::ContactRequest, request::tests::request(1)),
            (DocKind::ContactGrant, grant::tests::grant()),
            (
                DocKind::Revoke,
                revoke::Revoke::build(invite_id, key(1).id(), now(), &key(2)).unwrap(),
            ),
            (DocKind::GroupState, state.clone()),
            (
                DocKind::GroupInvite,
                group::GroupInvite::build(
                    invite_id,
                    key(5).id(),
                    &state,
                    "hi",
                    t("2026-10-09T00:00:00Z"),
                    now(),
                    &key(1),
                )
                .unwrap(),
            ),
            (DocKind::GroupJoin, join),
            (
                DocKind::GroupLeave,
                group::GroupLeave::build(&s0, now(), &key(2)).unwrap(),
            ),
            (DocKind::GroupMsgHeader, msg["msg"].clone()),
        ];
        for (kind, doc) in &docs {
            assert_eq!(
                verify_doc(*kind, doc, now()).unwrap(),
                sign::hash(doc).unwrap(),
                "{kind:?}"
            );
            let mut t = doc.clone();
            t.as_object_mut().unwrap().insert("v".into(), json!(7));
            assert_eq!(
                verify_doc(*kind, &t, now()),
                Err(Error::BadSignature),
                "{kind:?}"
            );
        }
        // A document of one kind is not another.
        assert!(verify_doc(DocKind::Revoke, &docs[2].1, now()).is_err());
        assert!(verify_doc(DocKind::GroupLeave, &docs[4].1, now()).is_err());
    }

    #[test]
    fn urls() {
        assert!(url_with_scheme("wss://relay.example", "wss", 256));
        assert!(url_with_scheme("wss://relay.example/x?y", "wss", 256));
        assert!(!url_with_scheme("wss://", "wss", 256));
        assert!(!url_with_scheme("wss://u@relay", "wss", 256));
        assert!(!url_with_scheme("wss://re lay", "wss", 256));
        assert!(!url_with_scheme("ws://relay", "wss", 256));
        assert!(!url_with_scheme("https://relay", "wss", 256));
        assert!(!url_with_scheme("wss://relay.example", "wss", 10));
    }
}
