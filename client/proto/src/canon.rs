//! Canonical JSON (§4.6): the RFC 8785 subset with integers only.
//!
//! Every signed document arrives from an attacker, so the parser is strict:
//! duplicate member names, non-integer numbers, integers outside ±(2^53−1),
//! lone surrogates, nesting deeper than [`CANON_MAX_DEPTH`] and input over
//! the caller's size limit are refused. serde_json silently keeps the last
//! duplicate and accepts floats, so the parser is our own; values are held as
//! `serde_json::Value` so the rest of the ecosystem can use them.

use serde_json::{Map, Number, Value};

use crate::consts::{CANON_MAX_DEPTH, CANON_MAX_SAFE_INT};
use crate::error::{Error, Result};

/// Parses `input` strictly. `max_len` bounds the input before any work.
pub fn parse(input: &[u8], max_len: usize) -> Result<Value> {
    if input.len() > max_len {
        return Err(Error::TooLarge {
            what: "document",
            len: input.len(),
            limit: max_len,
        });
    }
    let mut p = Parser { s: input, i: 0 };
    p.ws();
    let v = p.value(1)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(v)
}

/// Parses a string strictly (see [`parse`]).
pub fn parse_str(input: &str, max_len: usize) -> Result<Value> {
    parse(input.as_bytes(), max_len)
}

/// The canonical bytes of `v`. Refuses floats and integers outside ±(2^53−1),
/// so a value built in code cannot produce bytes another implementation would
/// not reproduce.
pub fn to_vec(v: &Value) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    write_value(v, &mut out, 1)?;
    Ok(out)
}

/// The canonical bytes of an object without its top-level member `skip`:
/// the signing input of a signed document, without cloning it (§4.6).
pub fn to_vec_without(m: &Map<String, Value>, skip: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    write_object(m, &mut out, 1, Some(skip))?;
    Ok(out)
}

/// The canonical bytes of an object, and the byte range whose removal leaves
/// the canonical bytes without the top-level member `mark` (its separating
/// comma included). One serialization gives a signed document's hash and
/// its signing input (§4.6).
pub fn to_vec_marking(
    m: &Map<String, Value>,
    mark: &str,
) -> Result<(Vec<u8>, Option<std::ops::Range<usize>>)> {
    let mut out = Vec::with_capacity(256);
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    let mut range = None;
    out.push(b'{');
    for (i, k) in keys.iter().enumerate() {
        let start = out.len();
        if i > 0 {
            out.push(b',');
        }
        write_string(k, &mut out);
        out.push(b':');
        write_value(&m[*k], &mut out, 2)?;
        if k.as_str() == mark {
            // The first member takes the comma after it instead of before.
            let end = if i == 0 && keys.len() > 1 {
                out.len() + 1
            } else {
                out.len()
            };
            range = Some(start..end);
        }
    }
    out.push(b'}');
    Ok((out, range))
}

/// The canonical bytes of an object, without wrapping it in a `Value`.
pub fn to_vec_map(m: &Map<String, Value>) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(256);
    write_object(m, &mut out, 1, None)?;
    Ok(out)
}

/// The canonical form as a `String`.
pub fn to_string(v: &Value) -> Result<String> {
    // Only valid UTF-8 is ever written.
    String::from_utf8(to_vec(v)?).map_err(|e| Error::Json(e.to_string()))
}

/// Re-encodes strictly parsed `input` and checks it was already canonical.
pub fn is_canonical(input: &[u8], max_len: usize) -> Result<bool> {
    let v = parse(input, max_len)?;
    Ok(to_vec(&v)? == input)
}

fn check_int(n: &Number) -> Result<()> {
    let ok = match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => (-CANON_MAX_SAFE_INT..=CANON_MAX_SAFE_INT).contains(&i),
        (None, Some(u)) => u <= CANON_MAX_SAFE_INT as u64,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::Json(
            "numbers must be integers within ±(2^53−1)".into(),
        ))
    }
}

fn write_value(v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<()> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            check_int(n)?;
            out.extend_from_slice(n.to_string().as_bytes());
        }
        Value::String(s) => write_string(s, out),
        Value::Array(a) => {
            if depth > CANON_MAX_DEPTH {
                return Err(Error::Json("nesting too deep".into()));
            }
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(x, out, depth + 1)?;
            }
            out.push(b']');
        }
        Value::Object(m) => write_object(m, out, depth, None)?,
    }
    Ok(())
}

fn write_object(
    m: &Map<String, Value>,
    out: &mut Vec<u8>,
    depth: usize,
    skip: Option<&str>,
) -> Result<()> {
    if depth > CANON_MAX_DEPTH {
        return Err(Error::Json("nesting too deep".into()));
    }
    let mut keys: Vec<&String> = m.keys().filter(|k| Some(k.as_str()) != skip).collect();
    // RFC 8785 §3.2.3: sort by UTF-16 code units, not code points.
    keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    out.push(b'{');
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(k, out);
        out.push(b':');
        write_value(&m[k], out, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}

/// RFC 8785 §3.2.2.2: escape only `"`, `\` and C0 controls. Runs that need
/// no escaping are copied whole.
fn write_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut i = 0;
    while i < bytes.len() {
        let run = plain_run(&bytes[i..]);
        out.extend_from_slice(&bytes[i..i + run]);
        i += run;
        let Some(&b) = bytes.get(i) else { break };
        i += 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x09 => out.extend_from_slice(b"\\t"),
            0x0a => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x0d => out.extend_from_slice(b"\\r"),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
        }
    }
    out.push(b'"');
}

/// Length of the leading run of bytes a JSON string holds as they are (no
/// `"`, `\` or C0 control). Checked 32 bytes at a time without early exit,
/// which the compiler vectorizes: base64 ciphertext is most of an envelope.
fn plain_run(bytes: &[u8]) -> usize {
    let special = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    let mut n = 0;
    for chunk in bytes.chunks_exact(32) {
        if chunk.iter().fold(false, |acc, &b| acc | special(b)) {
            break;
        }
        n += 32;
    }
    n + bytes[n..]
        .iter()
        .position(|&b| special(b))
        .unwrap_or(bytes.len() - n)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        Error::Json(format!("{what} at byte {}", self.i))
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn lit(&mut self, word: &[u8], v: Value) -> Result<Value> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        match self.peek() {
            None => Err(self.err("unexpected end")),
            Some(b'n') => self.lit(b"null", Value::Null),
            Some(b't') => self.lit(b"true", Value::Bool(true)),
            Some(b'f') => self.lit(b"false", Value::Bool(false)),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => {
                if depth > CANON_MAX_DEPTH {
                    return Err(self.err("nesting too deep"));
                }
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(Value::Array(a));
                }
                loop {
                    self.ws();
                    a.push(self.value(depth + 1)?);
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Array(a));
                        }
                        _ => return Err(self.err("expected , or ]")),
                    }
                }
            }
            Some(b'{') => {
                if depth > CANON_MAX_DEPTH {
                    return Err(self.err("nesting too deep"));
                }
                self.i += 1;
                let mut m = Map::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(Value::Object(m));
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected member name"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if self.peek() != Some(b':') {
                        return Err(self.err("expected :"));
                    }
                    self.i += 1;
                    self.ws();
                    let v = self.value(depth + 1)?;
                    if m.contains_key(&k) {
                        return Err(self.err("duplicate member name"));
                    }
                    m.insert(k, v);
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Value::Object(m));
                        }
                        _ => return Err(self.err("expected , or }")),
                    }
                }
            }
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn number(&mut self) -> Result<Value> {
        let start = self.i;
        let neg = self.peek() == Some(b'-');
        if neg {
            self.i += 1;
        }
        let digits_start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        let digits = &self.s[digits_start..self.i];
        if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
            return Err(self.err("invalid number"));
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return Err(self.err("numbers must be integers"));
        }
        // At most 16 digits can be within 2^53; more is refused without parsing.
        if digits.len() > 16 {
            return Err(self.err("integer out of range"));
        }
        let text =
            std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.err("invalid number"))?;
        let n: i64 = text.parse().map_err(|_| self.err("invalid number"))?;
        if !(-CANON_MAX_SAFE_INT..=CANON_MAX_SAFE_INT).contains(&n) {
            return Err(self.err("integer out of range"));
        }
        // `-0` is the integer 0 (RFC 8785 writes it `0`).
        Ok(Value::Number(Number::from(n)))
    }

    fn hex4(&mut self) -> Result<u16> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        let mut v = 0u16;
        for &c in h {
            let d = (c as char)
                .to_digit(16)
                .ok_or_else(|| self.err("bad \\u escape"))?;
            v = (v << 4) | d as u16;
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String> {
        self.i += 1; // opening quote
        let mut out = String::new();
        loop {
            // Copy a run of plain bytes, validating UTF-8 (which refuses raw surrogates).
            let run_start = self.i;
            self.i += plain_run(&self.s[self.i..]);
            if self.i > run_start {
                let run = std::str::from_utf8(&self.s[run_start..self.i])
                    .map_err(|_| Error::Json(format!("invalid UTF-8 at byte {run_start}")))?;
                out.push_str(run);
            }
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let e = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = match hi {
                                0xd800..=0xdbff => {
                                    if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                        return Err(self.err("lone surrogate"));
                                    }
                                    self.i += 2;
                                    let lo = self.hex4()?;
                                    if !(0xdc00..=0xdfff).contains(&lo) {
                                        return Err(self.err("lone surrogate"));
                                    }
                                    0x10000
                                        + (((hi as u32) - 0xd800) << 10)
                                        + ((lo as u32) - 0xdc00)
                                }
                                0xdc00..=0xdfff => return Err(self.err("lone surrogate")),
                                _ => hi as u32,
                            };
                            out.push(char::from_u32(c).ok_or_else(|| self.err("bad escape"))?);
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> Result<String> {
        to_string(&parse_str(s, 1 << 20)?)
    }

    #[test]
    fn sorts_by_utf16_code_units() {
        // U+E000 is above the surrogates in UTF-16 but below U+1F600 in code points.
        let got = canon(r#"{"\ud83d\ude00":1,"\ue000":2,"a":3,"\u20ac":4}"#).unwrap();
        assert_eq!(
            got,
            "{\"a\":3,\"\u{20ac}\":4,\"\u{1f600}\":1,\"\u{e000}\":2}"
        );
    }

    #[test]
    fn rfc8785_string_escapes() {
        let got = canon(r#"["\u0001\b\t\n\f\r\"\\\/\u007f\u2028é"]"#).unwrap();
        assert_eq!(got, "[\"\\u0001\\b\\t\\n\\f\\r\\\"\\\\/\u{7f}\u{2028}é\"]");
    }

    #[test]
    fn whitespace_removed_and_members_sorted() {
        assert_eq!(
            canon(" { \"b\" : [ 1 , -2 ] , \"a\" : null } ").unwrap(),
            r#"{"a":null,"b":[1,-2]}"#
        );
    }

    #[test]
    fn refuses_non_integers_and_out_of_range() {
        for bad in [
            "1.0",
            "1e2",
            "1E2",
            "[0.5]",
            "9007199254740992",
            "-9007199254740992",
            "01",
            "-",
            "+1",
        ] {
            assert!(canon(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(canon("9007199254740991").unwrap(), "9007199254740991");
        assert_eq!(canon("-9007199254740991").unwrap(), "-9007199254740991");
        assert_eq!(canon("-0").unwrap(), "0");
    }

    #[test]
    fn refuses_duplicates_surrogates_and_garbage() {
        for bad in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            "\"a\u{1}\"",
            "[1,]",
            "{\"a\":1,}",
            "[1] x",
            "",
            "nul",
            "\u{feff}{}",
        ] {
            assert!(canon(bad).is_err(), "{bad:?} accepted");
        }
        assert!(
            parse(b"\"\xed\xa0\x80\"", 100).is_err(),
            "raw surrogate accepted"
        );
        assert!(parse(b"\"\xff\"", 100).is_err(), "invalid UTF-8 accepted");
        assert_eq!(canon(r#""\ud83d\ude00""#).unwrap(), "\"😀\"");
    }

    #[test]
    fn depth_limit_is_32() {
        let ok = format!("{}{}", "[".repeat(32), "]".repeat(32));
        assert!(canon(&ok).is_ok());
        let bad = format!("{}{}", "[".repeat(33), "]".repeat(33));
        assert!(canon(&bad).is_err());
        let mut v = Value::Null;
        for _ in 0..33 {
            v = Value::Array(vec![v]);
        }
        assert!(
            to_vec(&v).is_err(),
            "serializer must refuse what the parser refuses"
        );
    }

    #[test]
    fn size_limit_checked_first() {
        assert!(matches!(parse(b"[1,2,3]", 6), Err(Error::TooLarge { .. })));
        assert!(parse(b"[1,2,3]", 7).is_ok());
    }

    #[test]
    fn serializer_refuses_floats() {
        assert!(to_vec(&serde_json::json!({"a": 1.5})).is_err());
        assert!(to_vec(&serde_json::json!(u64::MAX)).is_err());
    }

    #[test]
    fn marking_removes_exactly_one_member() {
        for v in [
            serde_json::json!({"a": 1, "sig": "x", "z": [1]}),
            serde_json::json!({"sig": "x", "z": 2}),
            serde_json::json!({"a": 1, "sig": "x"}),
            serde_json::json!({"sig": "x"}),
            serde_json::json!({"a": 1}),
        ] {
            let m = v.as_object().unwrap();
            let (full, range) = to_vec_marking(m, "sig").unwrap();
            assert_eq!(full, to_vec(&v).unwrap());
            let mut without = full.clone();
            if let Some(r) = range {
                without.drain(r);
            }
            assert_eq!(without, to_vec_without(m, "sig").unwrap(), "{v}");
        }
    }

    #[test]
    fn canonical_check() {
        assert!(is_canonical(br#"{"a":1,"b":2}"#, 100).unwrap());
        assert!(!is_canonical(br#"{"b":2,"a":1}"#, 100).unwrap());
    }
}
