//! The group message header (§7.8.3): the signed `msg` of an rdv/group-msg,
//! committing to its body by hash, so the header alone is evidence (§7.8.6).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::consts::{
    GROUP_HEAD_HASH_LEN, GROUP_MAX_MEMBERS, GROUP_MSG_BODY_MAX_BYTES, GROUP_MSG_HEADER_MAX_BYTES,
    GROUP_MSG_MAX_PRIVATE_TO,
};
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};
use crate::sign;
use crate::time::Instant;

use super::obj::Obj;
use super::{bound, open_signed, sign_pairs, time_value};

pub const GROUP_MSG_TYPE: &str = "rdv/group-msg";

/// Who a group message goes to (§7.8.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupTo {
    /// Board-visible, continuing the sender's chain.
    Board { gseq: u64, gprev: Option<String> },
    /// Private to 1 to 15 members; no gseq or gprev.
    Private(Vec<AgentId>),
}

/// A heads entry: the newest gseq accepted from a member and the first 16
/// hex digits of that header's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub gseq: u64,
    pub hash16: String,
}

/// A verified header.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMsgHeader {
    pub group: String,
    pub from: AgentId,
    pub epoch: u64,
    pub state: String,
    pub to: GroupTo,
    pub heads: BTreeMap<AgentId, Head>,
    pub body_hash: String,
    pub ts: Instant,
    pub hash: String,
    pub doc: Value,
}

impl GroupMsgHeader {
    /// Verifies a header: ≤ 4 KiB, signed by `from`, strict shape.
    pub fn verify(doc: &Value) -> Result<Self> {
        Self::verify_at(doc, "")
    }

    fn verify_at(doc: &Value, path: &str) -> Result<Self> {
        let (mut o, from, hash) = open_signed(
            doc,
            path,
            "group message header",
            "from",
            Some(GROUP_MSG_HEADER_MAX_BYTES),
        )?;
        o.version()?;
        o.doc_type(GROUP_MSG_TYPE)?;
        let group = o.uuid("group")?.to_string();
        let epoch = o.int("epoch")?;
        if epoch < 0 {
            return Err(o.err("epoch", "must be an integer ≥ 0"));
        }
        let state = o.hash("state")?.to_string();
        let to = match o.req("to")? {
            Value::String(s) if s == "*" => {
                let gseq = o.positive("gseq")? as u64;
                o.req("gprev")?;
                let gprev = match (gseq, o.opt_str("gprev")?) {
                    (1, None) => None,
                    (1, Some(_)) => return Err(o.err("gprev", "must be null at gseq 1")),
                    (_, None) => return Err(o.err("gprev", "must be a hash after gseq 1")),
                    (_, Some(_)) => Some(o.hash("gprev")?.to_string()),
                };
                GroupTo::Board { gseq, gprev }
            }
            Value::Array(list) => {
                if o.opt("gseq").is_some() || o.opt("gprev").is_some() {
                    return Err(o.err("gseq", "only a board message (to \"*\") has gseq and gprev"));
                }
                if list.is_empty() || list.len() > GROUP_MSG_MAX_PRIVATE_TO {
                    return Err(o.err(
                        "to",
                        format!("must list 1 to {GROUP_MSG_MAX_PRIVATE_TO} members"),
                    ));
                }
                let mut ids: Vec<AgentId> = Vec::with_capacity(list.len());
                for (i, v) in list.iter().enumerate() {
                    let p = o.path(&format!("to[{i}]"));
                    let s = v
                        .as_str()
                        .ok_or_else(|| Error::shape(&p, "must be a string"))?;
                    let id = AgentId::parse(s).map_err(|e| Error::shape(&p, e.to_string()))?;
                    if id == from || ids.contains(&id) {
                        return Err(Error::shape(p, "repeats a recipient or names the sender"));
                    }
                    ids.push(id);
                }
                GroupTo::Private(ids)
            }
            _ => return Err(o.err("to", "must be \"*\" or a list of member IDs")),
        };
        let heads = heads(&mut o, &from)?;
        let body_hash = o.hash("body_hash")?.to_string();
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        Ok(Self {
            group,
            from,
            epoch: epoch as u64,
            state,
            to,
            heads,
            body_hash,
            ts,
            hash,
            doc: doc.clone(),
        })
    }

    /// §7.8.3: the body matches `body_hash`, is an object with a string
    /// `type`, and its canonical JSON is at most 24 KiB.
    pub fn check_body(&self, body: &Value) -> Result<()> {
        bound(body, "group message body", GROUP_MSG_BODY_MAX_BYTES)?;
        let Value::Object(m) = body else {
            return Err(Error::shape("body", "must be an object"));
        };
        if !matches!(m.get("type"), Some(Value::String(_))) {
            return Err(Error::shape("body.type", "must be a string"));
        }
        if sign::hash(body)? != self.body_hash {
            return Err(Error::shape("body", "does not match body_hash"));
        }
        Ok(())
    }

    /// Whether the message is board-visible.
    pub fn is_board(&self) -> bool {
        matches!(self.to, GroupTo::Board { .. })
    }
}

/// The whole payload `{"type": "rdv/group-msg", "msg", "body"}`: the header
/// verified, then the body checked against it.
pub fn parse_group_msg(payload: &Value) -> Result<(GroupMsgHeader, Value)> {
    let mut o = Obj::new(payload, "")?;
    o.doc_type(GROUP_MSG_TYPE)?;
    let msg = o.req("msg")?;
    let body = o.req("body")?;
    o.deny_unknown()?;
    let h = GroupMsgHeader::verify_at(msg, "msg")?;
    h.check_body(body)?;
    Ok((h, body.clone()))
}

fn heads(o: &mut Obj<'_>, from: &AgentId) -> Result<BTreeMap<AgentId, Head>> {
    let path = o.path("heads");
    let h = o.object("heads")?;
    let map = h.map();
    if map.len() >= GROUP_MAX_MEMBERS {
        return Err(Error::shape(
            &path,
            format!("more than {} entries", GROUP_MAX_MEMBERS - 1),
        ));
    }
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let p = format!("{path}[{k:?}]");
        let id = AgentId::parse(k).map_err(|e| Error::shape(&p, e.to_string()))?;
        if &id == from {
            return Err(Error::shape(&p, "the sender has no head of its own"));
        }
        let bad = || {
            Error::shape(
                &p,
                format!("must be [gseq ≥ 1, {GROUP_HEAD_HASH_LEN} lowercase hex digits]"),
            )
        };
        let Some([n, hh]) = v
            .as_array()
            .map(Vec::as_slice)
            .and_then(|a| <&[Value; 2]>::try_from(a).ok())
        else {
            return Err(bad());
        };
        let gseq = n.as_i64().filter(|n| *n >= 1).ok_or_else(bad)? as u64;
        let hash16 = hh
            .as_str()
            .filter(|s| {
                s.len() == GROUP_HEAD_HASH_LEN
                    && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            })
            .ok_or_else(bad)?;
        out.insert(
            id,
            Head {
                gseq,
                hash16: hash16.to_string(),
            },
        );
    }
    Ok(out)
}

/// A header before it is signed (§7.8.3).
#[derive(Debug, Clone)]
pub struct GroupMsgBuilder {
    pub group: String,
    pub epoch: u64,
    pub state: String,
    pub to: GroupTo,
    pub heads: BTreeMap<AgentId, Head>,
    pub ts: Instant,
}

impl GroupMsgBuilder {
    /// The whole payload: `body` hashed into the header, the header signed.
    pub fn sign(&self, body: &Value, key: &AgentKey) -> Result<Value> {
        let heads: serde_json::Map<String, Value> = self
            .heads
            .iter()
            .map(|(id, h)| (id.to_string(), json!([h.gseq, h.hash16])))
            .collect();
        let mut pairs = vec![
            ("v", json!(1)),
            ("type", json!(GROUP_MSG_TYPE)),
            ("group", json!(self.group)),
            ("from", json!(key.id().as_str())),
            ("epoch", json!(self.epoch)),
            ("state", json!(self.state)),
            ("heads", Value::Object(heads)),
            ("body_hash", json!(sign::hash(body)?)),
            ("ts", time_value(self.ts)),
        ];
        match &self.to {
            GroupTo::Board { gseq, gprev } => {
                pairs.push(("to", json!("*")));
                pairs.push(("gseq", json!(gseq)));
                pairs.push(("gprev", json!(gprev)));
            }
            GroupTo::Private(ids) => {
                let ids: Vec<&str> = ids.iter().map(AgentId::as_str).collect();
                pairs.push(("to", json!(ids)));
            }
        }
        let msg = sign_pairs(pairs, key)?;
        Ok(json!({"type": GROUP_MSG_TYPE, "msg": msg, "body": body}))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::doc::group::tests::GROUP;
    use crate::doc::resign;
    use crate::doc::testutil::{key, t};
    use serde_json::Map;

    fn builder(to: GroupTo) -> GroupMsgBuilder {
        let mut heads = BTreeMap::new();
        heads.insert(
            key(2).id().clone(),
            Head {
                gseq: 7,
                hash16: "a1b2c3d4e5f60718".into(),
            },
        );
        GroupMsgBuilder {
            group: GROUP.into(),
            epoch: 2,
            state: "c".repeat(64),
            to,
            heads,
            ts: t("2026-10-08T11:00:00Z"),
        }
    }

    fn body() -> Value {
        json!({"type": "a2a/message", "message": {"text": "hello"}})
    }

    fn board(gseq: u64, gprev: Option<String>) -> Value {
        builder(GroupTo::Board { gseq, gprev })
            .sign(&body(), &key(1))
            .unwrap()
    }

    fn msg_err(msg: &Value) -> String {
        match GroupMsgHeader::verify(msg).unwrap_err() {
            Error::Shape { field, .. } => field,
            Error::UnknownField(f) => format!("unknown {f}"),
            e => format!("{e:?}"),
        }
    }

    fn alter(p: &Value, f: impl FnOnce(&mut Map<String, Value>)) -> Value {
        let mut m = p["msg"].clone();
        f(m.as_object_mut().unwrap());
        resign(&m, &key(1)).unwrap()
    }

    #[test]
    fn valid_headers_and_body() {
        let p = board(1, None);
        let (h, b) = parse_group_msg(&p).unwrap();
        assert!(h.is_board());
        assert_eq!(h.heads[key(2).id()].gseq, 7);
        assert_eq!(b, body());
        let p = board(12, Some("d".repeat(64)));
        parse_group_msg(&p).unwrap();
        let p = builder(GroupTo::Private(vec![
            key(2).id().clone(),
            key(3).id().clone(),
        ]))
        .sign(&body(), &key(1))
        .unwrap();
        let (h, _) = parse_group_msg(&p).unwrap();
        assert!(!h.is_board());
        let mut t = p.clone();
        t["msg"]["epoch"] = json!(3);
        assert_eq!(GroupMsgHeader::verify(&t["msg"]), Err(Error::BadSignature));
    }

    #[test]
    fn body_checks() {
        let p = board(1, None);
        let h = GroupMsgHeader::verify(&p["msg"]).unwrap();
        h.check_body(&body()).unwrap();
        assert!(
            h.check_body(&json!({"type": "a2a/message", "message": {"text": "hellO"}}))
                .is_err()
        );
        let no_type = json!({"message": 1});
        let h2 = GroupMsgHeader::verify(
            &builder(GroupTo::Board {
                gseq: 1,
                gprev: None,
            })
            .sign(&no_type, &key(1))
            .unwrap()["msg"],
        )
        .unwrap();
        assert!(
            matches!(h2.check_body(&no_type), Err(Error::Shape { field, .. }) if field == "body.type")
        );
        let arr = json!(["x"]);
        let h3 = GroupMsgHeader::verify(
            &builder(GroupTo::Board {
                gseq: 1,
                gprev: None,
            })
            .sign(&arr, &key(1))
            .unwrap()["msg"],
        )
        .unwrap();
        assert!(h3.check_body(&arr).is_err());
        // Body ≤ 24 KiB: at the bound passes, one past fails.
        let sized = |n: usize| {
            let base = crate::canon::to_vec(&json!({"type": "x", "p": ""}))
                .unwrap()
                .len();
            json!({"type": "x", "p": "y".repeat(n - base)})
        };
        let exact = sized(GROUP_MSG_BODY_MAX_BYTES);
        let h = GroupMsgHeader::verify(
            &builder(GroupTo::Board {
                gseq: 1,
                gprev: None,
            })
            .sign(&exact, &key(1))
            .unwrap()["msg"],
        )
        .unwrap();
        h.check_body(&exact).unwrap();
        let over = sized(GROUP_MSG_BODY_MAX_BYTES + 1);
        let h = GroupMsgHeader::verify(
            &builder(GroupTo::Board {
                gseq: 1,
                gprev: None,
            })
            .sign(&over, &key(1))
            .unwrap()["msg"],
        )
        .unwrap();
        assert!(matches!(h.check_body(&over), Err(Error::TooLarge { .. })));
        // The payload itself is strict.
        let mut p2 = p.clone();
        p2["x"] = json!(1);
        assert_eq!(
            parse_group_msg(&p2).unwrap_err(),
            Error::UnknownField("x".into())
        );
    }

    #[test]
    fn gseq_gprev_rules() {
        let p = board(1, None);
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["gprev"] = json!("d".repeat(64));
            })),
            "gprev"
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["gseq"] = json!(2);
            })),
            "gprev"
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["gseq"] = json!(0);
            })),
            "gseq"
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m.remove("gseq");
            })),
            "gseq"
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m.remove("gprev");
            })),
            "gprev"
        );
        let private = builder(GroupTo::Private(vec![key(2).id().clone()]))
            .sign(&body(), &key(1))
            .unwrap();
        assert_eq!(
            msg_err(&alter(&private, |m| {
                m.insert("gseq".into(), json!(1));
            })),
            "gseq"
        );
        assert_eq!(
            msg_err(&alter(&private, |m| {
                m.insert("gprev".into(), Value::Null);
            })),
            "gseq"
        );
    }

    #[test]
    fn to_and_heads_rules() {
        let p = board(1, None);
        let ids =
            |n: u8| -> Vec<Value> { (2..2 + n).map(|i| json!(key(i).id().as_str())).collect() };
        let private = |list: Vec<Value>| {
            alter(&p, |m| {
                m.remove("gseq");
                m.remove("gprev");
                m["to"] = json!(list);
            })
        };
        GroupMsgHeader::verify(&private(ids(15))).unwrap();
        assert_eq!(msg_err(&private(ids(16))), "to");
        assert_eq!(msg_err(&private(vec![])), "to");
        let mut dup = ids(2);
        dup.push(dup[0].clone());
        assert_eq!(msg_err(&private(dup)), "to[2]");
        assert_eq!(
            msg_err(&private(vec![json!(key(1).id().as_str())])),
            "to[0]"
        );
        assert_eq!(msg_err(&private(vec![json!("rdv1:x")])), "to[0]");
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["to"] = json!("all");
            })),
            "to"
        );
        let h2 = format!("heads[{:?}]", key(2).id().as_str());
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["heads"][key(2).id().as_str()] = json!([0, "a1b2c3d4e5f60718"]);
            })),
            h2
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["heads"][key(2).id().as_str()] = json!([1, "A1B2C3D4E5F60718"]);
            })),
            h2
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["heads"][key(2).id().as_str()] = json!([1, "a1b2c3d4e5f6071"]);
            })),
            h2
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["heads"][key(2).id().as_str()] = json!([1, "a1b2c3d4e5f60718", 3]);
            })),
            h2
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["heads"][key(1).id().as_str()] = json!([1, "a1b2c3d4e5f60718"]);
            })),
            format!("heads[{:?}]", key(1).id().as_str())
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["heads"]["bob"] = json!([1, "a1b2c3d4e5f60718"]);
            })),
            "heads[\"bob\"]"
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m.insert("x".into(), json!(1));
            })),
            "unknown x"
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["body_hash"] = json!("x");
            })),
            "body_hash"
        );
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["group"] = json!("g");
            })),
            "group"
        );
    }

    #[test]
    fn header_size_bound() {
        let p = board(1, None);
        let many: Map<String, Value> = (2..17u8)
            .map(|i| {
                (
                    key(i).id().to_string(),
                    json!([i64::from(i) * 1000, "a1b2c3d4e5f60718"]),
                )
            })
            .collect();
        let d = alter(&p, |m| {
            m["heads"] = Value::Object(many.clone());
        });
        let len = crate::canon::to_vec(&d).unwrap().len();
        assert!(len <= GROUP_MSG_HEADER_MAX_BYTES, "{len}");
        GroupMsgHeader::verify(&d).unwrap();
        let mut more = many.clone();
        more.insert(key(17).id().to_string(), json!([1, "a1b2c3d4e5f60718"]));
        assert_eq!(
            msg_err(&alter(&p, |m| {
                m["heads"] = Value::Object(more);
            })),
            "heads"
        );
        // Pad with an unknown member so only the size rule can refuse first.
        let d = alter(&p, |m| {
            m.insert("pad".into(), json!("x".repeat(GROUP_MSG_HEADER_MAX_BYTES)));
        });
        assert!(matches!(
            GroupMsgHeader::verify(&d),
            Err(Error::TooLarge { .. })
        ));
    }
}
