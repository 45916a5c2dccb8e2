//! A strict reader over one JSON object: typed accessors with the field's
//! path in every error, and a final check that refuses unknown members.

use serde_json::{Map, Value};

use crate::encoding::is_hash;
use crate::error::{Error, Result};
use crate::keys::AgentId;
use crate::time::{Instant, parse_time};

/// Reads the members of one object, remembering which were read.
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    read: Vec<&'a str>,
}

impl<'a> Obj<'a> {
    /// `path` names the object in errors (`card`, `grant.scope`).
    pub fn new(v: &'a Value, path: &str) -> Result<Self> {
        match v {
            Value::Object(map) => Ok(Self {
                map,
                path: path.to_string(),
                read: Vec::new(),
            }),
            _ => Err(Error::shape(path, "must be an object")),
        }
    }

    pub fn path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    pub fn err(&self, key: &str, reason: impl Into<String>) -> Error {
        Error::shape(self.path(key), reason)
    }

    /// Any member, or `None` when absent. Marks it read.
    pub fn opt(&mut self, key: &'a str) -> Option<&'a Value> {
        let (k, v) = self.map.get_key_value(key)?;
        self.read.push(k.as_str());
        Some(v)
    }

    pub fn req(&mut self, key: &'a str) -> Result<&'a Value> {
        self.opt(key).ok_or_else(|| self.err(key, "missing"))
    }

    pub fn str(&mut self, key: &'a str) -> Result<&'a str> {
        self.req(key)?
            .as_str()
            .ok_or_else(|| self.err(key, "must be a string"))
    }

    /// A string, or `None` when absent or null.
    pub fn opt_str(&mut self, key: &'a str) -> Result<Option<&'a str>> {
        match self.opt(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.err(key, "must be a string or null")),
        }
    }

    /// A string of at most `max` characters.
    pub fn text(&mut self, key: &'a str, max: usize) -> Result<&'a str> {
        let s = self.str(key)?;
        if s.chars().count() > max {
            return Err(self.err(key, format!("longer than {max} characters")));
        }
        Ok(s)
    }

    pub fn bool(&mut self, key: &'a str) -> Result<bool> {
        self.req(key)?
            .as_bool()
            .ok_or_else(|| self.err(key, "must be true or false"))
    }

    pub fn int(&mut self, key: &'a str) -> Result<i64> {
        self.req(key)?
            .as_i64()
            .ok_or_else(|| self.err(key, "must be an integer"))
    }

    /// An integer ≥ 1.
    pub fn positive(&mut self, key: &'a str) -> Result<i64> {
        let n = self.int(key)?;
        if n < 1 {
            return Err(self.err(key, "must be a positive integer"));
        }
        Ok(n)
    }

    /// `v` must be exactly 1.
    pub fn version(&mut self) -> Result<()> {
        if self.int("v")? != 1 {
            return Err(self.err("v", "must be 1"));
        }
        Ok(())
    }

    /// `type` must be exactly `want`.
    pub fn doc_type(&mut self, want: &str) -> Result<()> {
        if self.str("type")? != want {
            return Err(self.err("type", format!("must be {want}")));
        }
        Ok(())
    }

    pub fn id(&mut self, key: &'a str) -> Result<AgentId> {
        let s = self.str(key)?;
        AgentId::parse(s).map_err(|e| self.err(key, e.to_string()))
    }

    pub fn uuid(&mut self, key: &'a str) -> Result<&'a str> {
        let s = self.str(key)?;
        if !is_uuid(s) {
            return Err(self.err(key, "must be a lowercase RFC 4122 UUID"));
        }
        Ok(s)
    }

    pub fn time(&mut self, key: &'a str) -> Result<Instant> {
        let s = self.str(key)?;
        parse_time(&self.path(key), s)
    }

    /// A time, or `None` when absent or null.
    pub fn opt_time(&mut self, key: &'a str) -> Result<Option<Instant>> {
        match self.opt_str(key)? {
            None => Ok(None),
            Some(s) => parse_time(&self.path(key), s).map(Some),
        }
    }

    /// A §4.6 hash: 64 lowercase hex digits.
    pub fn hash(&mut self, key: &'a str) -> Result<&'a str> {
        let s = self.str(key)?;
        if !is_hash(s) {
            return Err(self.err(key, "must be 64 lowercase hex digits"));
        }
        Ok(s)
    }

    pub fn array(&mut self, key: &'a str) -> Result<&'a Vec<Value>> {
        self.req(key)?
            .as_array()
            .ok_or_else(|| self.err(key, "must be an array"))
    }

    pub fn object(&mut self, key: &'a str) -> Result<Obj<'a>> {
        let p = self.path(key);
        Obj::new(self.req(key)?, &p)
    }

    /// Refuses any member not read so far.
    pub fn deny_unknown(self) -> Result<()> {
        for k in self.map.keys() {
            if !self.read.contains(&k.as_str()) {
                return Err(Error::UnknownField(self.path(k)));
            }
        }
        Ok(())
    }

    pub fn map(&self) -> &'a Map<String, Value> {
        self.map
    }
}

/// §5.1 (pinned): a lowercase hyphenated RFC 4122 UUID, version 1–8.
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 36 {
        return false;
    }
    for (i, &c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => matches!(c, b'0'..=b'9' | b'a'..=b'f'),
        };
        if !ok {
            return false;
        }
    }
    matches!(b[14], b'1'..=b'8') && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uuids() {
        assert!(is_uuid("6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"));
        assert!(is_uuid(
            &uuid::Uuid::from_u128(0x1234_5678_9abc_4def_8123_4567_89ab_cdef).to_string()
        ));
        for bad in [
            "6F1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D",
            "6f1b2c3d4e5f4a6b8c7d9e0f1a2b3c4d",
            "{6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d}",
            "00000000-0000-0000-0000-000000000000",
            "6f1b2c3d-4e5f-0a6b-8c7d-9e0f1a2b3c4d",
            "6f1b2c3d-4e5f-4a6b-cc7d-9e0f1a2b3c4d",
            "req-1",
        ] {
            assert!(!is_uuid(bad), "{bad} accepted");
        }
    }

    #[test]
    fn unknown_members_refused() {
        let v = json!({"a": 1, "b": 2});
        let mut o = Obj::new(&v, "x").unwrap();
        o.int("a").unwrap();
        assert_eq!(o.deny_unknown(), Err(Error::UnknownField("x.b".into())));
    }
}
