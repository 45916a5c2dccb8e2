//! The restore notice and its ack (§6.4.1). Unsigned payloads: the envelope
//! authenticates them. Strict shapes, unknown members refused; acting on them
//! is the channel's business. Their times are written in milliseconds, as in
//! §6.4.1's example, and read in that form or in whole seconds.

use serde_json::{Value, json};

use crate::error::Result;
use crate::time::{Instant, format_time_ms, parse_time_ms};

use super::obj::Obj;

pub const RESTORED_TYPE: &str = "rdv/restored";
pub const RESTORED_ACK_TYPE: &str = "rdv/restored-ack";

/// `{"type": "rdv/restored", "v": 1, "in_seq", "backup_created"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The last seq the restored side holds as accepted from the peer (≥ 0).
    pub in_seq: u64,
    /// When the backup was made; written in milliseconds, finer parts dropped.
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
        let backup_created = match o.req("backup_created")? {
            Value::Null => None,
            _ => Some(parse_time_ms("backup_created", o.str("backup_created")?)?),
        };
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
            "backup_created": self.backup_created.map(format_time_ms),
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
    /// Envelopes not newer than this are replays; written in milliseconds.
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
        // §6.4: a chain goes on after a hash, except at its first envelope;
        // a null prev past seq 1 would name no head.
        if (from_seq == 1) != prev.is_none() {
            return Err(o.err("prev", "null exactly for from_seq 1"));
        }
        let floor = parse_time_ms("floor", o.str("floor")?)?;
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
            "floor": format_time_ms(self.floor),
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
        // §6.4: prev is null exactly at the chain's first envelope; a null
        // prev past it would set the restored side's head to none.
        assert!(
            matches!(bad(&|v| v["prev"] = Value::Null), Error::Shape { field, .. } if field == "prev")
        );
        assert!(
            matches!(bad(&|v| v["from_seq"] = json!(1)), Error::Shape { field, .. } if field == "prev")
        );
        assert_eq!(bad(&|v| v["x"] = json!(1)), Error::UnknownField("x".into()));
    }

    #[test]
    fn times_are_written_in_milliseconds_as_in_the_spec() {
        // §6.4.1's example, byte for byte.
        let spec = json!({"type": "rdv/restored", "v": 1, "in_seq": 17, "backup_created": "2026-10-20T08:00:00.000Z"});
        let r = Restored::parse(&spec).unwrap();
        assert_eq!(r.backup_created, Some(t("2026-10-20T08:00:00Z")));
        assert_eq!(r.to_value(), spec);
        // Whole seconds (what we wrote before) still read, written back in ms.
        let mut old = spec.clone();
        old["backup_created"] = json!("2026-10-20T08:00:00Z");
        assert_eq!(Restored::parse(&old).unwrap().to_value(), spec);
        let a = RestoredAck {
            notice: "a".repeat(64),
            from_seq: 9,
            prev: Some("b".repeat(64)),
            floor: t("2026-10-20T07:59:59.999Z"),
        };
        let v = a.to_value();
        assert_eq!(v["floor"], "2026-10-20T07:59:59.999Z");
        assert_eq!(RestoredAck::parse(&v).unwrap(), a);
        let mut whole = v.clone();
        whole["floor"] = json!("2026-10-20T08:00:00Z");
        assert_eq!(
            RestoredAck::parse(&whole).unwrap().to_value()["floor"],
            "2026-10-20T08:00:00.000Z"
        );
    }

    #[test]
    fn other_fractions_are_refused() {
        for bad in [
            "2026-10-20T08:00:00.5Z",
            "2026-10-20T08:00:00.000000Z",
            "2026-10-20T10:00:00.000+02:00",
        ] {
            let mut r = json!({"type": "rdv/restored", "v": 1, "in_seq": 1, "backup_created": bad});
            assert!(
                matches!(Restored::parse(&r), Err(Error::Shape { field, .. }) if field == "backup_created"),
                "{bad}"
            );
            r = json!({"type": "rdv/restored-ack", "v": 1, "notice": "a".repeat(64), "from_seq": 1, "prev": null, "floor": bad});
            assert!(
                matches!(RestoredAck::parse(&r), Err(Error::Shape { field, .. }) if field == "floor"),
                "{bad}"
            );
        }
    }
}
