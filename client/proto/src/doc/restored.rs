//! The restore notice and its ack (§6.4.1). Unsigned payloads: the envelope
//! authenticates them. Strict shapes, unknown members refused; acting on them
//! is the channel's business.

use serde_json::{Value, json};

use crate::error::Result;
use crate::time::Instant;

use super::obj::Obj;
use super::{opt_time_value, time_value};

pub const RESTORED_TYPE: &str = "rdv/restored";
pub const RESTORED_ACK_TYPE: &str = "rdv/restored-ack";

/// `{"type": "rdv/restored", "v": 1, "in_seq", "backup_created"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The last seq the restored side holds as accepted from the peer (≥ 0).
    pub in_seq: u64,
    pub backup_created: Option<Instant>,
}

impl Restored {
    pub fn parse(v: &Value) -> Result<Self> {
        let mut o = Obj::new(v, "")?;
        o.doc_type(RESTORED_TYPE)?;
        o.version()?;
        let n = o.int("in_seq")?;
        if n < 0 {
            return Err(o.err("in_seq", "must be an integer ≥ 0"));
        }
        o.req("backup_created")?;
        let backup_created = o.opt_time("backup_created")?;
        o.deny_unknown()?;
        Ok(Self {
            in_seq: n as u64,
            backup_created,
        })
    }

    pub fn to_value(&self) -> Value {
        json!({
            "type": RESTORED_TYPE,
            "v": 1,
            "in_seq": self.in_seq,
            "backup_created": opt_time_value(self.backup_created),
        })
    }
}

/// `{"type": "rdv/restored-ack", "v": 1, "notice", "from_seq", "prev", "floor"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredAck {
    /// §4.6 hash of the notice envelope.
    pub notice: String,
    /// Where the peer's chain goes on (≥ 1).
    pub from_seq: u64,
    /// Hash of the envelope before `from_seq`, or none.
    pub prev: Option<String>,
    pub floor: Instant,
}

impl RestoredAck {
    pub fn parse(v: &Value) -> Result<Self> {
        let mut o = Obj::new(v, "")?;
        o.doc_type(RESTORED_ACK_TYPE)?;
        o.version()?;
        let notice = o.hash("notice")?.to_string();
        let from_seq = o.positive("from_seq")? as u64;
        let prev = match o.req("prev")? {
            Value::Null => None,
            _ => Some(o.hash("prev")?.to_string()),
        };
        let floor = o.time("floor")?;
        o.deny_unknown()?;
        Ok(Self {
            notice,
            from_seq,
            prev,
            floor,
        })
    }

    pub fn to_value(&self) -> Value {
        json!({
            "type": RESTORED_ACK_TYPE,
            "v": 1,
            "notice": self.notice,
            "from_seq": self.from_seq,
            "prev": self.prev,
            "floor": time_value(self.floor),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::doc::testutil::t;
    use crate::error::Error;

    #[test]
    fn restored_round_trip_and_shape() {
        let r = Restored {
            in_seq: 17,
            backup_created: Some(t("2026-10-20T08:00:00Z")),
        };
        assert_eq!(Restored::parse(&r.to_value()).unwrap(), r);
        let r0 = Restored {
            in_seq: 0,
            backup_created: None,
        };
        assert_eq!(Restored::parse(&r0.to_value()).unwrap(), r0);
        let spec = json!({"type": "rdv/restored", "v": 1, "in_seq": 17, "backup_created": "2026-10-20T08:00:00.000Z"});
        assert_eq!(Restored::parse(&spec).unwrap().in_seq, 17);
        let bad = |f: &dyn Fn(&mut Value)| {
            let mut v = r.to_value();
            f(&mut v);
            Restored::parse(&v).unwrap_err()
        };
        assert!(
            matches!(bad(&|v| v["in_seq"] = json!(-1)), Error::Shape { field, .. } if field == "in_seq")
        );
        assert!(
            matches!(bad(&|v| v["in_seq"] = json!("1")), Error::Shape { field, .. } if field == "in_seq")
        );
        assert!(
            matches!(bad(&|v| { v.as_object_mut().unwrap().remove("backup_created"); }), Error::Shape { field, .. } if field == "backup_created")
        );
        assert!(
            matches!(bad(&|v| v["backup_created"] = json!("yesterday")), Error::Shape { field, .. } if field == "backup_created")
        );
        assert!(matches!(bad(&|v| v["v"] = json!(2)), Error::Shape { field, .. } if field == "v"));
        assert!(
            matches!(bad(&|v| v["type"] = json!("rdv/restored-ack")), Error::Shape { field, .. } if field == "type")
        );
        assert_eq!(bad(&|v| v["x"] = json!(1)), Error::UnknownField("x".into()));
    }

    #[test]
    fn ack_round_trip_and_shape() {
        let a = RestoredAck {
            notice: "a".repeat(64),
            from_seq: 9,
            prev: Some("b".repeat(64)),
            floor: t("2026-10-20T08:00:00Z"),
        };
        assert_eq!(RestoredAck::parse(&a.to_value()).unwrap(), a);
        let a1 = RestoredAck {
            prev: None,
            from_seq: 1,
            ..a.clone()
        };
        assert_eq!(RestoredAck::parse(&a1.to_value()).unwrap(), a1);
        let bad = |f: &dyn Fn(&mut Value)| {
            let mut v = a.to_value();
            f(&mut v);
            RestoredAck::parse(&v).unwrap_err()
        };
        assert!(
            matches!(bad(&|v| v["from_seq"] = json!(0)), Error::Shape { field, .. } if field == "from_seq")
        );
        assert!(
            matches!(bad(&|v| v["notice"] = json!("A".repeat(64))), Error::Shape { field, .. } if field == "notice")
        );
        assert!(
            matches!(bad(&|v| v["prev"] = json!("abc")), Error::Shape { field, .. } if field == "prev")
        );
        assert!(
            matches!(bad(&|v| { v.as_object_mut().unwrap().remove("prev"); }), Error::Shape { field, .. } if field == "prev")
        );
        assert!(
            matches!(bad(&|v| v["floor"] = Value::Null), Error::Shape { field, .. } if field == "floor")
        );
        assert_eq!(bad(&|v| v["x"] = json!(1)), Error::UnknownField("x".into()));
    }
}
