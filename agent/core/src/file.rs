//! Files (§7.7): the files extension's FilePart, validated strictly before
//! the task engine sees it (§7.7 "In tasks"); the blob encryption
//! (AES-256-GCM, a fresh key and nonce per file, associated data
//! `rdv1/blob`); and the `rdv/transfer` messages of a direct transfer.
//! Pure: the fetcher is `rdv-agent`'s `fetch.rs`; randomness is passed in.
//!
//! A FilePart is either inline (`file.bytes`, at most 16 KiB) or a
//! reference: `metadata[<files URI>]` with at least `sha256` and `size`,
//! so nothing is ever fetched without a hash to check. The kept form
//! ([`FilePart`]) has the display name and type sanitized (§5.6 rule 5)
//! and every other extension's metadata dropped.

use std::fmt;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use rdv_proto::consts::{
    A2A_INLINE_FILE_MAX_BYTES, DIRECT_TRANSFER_MAC_KEY_INFO, EXT_FILES, FILES_BLOB_AAD,
    FILES_ENC_ALG, FILES_KEY_LEN, FILES_MAX_MIRRORS, FILES_MAX_P2P, FILES_MIME_PART_MAX_CHARS,
    FILES_NAME_MAX_CHARS, FILES_NONCE_LEN, FILES_TAG_LEN, FILES_URL_MAX_CHARS,
    TRANSFER_MAX_DATA_BYTES, TRANSFER_MAX_DEPTH, TRANSFER_MAX_MESSAGES, TRANSFER_MAX_PROTOCOLS,
    TRANSFER_REASON_MAX_CHARS, TRANSFER_TYPE,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

use rdv_proto::AgentId;

use crate::a2a;
use crate::agent::{Agent, Ctx};
use crate::event::Event;
use crate::record::Table;

/// The keys of the files metadata, of `enc` and of `file` (§7.7: any
/// other is refused).
pub const FILES_META_KEYS: [&str; 6] = ["sha256", "size", "enc", "mirrors", "p2p", "expires"];
pub const FILES_ENC_KEYS: [&str; 4] = ["alg", "key", "nonce", "plain_sha256"];
pub const FILE_KEYS: [&str; 4] = ["bytes", "uri", "mimeType", "name"];

/// What is wrong with a URL (§7.7: at most 2,048 characters, https, a
/// host, no userinfo).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("over {FILES_URL_MAX_CHARS} characters")]
    TooLong,
    #[error("not a URL")]
    NotUrl,
    #[error("not https")]
    NotHttps,
    #[error("no host")]
    NoHost,
    #[error("userinfo in the URL")]
    Userinfo,
}

/// Why a file part, a fetched file or a transfer message is refused.
/// Never carries a key; peer-written keys are bounded and cleaned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// §7.7: neither inline bytes nor the files metadata (sha256 and size).
    #[error("a file part with neither inline bytes nor sha256 and size (§7.7)")]
    NoHash,
    /// A reference with nowhere to get the bytes from.
    #[error("a file reference with no uri, mirror or p2p offer")]
    NoSource,
    #[error("a file part with both bytes and uri")]
    BytesAndUri,
    #[error("inline bytes are not base64")]
    BadBase64,
    #[error("inline bytes over {A2A_INLINE_FILE_MAX_BYTES} bytes")]
    InlineTooLarge,
    /// §7.7: unknown keys in the files metadata, in enc or in file.
    #[error("an unknown key {key:?} in {at}")]
    UnknownKey { at: &'static str, key: String },
    /// A field missing or of the wrong shape.
    #[error("{field}: {why}")]
    BadField {
        field: &'static str,
        why: &'static str,
    },
    #[error("{field}: {why}")]
    BadUrl { field: &'static str, why: UrlError },
    /// §7.7: mimeType is a bare type/subtype.
    #[error("mimeType is not a bare type/subtype")]
    BadMimeType,
    /// The part's tasks/v1 message does not list the files URI (§7.7).
    #[error("file parts without the files extension listed ({EXT_FILES})")]
    NotListed,
    /// Inline bytes whose files metadata names another size or hash.
    #[error("inline bytes do not match their sha256 and size")]
    InlineMismatch,
    /// §7.7: the bytes got are not `size` long.
    #[error("the file is not the size its sender stated")]
    SizeMismatch,
    /// §7.7: sha256 of the bytes got does not match (checked first).
    #[error("the file does not match its sha256")]
    HashMismatch,
    /// AES-256-GCM refused the ciphertext (wrong key, nonce or tag).
    #[error("the file does not decrypt")]
    Decrypt,
    /// §7.7: the plaintext does not match plain_sha256 (checked after).
    #[error("the decrypted file does not match its plain_sha256")]
    PlainHashMismatch,
    #[error("encrypting the file failed")]
    Encrypt,
}

fn bad(field: &'static str, why: &'static str) -> FileError {
    FileError::BadField { field, why }
}

fn unknown(at: &'static str, k: &str) -> FileError {
    FileError::UnknownKey {
        at,
        key: crate::peer_text::bounded(&crate::peer_text::terminal_safe(k), 64),
    }
}

fn only_keys(m: &Map<String, Value>, at: &'static str, allowed: &[&str]) -> Result<(), FileError> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(unknown(at, k)),
        None => Ok(()),
    }
}

/// 64 lowercase hex characters (§7.7 sha256, plain_sha256).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// §7.7: a URL a peer gave: at most 2,048 characters, https, with a host
/// and no userinfo; no whitespace or control characters anywhere.
pub fn check_url(s: &str) -> Result<url::Url, UrlError> {
    if s.chars().count() > FILES_URL_MAX_CHARS {
        return Err(UrlError::TooLong);
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::NotUrl);
    }
    let u = url::Url::parse(s).map_err(|_| UrlError::NotUrl)?;
    if u.scheme() != "https" {
        return Err(UrlError::NotHttps);
    }
    // As written, not only as the parser mends it: `https:///h` and
    // `https:\\h` have no host of their own.
    let after = s.get("https://".len()..).unwrap_or("");
    if !s
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("https://"))
        || after.starts_with(['/', '\\'])
        || u.host_str().is_none_or(str::is_empty)
    {
        return Err(UrlError::NoHost);
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(UrlError::Userinfo);
    }
    Ok(u)
}

fn restricted_name(s: &str) -> bool {
    // RFC 6838 §4.2 restricted-name.
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphanumeric())
        && s.chars().count() <= FILES_MIME_PART_MAX_CHARS
        && c.all(|x| x.is_ascii_alphanumeric() || "!#$&-^_.+".contains(x))
}

/// §7.7: mimeType is a bare `type/subtype` (no parameters), kept lowercase.
pub fn check_mime_type(s: &str) -> Result<String, FileError> {
    let (t, st) = s.split_once('/').ok_or(FileError::BadMimeType)?;
    if restricted_name(t) && restricted_name(st) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(FileError::BadMimeType)
    }
}

/// §5.6 rule 5: a file name is a display hint: no path separators, no
/// control, bidi or invisible characters, no leading dots, at most 255
/// characters. `None` when nothing is left.
pub fn sanitize_name(raw: &str) -> Option<String> {
    let cleaned: String = raw
        .chars()
        .map(|c| {
            if crate::peer_text::is_unsafe(c) || matches!(c, '/' | '\\' | ':') {
                '_'
            } else {
                c
            }
        })
        .take(FILES_NAME_MAX_CHARS)
        .collect();
    let trimmed = cleaned
        .trim()
        .trim_start_matches(|c: char| c == '.' || c.is_whitespace())
        .trim_end();
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

/// A `<name>/<version>` transfer protocol name (§7.7 p2p, rdv/transfer).
pub fn is_protocol_name(s: &str) -> bool {
    let Some((n, v)) = s.split_once('/') else {
        return false;
    };
    let tok = |x: &str, max: usize| {
        !x.is_empty()
            && x.len() <= max
            && x.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    tok(n, 48) && tok(v, 16)
}

/// The encryption of a file (§7.7 `enc`). The key is a secret: `Debug`
/// never prints it and it is wiped on drop.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enc {
    /// base64 of 32 bytes.
    key: String,
    /// base64 of 12 bytes.
    nonce: String,
    pub plain_sha256: String,
}

impl fmt::Debug for Enc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Enc")
            .field("key", &"[redacted]")
            .field("nonce", &self.nonce)
            .field("plain_sha256", &self.plain_sha256)
            .finish()
    }
}

impl Drop for Enc {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

impl Enc {
    fn key_bytes(&self) -> Option<zeroize::Zeroizing<Vec<u8>>> {
        let k = zeroize::Zeroizing::new(B64.decode(&self.key).ok()?);
        (k.len() == FILES_KEY_LEN).then_some(k)
    }

    fn nonce_bytes(&self) -> Option<Vec<u8>> {
        B64.decode(&self.nonce)
            .ok()
            .filter(|n| n.len() == FILES_NONCE_LEN)
    }

    /// As it goes inside the envelope (§7.7): the key included.
    fn to_wire(&self) -> Value {
        json!({"alg": FILES_ENC_ALG, "key": self.key, "nonce": self.nonce, "plain_sha256": self.plain_sha256})
    }

    fn parse(v: &Value) -> Result<Enc, FileError> {
        let m = v.as_object().ok_or(bad("enc", "not an object"))?;
        only_keys(m, "enc", &FILES_ENC_KEYS)?;
        if m.get("alg").and_then(Value::as_str) != Some(FILES_ENC_ALG) {
            return Err(bad("enc.alg", "not aes256gcm"));
        }
        let key = m
            .get("key")
            .and_then(Value::as_str)
            .ok_or(bad("enc.key", "missing"))?;
        let nonce = m
            .get("nonce")
            .and_then(Value::as_str)
            .ok_or(bad("enc.nonce", "missing"))?;
        let plain = m
            .get("plain_sha256")
            .and_then(Value::as_str)
            .ok_or(bad("enc.plain_sha256", "missing"))?;
        if !is_sha256_hex(plain) {
            return Err(bad("enc.plain_sha256", "not 64 lowercase hex characters"));
        }
        let e = Enc {
            key: key.to_string(),
            nonce: nonce.to_string(),
            plain_sha256: plain.to_string(),
        };
        if key.len() > 64 || e.key_bytes().is_none() {
            return Err(bad("enc.key", "not base64 of 32 bytes"));
        }
        if nonce.len() > 64 || e.nonce_bytes().is_none() {
            return Err(bad("enc.nonce", "not base64 of 12 bytes"));
        }
        Ok(e)
    }
}

/// The files extension's metadata of one part (§7.7), validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileMeta {
    /// Hex SHA-256 of exactly the bytes the receiver gets (the ciphertext
    /// when `enc` is present).
    pub sha256: String,
    /// Their length.
    pub size: u64,
    pub enc: Option<Enc>,
    pub mirrors: Vec<String>,
    pub p2p: Vec<String>,
    pub expires: Option<String>,
}

impl FileMeta {
    fn parse(v: &Value) -> Result<FileMeta, FileError> {
        let m = v
            .as_object()
            .ok_or(bad("files metadata", "not an object"))?;
        only_keys(m, "the files metadata", &FILES_META_KEYS)?;
        let sha256 = match m.get("sha256") {
            None => return Err(FileError::NoHash),
            Some(Value::String(s)) if is_sha256_hex(s) => s.clone(),
            Some(_) => return Err(bad("sha256", "not 64 lowercase hex characters")),
        };
        let size = match m.get("size") {
            None => return Err(FileError::NoHash),
            Some(n) => n
                .as_u64()
                .ok_or(bad("size", "not a non-negative integer"))?,
        };
        let enc = m.get("enc").map(Enc::parse).transpose()?;
        let list = |k: &'static str, max: usize| -> Result<Vec<String>, FileError> {
            match m.get(k) {
                None => Ok(Vec::new()),
                Some(Value::Array(a)) if a.len() <= max => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or(bad(k, "holds a non-string"))
                    })
                    .collect(),
                Some(Value::Array(_)) => Err(bad(k, "lists more than 8")),
                Some(_) => Err(bad(k, "not an array")),
            }
        };
        let mirrors = list("mirrors", FILES_MAX_MIRRORS)?;
        for u in &mirrors {
            check_url(u).map_err(|why| FileError::BadUrl {
                field: "mirrors",
                why,
            })?;
        }
        let p2p = list("p2p", FILES_MAX_P2P)?;
        if !p2p.iter().all(|p| is_protocol_name(p)) {
            return Err(bad("p2p", "a name that is not <name>/<version>"));
        }
        let expires = match m.get("expires") {
            None => None,
            Some(Value::String(s)) if a2a::parse_offset_time(s).is_some() => Some(s.clone()),
            Some(_) => return Err(bad("expires", "not an RFC 3339 time")),
        };
        Ok(FileMeta {
            sha256,
            size,
            enc,
            mirrors,
            p2p,
            expires,
        })
    }

    fn to_wire(&self) -> Value {
        let mut m = Map::new();
        m.insert("sha256".into(), json!(self.sha256));
        m.insert("size".into(), json!(self.size));
        if let Some(e) = &self.enc {
            m.insert("enc".into(), e.to_wire());
        }
        if !self.mirrors.is_empty() {
            m.insert("mirrors".into(), json!(self.mirrors));
        }
        if !self.p2p.is_empty() {
            m.insert("p2p".into(), json!(self.p2p));
        }
        if let Some(x) = &self.expires {
            m.insert("expires".into(), json!(x));
        }
        Value::Object(m)
    }
}

/// A validated FilePart in its kept form (§7.7 "In tasks").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePart {
    /// Sanitized display hint (§5.6 rule 5).
    pub name: Option<String>,
    /// A bare type/subtype, lowercase; a display hint.
    pub mime_type: Option<String>,
    /// Inline bytes, base64 as sent (at most 16 KiB decoded).
    pub bytes: Option<String>,
    pub uri: Option<String>,
    pub meta: Option<FileMeta>,
}

/// §7.7: validates one A2A FilePart (its `file` and its part metadata).
/// Other extensions' metadata is dropped from the kept form.
pub fn check_part(
    file: &a2a::FileContent,
    metadata: Option<&Map<String, Value>>,
) -> Result<FilePart, FileError> {
    if file.bytes.is_some() && file.uri.is_some() {
        return Err(FileError::BytesAndUri);
    }
    let inline = match &file.bytes {
        None => None,
        Some(b) => {
            if b.len() > A2A_INLINE_FILE_MAX_BYTES.div_ceil(3) * 4 {
                return Err(FileError::InlineTooLarge);
            }
            let raw = B64.decode(b).map_err(|_| FileError::BadBase64)?;
            if raw.len() > A2A_INLINE_FILE_MAX_BYTES {
                return Err(FileError::InlineTooLarge);
            }
            Some(raw)
        }
    };
    if let Some(u) = &file.uri {
        check_url(u).map_err(|why| FileError::BadUrl { field: "uri", why })?;
    }
    let meta = match metadata.and_then(|m| m.get(EXT_FILES)) {
        None => None,
        Some(v) => Some(FileMeta::parse(v)?),
    };
    match (&inline, &meta) {
        (None, None) => return Err(FileError::NoHash),
        (Some(raw), Some(m)) => {
            // The bytes are here: they must be what the metadata says.
            if m.size != raw.len() as u64 || m.sha256 != sha256_hex(raw) {
                return Err(FileError::InlineMismatch);
            }
        }
        (None, Some(m)) => {
            if file.uri.is_none() && m.mirrors.is_empty() && m.p2p.is_empty() {
                return Err(FileError::NoSource);
            }
        }
        (Some(_), None) => {}
    }
    let mime_type = file.mime_type.as_deref().map(check_mime_type).transpose()?;
    Ok(FilePart {
        name: file.name.as_deref().and_then(sanitize_name),
        mime_type,
        bytes: file.bytes.clone(),
        uri: file.uri.clone(),
        meta,
    })
}

fn opt_string(m: &Map<String, Value>, k: &'static str) -> Result<Option<String>, FileError> {
    match m.get(k) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(k, "not a string")),
    }
}

/// §7.7: a FilePart as JSON (`{"kind": "file", "file": {…}, "metadata"?}`),
/// read strictly (unknown keys in `file` refused): the kept parts of an
/// artifact, a fuzz target, a test.
pub fn parse_part_value(v: &Value) -> Result<FilePart, FileError> {
    let m = v.as_object().ok_or(bad("part", "not an object"))?;
    only_keys(m, "file part", &["kind", "file", "metadata"])?;
    if m.get("kind").and_then(Value::as_str) != Some("file") {
        return Err(bad("part.kind", "not \"file\""));
    }
    let f = m
        .get("file")
        .and_then(Value::as_object)
        .ok_or(bad("file", "missing or not an object"))?;
    only_keys(f, "file", &FILE_KEYS)?;
    let content = a2a::FileContent {
        bytes: opt_string(f, "bytes")?,
        uri: opt_string(f, "uri")?,
        mime_type: opt_string(f, "mimeType")?,
        name: opt_string(f, "name")?,
    };
    let md = match m.get("metadata") {
        None => None,
        Some(Value::Object(o)) => Some(o),
        Some(_) => return Err(bad("metadata", "not an object")),
    };
    check_part(&content, md)
}

impl FilePart {
    /// Inline bytes, decoded (validated when kept).
    pub fn inline_bytes(&self) -> Option<Vec<u8>> {
        self.bytes.as_ref().and_then(|b| B64.decode(b).ok())
    }

    /// The sha256 the gates bind to (§5.5): the metadata's, or the inline
    /// bytes' own.
    pub fn sha256(&self) -> String {
        match (&self.meta, self.inline_bytes()) {
            (Some(m), _) => m.sha256.clone(),
            (None, Some(b)) => sha256_hex(&b),
            (None, None) => String::new(),
        }
    }

    /// The length of the bytes the receiver gets.
    pub fn size(&self) -> u64 {
        match (&self.meta, self.inline_bytes()) {
            (Some(m), _) => m.size,
            (None, Some(b)) => b.len() as u64,
            (None, None) => 0,
        }
    }

    pub fn encrypted(&self) -> bool {
        self.meta.as_ref().is_some_and(|m| m.enc.is_some())
    }

    /// The URLs to fetch from, in order: uri, then mirrors.
    pub fn urls(&self) -> Vec<String> {
        let mut v: Vec<String> = self.uri.iter().cloned().collect();
        if let Some(m) = &self.meta {
            v.extend(m.mirrors.iter().cloned());
        }
        v
    }

    /// The A2A part as it is kept and sent: only the files metadata.
    pub fn to_part(&self) -> a2a::Part {
        let metadata = self.meta.as_ref().map(|m| {
            let mut o = Map::new();
            o.insert(EXT_FILES.into(), m.to_wire());
            o
        });
        a2a::Part::File {
            file: a2a::FileContent {
                bytes: self.bytes.clone(),
                uri: self.uri.clone(),
                mime_type: self.mime_type.clone(),
                name: self.name.clone(),
            },
            metadata,
        }
    }

    pub fn to_value(&self) -> Value {
        self.to_part().to_value()
    }

    /// What the human is shown (§7.7: name, type, size, sha256, whether it
    /// is encrypted, the URLs): never the key, never the bytes.
    pub fn shown(&self) -> Value {
        let m = self.meta.as_ref();
        json!({
            "name": self.name,
            "mime_type": self.mime_type,
            "size": self.size(),
            "sha256": self.sha256(),
            "inline": self.bytes.is_some(),
            "encrypted": self.encrypted(),
            "uri": self.uri,
            "mirrors": m.map(|m| m.mirrors.clone()).unwrap_or_default(),
            "p2p": m.map(|m| m.p2p.clone()).unwrap_or_default(),
            "expires": m.and_then(|m| m.expires.clone()),
        })
    }

    /// §7.7: the bytes got (inline or fetched) checked and opened: size and
    /// sha256 first, then decryption and plain_sha256.
    pub fn open(&self, got: &[u8]) -> Result<Vec<u8>, FileError> {
        match &self.meta {
            Some(m) => open_blob(got, m),
            None => {
                // Inline without metadata: the envelope carried it.
                match self.inline_bytes() {
                    Some(b) if b == got => Ok(b),
                    _ => Err(FileError::HashMismatch),
                }
            }
        }
    }
}

/// An inline file of ours (§7.7: up to 16 KiB), plaintext inside the
/// envelope.
pub fn inline_part(
    bytes: &[u8],
    name: Option<&str>,
    mime_type: Option<&str>,
) -> Result<FilePart, FileError> {
    if bytes.len() > A2A_INLINE_FILE_MAX_BYTES {
        return Err(FileError::InlineTooLarge);
    }
    Ok(FilePart {
        name: name.and_then(sanitize_name),
        mime_type: mime_type.map(check_mime_type).transpose()?,
        bytes: Some(B64.encode(bytes)),
        uri: None,
        meta: None,
    })
}

/// A reference of ours (§7.7) to an encrypted copy the owner uploaded.
pub fn reference_part(
    meta: FileMeta,
    uri: &str,
    name: Option<&str>,
    mime_type: Option<&str>,
) -> Result<FilePart, FileError> {
    check_url(uri).map_err(|why| FileError::BadUrl { field: "uri", why })?;
    Ok(FilePart {
        name: name.and_then(sanitize_name),
        mime_type: mime_type.map(check_mime_type).transpose()?,
        bytes: None,
        uri: Some(uri.to_string()),
        meta: Some(meta),
    })
}

// ---- the blob encryption (§7.7) ---------------------------------------------

/// §7.7: encrypts a file under a fresh random key and nonce (never
/// reused), associated data `rdv1/blob`, the 16-byte tag appended.
/// Returns the ciphertext to upload and the metadata whose key travels
/// only inside the envelope.
pub fn seal_blob(
    plain: &[u8],
    rng: &mut dyn rand_core::CryptoRngCore,
) -> Result<(Vec<u8>, FileMeta), FileError> {
    let mut key = zeroize::Zeroizing::new([0u8; FILES_KEY_LEN]);
    rng.fill_bytes(key.as_mut());
    let mut nonce = [0u8; FILES_NONCE_LEN];
    rng.fill_bytes(&mut nonce);
    let mut buf = Vec::with_capacity(plain.len() + FILES_TAG_LEN);
    buf.extend_from_slice(plain);
    Aes256Gcm::new(key.as_ref().into())
        .encrypt_in_place(Nonce::from_slice(&nonce), FILES_BLOB_AAD, &mut buf)
        .map_err(|_| FileError::Encrypt)?;
    let meta = FileMeta {
        sha256: sha256_hex(&buf),
        size: buf.len() as u64,
        enc: Some(Enc {
            key: B64.encode(key.as_ref()),
            nonce: B64.encode(nonce),
            plain_sha256: sha256_hex(plain),
        }),
        mirrors: Vec::new(),
        p2p: Vec::new(),
        expires: None,
    };
    Ok((buf, meta))
}

/// §7.7: checks the bytes got against `meta` (size and sha256 first, from
/// any source), then decrypts (AES-256-GCM, `rdv1/blob`) and checks
/// plain_sha256. Returns the plaintext.
pub fn open_blob(got: &[u8], meta: &FileMeta) -> Result<Vec<u8>, FileError> {
    if got.len() as u64 != meta.size {
        return Err(FileError::SizeMismatch);
    }
    if sha256_hex(got) != meta.sha256 {
        return Err(FileError::HashMismatch);
    }
    let Some(enc) = &meta.enc else {
        return Ok(got.to_vec());
    };
    let (Some(key), Some(nonce)) = (enc.key_bytes(), enc.nonce_bytes()) else {
        return Err(FileError::Decrypt);
    };
    let mut buf = got.to_vec();
    Aes256Gcm::new(key.as_slice().into())
        .decrypt_in_place(Nonce::from_slice(&nonce), FILES_BLOB_AAD, &mut buf)
        .map_err(|_| FileError::Decrypt)?;
    if sha256_hex(&buf) != enc.plain_sha256 {
        buf.zeroize();
        return Err(FileError::PlainHashMismatch);
    }
    Ok(buf)
}

/// The files of a list of A2A parts, validated (§7.7): `Err` on the first
/// bad one, and when any is present and `extensions` does not list the
/// files URI.
pub fn check_parts(parts: &[a2a::Part], extensions: &[String]) -> Result<Vec<FilePart>, FileError> {
    let mut out = Vec::new();
    for p in parts {
        if let a2a::Part::File { file, metadata } = p {
            out.push(check_part(file, metadata.as_ref())?);
        }
    }
    if !out.is_empty() && !extensions.iter().any(|e| e == EXT_FILES) {
        return Err(FileError::NotListed);
    }
    Ok(out)
}

// ---- direct transfer: rdv/transfer (§7.7) -----------------------------------

/// Why an `rdv/transfer` message is refused (§7.7: each step allows only
/// its own fields; anything else is refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    #[error("an unknown key {key:?} in a transfer {step}")]
    UnknownKey { step: &'static str, key: String },
    #[error("{field}: {why}")]
    BadField {
        field: &'static str,
        why: &'static str,
    },
    #[error("data over {TRANSFER_MAX_DATA_BYTES} bytes as canonical JSON")]
    DataTooLarge,
    #[error("data nested deeper than {TRANSFER_MAX_DEPTH}")]
    DataTooDeep,
}

fn tbad(field: &'static str, why: &'static str) -> TransferError {
    TransferError::BadField { field, why }
}

/// One step of a transfer (§7.7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "step", deny_unknown_fields)]
pub enum TransferStep {
    /// The receiver names the protocols it accepts (1 to 8).
    Propose {
        protocols: Vec<String>,
        data: Option<Value>,
    },
    /// The sender picks one.
    Accept {
        protocol: String,
        data: Option<Value>,
    },
    /// Protocol-specific setup (SDP, ICE candidates): data required.
    Signal {
        data: Value,
    },
    Done,
    /// Optional reason, display only (at most 200 characters).
    Abort {
        reason: Option<String>,
    },
}

impl TransferStep {
    pub fn name(&self) -> &'static str {
        match self {
            TransferStep::Propose { .. } => "propose",
            TransferStep::Accept { .. } => "accept",
            TransferStep::Signal { .. } => "signal",
            TransferStep::Done => "done",
            TransferStep::Abort { .. } => "abort",
        }
    }
}

/// An `rdv/transfer` message (§7.7), validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferMsg {
    /// The file's sha256.
    pub file: String,
    /// The task the file belongs to, when it does.
    pub task: Option<String>,
    /// The transfer's UUID.
    pub transfer: String,
    pub expires: Option<String>,
    pub step: TransferStep,
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// §7.7: `data` is an object of at most 16 KiB as canonical JSON, nested
/// at most 16 deep (the object itself is level 1).
fn check_transfer_data(v: &Value) -> Result<Value, TransferError> {
    if !v.is_object() {
        return Err(tbad("data", "not an object"));
    }
    if depth(v) > TRANSFER_MAX_DEPTH {
        return Err(TransferError::DataTooDeep);
    }
    let n = rdv_proto::canon::to_vec(v)
        .map_err(|_| tbad("data", "no canonical form"))?
        .len();
    if n > TRANSFER_MAX_DATA_BYTES {
        return Err(TransferError::DataTooLarge);
    }
    Ok(v.clone())
}

/// Reads an opened `rdv/transfer` payload strictly (§7.7).
pub fn parse_transfer(v: &Value) -> Result<TransferMsg, TransferError> {
    let m = v.as_object().ok_or(tbad("payload", "not an object"))?;
    if m.get("type").and_then(Value::as_str) != Some(TRANSFER_TYPE) {
        return Err(tbad("type", "not rdv/transfer"));
    }
    let step_name = m
        .get("step")
        .and_then(Value::as_str)
        .ok_or(tbad("step", "missing"))?;
    let (step, own): (&'static str, &[&str]) = match step_name {
        "propose" => ("propose", &["protocols", "data"]),
        "accept" => ("accept", &["protocol", "data"]),
        "signal" => ("signal", &["data"]),
        "done" => ("done", &[]),
        "abort" => ("abort", &["reason"]),
        _ => return Err(tbad("step", "not propose, accept, signal, done or abort")),
    };
    const COMMON: [&str; 6] = ["type", "file", "task", "transfer", "step", "expires"];
    if let Some(k) = m
        .keys()
        .find(|k| !COMMON.contains(&k.as_str()) && !own.contains(&k.as_str()))
    {
        return Err(TransferError::UnknownKey {
            step,
            key: crate::peer_text::bounded(&crate::peer_text::terminal_safe(k), 64),
        });
    }
    let file = match m.get("file").and_then(Value::as_str) {
        Some(f) if is_sha256_hex(f) => f.to_string(),
        _ => return Err(tbad("file", "not a sha256")),
    };
    let transfer = match m.get("transfer").and_then(Value::as_str) {
        Some(t) if a2a::is_uuid(t) => t.to_string(),
        _ => return Err(tbad("transfer", "not a UUID")),
    };
    let task = match m.get("task") {
        None => None,
        Some(Value::String(t)) if a2a::is_uuid(t) => Some(t.clone()),
        Some(_) => return Err(tbad("task", "not a UUID")),
    };
    let expires = match m.get("expires") {
        None => None,
        Some(Value::String(x)) if a2a::parse_offset_time(x).is_some() => Some(x.clone()),
        Some(_) => return Err(tbad("expires", "not an RFC 3339 time")),
    };
    let data = m.get("data").map(check_transfer_data).transpose()?;
    let step = match step {
        "propose" => {
            let a = m
                .get("protocols")
                .and_then(Value::as_array)
                .ok_or(tbad("protocols", "missing or not an array"))?;
            if a.is_empty() || a.len() > TRANSFER_MAX_PROTOCOLS {
                return Err(tbad("protocols", "names 1 to 8 protocols"));
            }
            let protocols = a
                .iter()
                .map(|p| match p.as_str() {
                    Some(s) if is_protocol_name(s) => Ok(s.to_string()),
                    _ => Err(tbad("protocols", "a name that is not <name>/<version>")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            TransferStep::Propose { protocols, data }
        }
        "accept" => match m.get("protocol").and_then(Value::as_str) {
            Some(p) if is_protocol_name(p) => TransferStep::Accept {
                protocol: p.to_string(),
                data,
            },
            _ => return Err(tbad("protocol", "missing or not <name>/<version>")),
        },
        "signal" => TransferStep::Signal {
            data: data.ok_or(tbad("data", "required on signal"))?,
        },
        "done" => TransferStep::Done,
        _ => {
            let reason = match m.get("reason") {
                None => None,
                Some(Value::String(r)) if r.chars().count() <= TRANSFER_REASON_MAX_CHARS => {
                    Some(r.clone())
                }
                Some(_) => return Err(tbad("reason", "not a string of at most 200 characters")),
            };
            TransferStep::Abort { reason }
        }
    };
    Ok(TransferMsg {
        file,
        task,
        transfer,
        expires,
        step,
    })
}

impl TransferMsg {
    /// The payload as it goes out (§7.7).
    pub fn to_payload(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(TRANSFER_TYPE));
        m.insert("file".into(), json!(self.file));
        if let Some(t) = &self.task {
            m.insert("task".into(), json!(t));
        }
        m.insert("transfer".into(), json!(self.transfer));
        m.insert("step".into(), json!(self.step.name()));
        if let Some(x) = &self.expires {
            m.insert("expires".into(), json!(x));
        }
        match &self.step {
            TransferStep::Propose { protocols, data } => {
                m.insert("protocols".into(), json!(protocols));
                if let Some(d) = data {
                    m.insert("data".into(), d.clone());
                }
            }
            TransferStep::Accept { protocol, data } => {
                m.insert("protocol".into(), json!(protocol));
                if let Some(d) = data {
                    m.insert("data".into(), d.clone());
                }
            }
            TransferStep::Signal { data } => {
                m.insert("data".into(), data.clone());
            }
            TransferStep::Done => {}
            TransferStep::Abort { reason } => {
                if let Some(r) = reason {
                    m.insert("reason".into(), json!(r));
                }
            }
        }
        Value::Object(m)
    }

    /// The abort answering this message (§7.7).
    pub fn abort(&self, reason: &str) -> TransferMsg {
        TransferMsg {
            file: self.file.clone(),
            task: self.task.clone(),
            transfer: self.transfer.clone(),
            expires: None,
            step: TransferStep::Abort {
                reason: Some(crate::peer_text::bounded(reason, TRANSFER_REASON_MAX_CHARS)),
            },
        }
    }
}

// ---- the transfer engine and the owner's setting (§7.7) ---------------------

/// The Owner-table key of the direct-transfer setting.
pub const DIRECT_TRANSFER_KEY: &str = "direct_transfer";
/// Transfers kept per peer (our bound): finished ones go first; a propose
/// beyond it while all are open is aborted.
pub const TRANSFER_MAX_PER_PEER: usize = 16;

/// The owner's direct-transfer setting (§7.7): off by default, never
/// changed by a model or a peer. Stored with a MAC under a key derived
/// from the agent's secret key ([`DIRECT_TRANSFER_MAC_KEY_INFO`]): a
/// setting whose MAC does not verify counts as off, and the owner is told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectTransfer {
    pub on: bool,
    #[serde(with = "time::serde::rfc3339")]
    pub since: rdv_proto::time::Instant,
    /// Hex HMAC-SHA256 over canon({on, since}); empty in records written
    /// before it was kept, which therefore count as off.
    #[serde(default)]
    pub mac: String,
}

/// The notice the owner gets when the stored setting does not verify.
pub const DIRECT_TRANSFER_TAMPERED: &str = "the stored direct-transfer setting does not verify \
     (its MAC under this agent's key): it counts as off; if you meant it on, run \
     `rdv file direct-transfer on` at your terminal";

/// The MAC key of the setting: HMAC-SHA256(agent secret key,
/// [`DIRECT_TRANSFER_MAC_KEY_INFO`]).
fn direct_transfer_key(seed: &[u8; 32]) -> Option<Zeroizing<Vec<u8>>> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(seed).ok()?;
    m.update(DIRECT_TRANSFER_MAC_KEY_INFO);
    Some(Zeroizing::new(m.finalize().into_bytes().to_vec()))
}

fn direct_transfer_mac(on: bool, since: rdv_proto::time::Instant, seed: &[u8; 32]) -> String {
    let body = json!({"on": on, "since": rdv_proto::time::format_time(since)});
    let (Ok(bytes), Some(key)) = (rdv_proto::canon::to_vec(&body), direct_transfer_key(seed))
    else {
        return String::new();
    };
    let Ok(mut m) = <Hmac<Sha256> as Mac>::new_from_slice(&key) else {
        return String::new();
    };
    m.update(&bytes);
    hex::encode(m.finalize().into_bytes())
}

/// What the stored setting says once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectTransferSetting {
    /// Never set, or set off.
    Off,
    On,
    /// Its MAC does not verify: counts as off, and the owner is told.
    Tampered,
}

impl DirectTransfer {
    /// The setting as the owner set it, MACed with the agent's key.
    pub fn new(on: bool, since: rdv_proto::time::Instant, seed: &[u8; 32]) -> DirectTransfer {
        DirectTransfer {
            on,
            since,
            mac: direct_transfer_mac(on, since, seed),
        }
    }

    /// Checks the MAC (constant time); a setting that does not verify is
    /// never on.
    pub fn check(&self, seed: &[u8; 32]) -> DirectTransferSetting {
        let want = direct_transfer_mac(self.on, self.since, seed);
        if want.is_empty() || !bool::from(want.as_bytes().ct_eq(self.mac.as_bytes())) {
            return DirectTransferSetting::Tampered;
        }
        if self.on {
            DirectTransferSetting::On
        } else {
            DirectTransferSetting::Off
        }
    }
}

/// Where a transfer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferState {
    /// A peer proposed; shown to the owner.
    Proposed,
    /// Done or aborted: later messages are ignored.
    Finished,
}

/// One transfer a peer proposed to us (we hold the file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfer {
    pub peer: AgentId,
    pub transfer: String,
    pub file: String,
    pub task: Option<String>,
    pub protocols: Vec<String>,
    /// Messages in this transfer, both ways (§7.7: 16).
    pub messages: u32,
    pub state: TransferState,
    #[serde(with = "time::serde::rfc3339")]
    pub created: rdv_proto::time::Instant,
}

/// The record key of a transfer.
pub fn transfer_key(peer: &AgentId, transfer: &str) -> String {
    format!("{peer} {transfer}")
}

/// The owner's file commands (§7.7).
#[derive(Debug, Clone)]
pub enum FileCommand {
    /// Turns the direct-transfer setting on or off. Off aborts every
    /// transfer waiting for the owner.
    DirectTransfer { on: bool },
    /// Whether it is on, and the transfers waiting.
    DirectTransferStatus,
    /// The owner says no to a proposed transfer: it is aborted.
    DeclineTransfer { transfer: String },
}

impl Agent {
    /// Whether the owner turned direct transfer on (§7.7: off by default;
    /// a stored setting whose MAC does not verify is off).
    pub fn direct_transfer_on(&self) -> bool {
        self.direct_transfer_setting() == DirectTransferSetting::On
    }

    /// The owner's setting, its MAC checked.
    pub fn direct_transfer_setting(&self) -> DirectTransferSetting {
        match &self.state.tasks.direct_transfer {
            None => DirectTransferSetting::Off,
            Some(d) => d.check(self.key().seed()),
        }
    }

    fn transfer_event(&self, t: &Transfer, step: &str, reason: Option<&str>) -> Event {
        Event::Transfer {
            step: step.into(),
            peer: t.peer.clone(),
            label: self
                .state
                .contacts
                .get(&t.peer)
                .and_then(|c| c.label.clone()),
            transfer: t.transfer.clone(),
            file: t.file.clone(),
            task: t.task.clone(),
            protocols: t.protocols.clone(),
            reason: reason.map(crate::peer_text::UntrustedPeerText::new),
        }
    }

    fn transfer_put(&mut self, t: Transfer) {
        let k = transfer_key(&t.peer, &t.transfer);
        self.state.tasks.transfers.insert(k.clone(), t);
        self.state.touch(Table::Transfer, k);
    }

    fn transfer_abort(
        &mut self,
        to: &AgentId,
        msg: &TransferMsg,
        reason: &str,
        ctx: &mut Ctx<'_>,
    ) -> crate::error::Result<()> {
        let p = msg.abort(reason).to_payload();
        let routes = self.contact_routes(to);
        self.send_payload(to, &p, routes, ctx)?;
        Ok(())
    }

    /// §7.7: one `rdv/transfer` message from a current contact, in
    /// channel order. We implement no transfer protocol, so we never
    /// propose and never accept: a propose is aborted (setting off) or
    /// shown to the owner (on); any later step but abort is out of order.
    pub(crate) fn on_transfer(
        &mut self,
        from: &AgentId,
        payload: &serde_json::Value,
        ctx: &mut Ctx<'_>,
    ) -> crate::error::Result<()> {
        if self.state.contact(from).is_none() {
            return Ok(());
        }
        // Every transfer message counts towards the grant-wide
        // max_frequency (§5.3), as task messages do: a flood of proposes
        // revokes the contact rather than drawing an abort each.
        if self.task_count_grant_wide(from, ctx)? {
            return Ok(());
        }
        let msg = match parse_transfer(payload) {
            Ok(m) => m,
            Err(e) => {
                self.tell(Event::Dropped {
                    from: Some(from.clone()),
                    reason: format!("an rdv/transfer refused (SPEC §7.7): {e}"),
                });
                return Ok(());
            }
        };
        let key = transfer_key(from, &msg.transfer);
        match self.state.tasks.transfers.get(&key).cloned() {
            // A finished transfer: ignored (§7.7).
            Some(t) if t.state == TransferState::Finished => Ok(()),
            Some(mut t) => {
                t.messages += 1;
                t.state = TransferState::Finished;
                let (step, why) = match &msg.step {
                    TransferStep::Abort { reason } => {
                        self.transfer_put(t.clone());
                        let ev = self.transfer_event(&t, "aborted", reason.as_deref());
                        self.tell(ev);
                        return Ok(());
                    }
                    _ if t.messages > TRANSFER_MAX_MESSAGES => {
                        ("aborted", "more than 16 messages in one transfer")
                    }
                    _ => ("aborted", "a step out of order"),
                };
                t.messages += 1;
                self.transfer_put(t.clone());
                let ev = self.transfer_event(&t, step, Some(why));
                self.tell(ev);
                self.transfer_abort(from, &msg, why, ctx)
            }
            None => {
                let TransferStep::Propose { protocols, .. } = &msg.step else {
                    // A message for an unknown transfer is ignored (§7.7).
                    return Ok(());
                };
                let mut t = Transfer {
                    peer: from.clone(),
                    transfer: msg.transfer.clone(),
                    file: msg.file.clone(),
                    task: msg.task.clone(),
                    protocols: protocols.clone(),
                    messages: 1,
                    state: TransferState::Proposed,
                    created: ctx.now,
                };
                let setting = self.direct_transfer_setting();
                if setting == DirectTransferSetting::Tampered {
                    self.tell(Event::DirectTransfer {
                        on: false,
                        reason: Some(DIRECT_TRANSFER_TAMPERED.into()),
                    });
                }
                if setting != DirectTransferSetting::On {
                    // §7.7: with the setting off, a propose is answered with
                    // abort; nothing is kept.
                    let ev = self.transfer_event(&t, "refused", Some("direct transfer is off"));
                    self.tell(ev);
                    return self.transfer_abort(from, &msg, "direct transfer is off", ctx);
                }
                if !self.transfer_room_for(from) {
                    let why = "too many transfers with this contact";
                    let ev = self.transfer_event(&t, "refused", Some(why));
                    self.tell(ev);
                    return self.transfer_abort(from, &msg, why, ctx);
                }
                // On: shown to the owner, who decides; nothing is accepted
                // automatically and nothing connects.
                let ev = self.transfer_event(&t, "proposed", None);
                self.tell(ev);
                t.state = TransferState::Proposed;
                self.transfer_put(t);
                Ok(())
            }
        }
    }

    /// Room for one more transfer with `peer`: finished ones are dropped
    /// first (oldest first); all open means no room.
    fn transfer_room_for(&mut self, peer: &AgentId) -> bool {
        let mut mine: Vec<(String, TransferState, rdv_proto::time::Instant)> = self
            .state
            .tasks
            .transfers
            .iter()
            .filter(|(_, t)| &t.peer == peer)
            .map(|(k, t)| (k.clone(), t.state, t.created))
            .collect();
        mine.sort_by_key(|(_, _, c)| *c);
        let mut n = mine.len();
        for (k, s, _) in mine {
            if n < TRANSFER_MAX_PER_PEER {
                break;
            }
            if s == TransferState::Finished {
                self.state.tasks.transfers.remove(&k);
                self.state.touch(Table::Transfer, k);
                n -= 1;
            }
        }
        n < TRANSFER_MAX_PER_PEER
    }

    /// The owner's file commands (§7.7).
    pub(crate) fn file_command(
        &mut self,
        c: FileCommand,
        ctx: &mut Ctx<'_>,
    ) -> crate::error::Result<Value> {
        match c {
            FileCommand::DirectTransfer { on } => {
                let seed = *self.key().seed();
                self.state.tasks.direct_transfer = Some(DirectTransfer::new(on, ctx.now, &seed));
                self.state.touch(Table::Owner, DIRECT_TRANSFER_KEY);
                let mut aborted = Vec::new();
                if !on {
                    let open: Vec<Transfer> = self
                        .state
                        .tasks
                        .transfers
                        .values()
                        .filter(|t| t.state == TransferState::Proposed)
                        .cloned()
                        .collect();
                    for t in open {
                        self.transfer_decline(t.clone(), "direct transfer was turned off", ctx)?;
                        aborted.push(t.transfer);
                    }
                }
                Ok(json!({"direct_transfer": on, "aborted": aborted}))
            }
            FileCommand::DirectTransferStatus => {
                let waiting: Vec<Value> = self
                    .state
                    .tasks
                    .transfers
                    .values()
                    .filter(|t| t.state == TransferState::Proposed)
                    .map(|t| {
                        json!({"transfer": t.transfer, "peer": t.peer, "file": t.file,
                            "task": t.task, "protocols": t.protocols})
                    })
                    .collect();
                let setting = self.direct_transfer_setting();
                let mut v = json!({"direct_transfer": setting == DirectTransferSetting::On,
                    "waiting": waiting});
                if setting == DirectTransferSetting::Tampered {
                    v["integrity"] = json!("failed");
                    v["notice"] = json!(DIRECT_TRANSFER_TAMPERED);
                }
                Ok(v)
            }
            FileCommand::DeclineTransfer { transfer } => {
                let Some(t) = self
                    .state
                    .tasks
                    .transfers
                    .values()
                    .find(|t| t.transfer == transfer && t.state == TransferState::Proposed)
                    .cloned()
                else {
                    return Err(crate::error::Error::NotFound(format!(
                        "no transfer {transfer} waits for you"
                    )));
                };
                self.transfer_decline(t, "declined by its owner", ctx)?;
                Ok(json!({"transfer": transfer, "declined": true}))
            }
        }
    }

    fn transfer_decline(
        &mut self,
        mut t: Transfer,
        why: &str,
        ctx: &mut Ctx<'_>,
    ) -> crate::error::Result<()> {
        t.state = TransferState::Finished;
        t.messages += 1;
        self.transfer_put(t.clone());
        let ev = self.transfer_event(&t, "declined", Some(why));
        self.tell(ev);
        let msg = TransferMsg {
            file: t.file.clone(),
            task: t.task.clone(),
            transfer: t.transfer.clone(),
            expires: None,
            step: TransferStep::Abort { reason: None },
        };
        self.transfer_abort(&t.peer, &msg, why, ctx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sha(b: &[u8]) -> String {
        sha256_hex(b)
    }

    fn reference(meta: Value) -> Value {
        json!({"kind": "file",
            "file": {"uri": "https://files.example.com/q4/3f9a", "mimeType": "application/pdf", "name": "q4-plan.pdf"},
            "metadata": {EXT_FILES: meta}})
    }

    fn good_meta() -> Value {
        json!({"sha256": sha(b"x"), "size": 1,
            "enc": {"alg": "aes256gcm", "key": B64.encode([7u8; 32]), "nonce": B64.encode([1u8; 12]), "plain_sha256": sha(b"y")},
            "mirrors": ["https://mirror.example.org/3f9a"], "p2p": ["webrtc-datachannel/1"],
            "expires": "2026-11-01T00:00:00Z"})
    }

    fn with(mut m: Value, k: &str, v: Value) -> Value {
        m[k] = v;
        m
    }

    fn err(v: Value) -> FileError {
        parse_part_value(&v).unwrap_err()
    }

    #[test]
    fn the_spec_example_is_kept_with_other_metadata_dropped() {
        let mut v = reference(good_meta());
        v["metadata"]["https://example.org/other/v1"] = json!({"anything": 1});
        let p = parse_part_value(&v).unwrap();
        assert_eq!(p.name.as_deref(), Some("q4-plan.pdf"));
        assert_eq!(p.sha256(), sha(b"x"));
        assert!(p.encrypted());
        let kept = p.to_value();
        let md = kept["metadata"].as_object().unwrap();
        assert_eq!(md.len(), 1);
        assert!(md.contains_key(EXT_FILES));
        // The kept form reads back to itself.
        assert_eq!(parse_part_value(&kept).unwrap(), p);
    }

    #[test]
    fn a_part_without_bytes_or_hash_is_refused() {
        let v = json!({"kind": "file", "file": {"uri": "https://files.example.com/a"}});
        assert_eq!(err(v), FileError::NoHash);
        let v = reference(json!({"size": 1}));
        assert_eq!(err(v), FileError::NoHash);
        let v = reference(json!({"sha256": sha(b"x")}));
        assert_eq!(err(v), FileError::NoHash);
        // Other extensions' metadata is no hash either.
        let v = json!({"kind": "file", "file": {"uri": "https://files.example.com/a"},
            "metadata": {"https://example.org/other/v1": {"sha256": sha(b"x"), "size": 1}}});
        assert_eq!(err(v), FileError::NoHash);
    }

    #[test]
    fn unknown_keys_in_metadata_enc_and_file_are_refused() {
        let v = reference(with(good_meta(), "extra", json!(1)));
        assert!(
            matches!(err(v), FileError::UnknownKey { at: "the files metadata", ref key } if key == "extra")
        );
        let mut m = good_meta();
        m["enc"]["mode"] = json!("gcm");
        assert!(matches!(
            err(reference(m)),
            FileError::UnknownKey { at: "enc", .. }
        ));
        let mut v = reference(good_meta());
        v["file"]["path"] = json!("/etc/passwd");
        assert!(matches!(err(v), FileError::UnknownKey { at: "file", .. }));
    }

    #[test]
    fn hashes_sizes_and_enc_have_their_shapes() {
        let upper = sha(b"x").to_uppercase();
        assert!(matches!(
            err(reference(with(good_meta(), "sha256", json!(upper)))),
            FileError::BadField {
                field: "sha256",
                ..
            }
        ));
        for size in [json!(-1), json!(1.5), json!("1")] {
            assert!(matches!(
                err(reference(with(good_meta(), "size", size))),
                FileError::BadField { field: "size", .. }
            ));
        }
        let mut m = good_meta();
        m["enc"]["alg"] = json!("aes128gcm");
        assert!(matches!(
            err(reference(m)),
            FileError::BadField {
                field: "enc.alg",
                ..
            }
        ));
        let mut m = good_meta();
        m["enc"]["key"] = json!(B64.encode([7u8; 16]));
        assert!(matches!(
            err(reference(m)),
            FileError::BadField {
                field: "enc.key",
                ..
            }
        ));
        let mut m = good_meta();
        m["enc"]["nonce"] = json!(B64.encode([7u8; 16]));
        assert!(matches!(
            err(reference(m)),
            FileError::BadField {
                field: "enc.nonce",
                ..
            }
        ));
        let mut m = good_meta();
        m["enc"]["plain_sha256"] = json!("00");
        assert!(matches!(
            err(reference(m)),
            FileError::BadField {
                field: "enc.plain_sha256",
                ..
            }
        ));
        assert!(matches!(
            err(reference(with(good_meta(), "expires", json!("next week")))),
            FileError::BadField {
                field: "expires",
                ..
            }
        ));
    }

    #[test]
    fn mirrors_and_p2p_are_bounded_and_shaped() {
        let nine: Vec<String> = (0..9)
            .map(|i| format!("https://m{i}.example.org/a"))
            .collect();
        assert!(matches!(
            err(reference(with(good_meta(), "mirrors", json!(nine)))),
            FileError::BadField {
                field: "mirrors",
                ..
            }
        ));
        let eight: Vec<String> = (0..8)
            .map(|i| format!("https://m{i}.example.org/a"))
            .collect();
        assert!(parse_part_value(&reference(with(good_meta(), "mirrors", json!(eight)))).is_ok());
        assert!(matches!(
            err(reference(with(
                good_meta(),
                "mirrors",
                json!(["http://m.example.org/a"])
            ))),
            FileError::BadUrl {
                field: "mirrors",
                why: UrlError::NotHttps
            }
        ));
        let nine: Vec<String> = (0..9).map(|i| format!("p{i}/1")).collect();
        assert!(matches!(
            err(reference(with(good_meta(), "p2p", json!(nine)))),
            FileError::BadField { field: "p2p", .. }
        ));
        assert!(matches!(
            err(reference(with(good_meta(), "p2p", json!(["webrtc"])))),
            FileError::BadField { field: "p2p", .. }
        ));
    }

    #[test]
    fn urls_are_https_with_a_host_no_userinfo_and_bounded() {
        assert_eq!(
            check_url("http://files.example.com/a").unwrap_err(),
            UrlError::NotHttps
        );
        assert_eq!(
            check_url("file:///etc/passwd").unwrap_err(),
            UrlError::NotHttps
        );
        assert_eq!(
            check_url("https://user:pw@files.example.com/a").unwrap_err(),
            UrlError::Userinfo
        );
        assert_eq!(
            check_url("https://user@files.example.com/a").unwrap_err(),
            UrlError::Userinfo
        );
        assert_eq!(check_url("https:///a").unwrap_err(), UrlError::NoHost);
        assert_eq!(
            check_url("https:\\\\a.example/x").unwrap_err(),
            UrlError::NoHost
        );
        assert_eq!(check_url("https://").unwrap_err(), UrlError::NotUrl);
        assert_eq!(
            check_url("https://a.example/ b").unwrap_err(),
            UrlError::NotUrl
        );
        let long = format!("https://a.example/{}", "x".repeat(FILES_URL_MAX_CHARS));
        assert_eq!(check_url(&long).unwrap_err(), UrlError::TooLong);
        let just = format!("https://a.example/{}", "x".repeat(FILES_URL_MAX_CHARS - 18));
        assert_eq!(just.len(), FILES_URL_MAX_CHARS);
        assert!(check_url(&just).is_ok());
        let mut v = reference(good_meta());
        v["file"]["uri"] = json!("https://u@files.example.com/a");
        assert_eq!(
            err(v),
            FileError::BadUrl {
                field: "uri",
                why: UrlError::Userinfo
            }
        );
    }

    #[test]
    fn mime_types_are_bare_and_names_sanitized() {
        assert_eq!(
            check_mime_type("Application/PDF").unwrap(),
            "application/pdf"
        );
        for bad in [
            "text/html; charset=utf-8",
            "pdf",
            "text/",
            "/x",
            "text/ht ml",
            "a/b/c",
        ] {
            assert_eq!(
                check_mime_type(bad).unwrap_err(),
                FileError::BadMimeType,
                "{bad}"
            );
        }
        let mut v = reference(good_meta());
        v["file"]["mimeType"] = json!("text/plain;x=1");
        assert_eq!(err(v), FileError::BadMimeType);
        assert_eq!(
            sanitize_name("../../etc/passwd").as_deref(),
            Some("_.._etc_passwd")
        );
        assert_eq!(sanitize_name("..\\evil.exe").as_deref(), Some("_evil.exe"));
        assert_eq!(sanitize_name(".bashrc").as_deref(), Some("bashrc"));
        assert_eq!(
            sanitize_name("a\u{202e}fdp.exe").as_deref(),
            Some("a_fdp.exe")
        );
        assert_eq!(sanitize_name("a\nb").as_deref(), Some("a_b"));
        assert_eq!(sanitize_name("..."), None);
        assert_eq!(
            sanitize_name(&"n".repeat(300)).unwrap().chars().count(),
            FILES_NAME_MAX_CHARS
        );
        let mut v = reference(good_meta());
        v["file"]["name"] = json!("../.ssh/authorized_keys");
        assert_eq!(
            parse_part_value(&v).unwrap().name.as_deref(),
            Some("_.ssh_authorized_keys")
        );
    }

    #[test]
    fn inline_bytes_are_bounded_and_match_their_metadata() {
        let ok = json!({"kind": "file", "file": {"bytes": B64.encode([0u8; A2A_INLINE_FILE_MAX_BYTES]), "name": "a.bin"}});
        let p = parse_part_value(&ok).unwrap();
        assert_eq!(p.size(), A2A_INLINE_FILE_MAX_BYTES as u64);
        let over = json!({"kind": "file", "file": {"bytes": B64.encode([0u8; A2A_INLINE_FILE_MAX_BYTES + 1])}});
        assert_eq!(err(over), FileError::InlineTooLarge);
        let notb64 = json!({"kind": "file", "file": {"bytes": "%%%"}});
        assert_eq!(err(notb64), FileError::BadBase64);
        let both = json!({"kind": "file", "file": {"bytes": B64.encode(b"x"), "uri": "https://a.example/x"}});
        assert_eq!(err(both), FileError::BytesAndUri);
        let lying = json!({"kind": "file", "file": {"bytes": B64.encode(b"x")},
            "metadata": {EXT_FILES: {"sha256": sha(b"y"), "size": 1}}});
        assert_eq!(err(lying), FileError::InlineMismatch);
        let honest = json!({"kind": "file", "file": {"bytes": B64.encode(b"x")},
            "metadata": {EXT_FILES: {"sha256": sha(b"x"), "size": 1}}});
        assert!(parse_part_value(&honest).is_ok());
    }

    #[test]
    fn a_reference_needs_somewhere_to_get_it() {
        let v = json!({"kind": "file", "file": {"name": "a"},
            "metadata": {EXT_FILES: {"sha256": sha(b"x"), "size": 1}}});
        assert_eq!(err(v), FileError::NoSource);
        let v = json!({"kind": "file", "file": {"name": "a"},
            "metadata": {EXT_FILES: {"sha256": sha(b"x"), "size": 1, "p2p": ["webrtc-datachannel/1"]}}});
        assert!(parse_part_value(&v).is_ok());
    }

    #[test]
    fn file_parts_need_the_files_extension_listed() {
        let p = reference(good_meta());
        let parsed = parse_part_value(&p).unwrap().to_part();
        assert_eq!(
            check_parts(std::slice::from_ref(&parsed), &[]).unwrap_err(),
            FileError::NotListed
        );
        assert_eq!(
            check_parts(&[parsed], &[EXT_FILES.to_string()])
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn blobs_round_trip_under_a_fresh_key_and_nonce() {
        let mut rng = rand_core::OsRng;
        let plain = b"the Q4 plan".to_vec();
        let (c1, m1) = seal_blob(&plain, &mut rng).unwrap();
        let (c2, m2) = seal_blob(&plain, &mut rng).unwrap();
        assert_ne!(c1, c2);
        let (e1, e2) = (m1.enc.clone().unwrap(), m2.enc.clone().unwrap());
        assert_ne!(e1.key, e2.key);
        assert_ne!(e1.nonce, e2.nonce);
        assert_eq!(c1.len(), plain.len() + FILES_TAG_LEN);
        assert_eq!(m1.sha256, sha(&c1));
        assert_eq!(e1.plain_sha256, sha(&plain));
        assert_eq!(open_blob(&c1, &m1).unwrap(), plain);
        // The associated data is rdv1/blob: the same key without it fails.
        let key = e1.key_bytes().unwrap();
        let nonce = e1.nonce_bytes().unwrap();
        let mut buf = c1.clone();
        assert!(
            Aes256Gcm::new(key.as_slice().into())
                .decrypt_in_place(Nonce::from_slice(&nonce), b"", &mut buf)
                .is_err()
        );
        // The key never shows in Debug.
        assert!(!format!("{m1:?}").contains(&e1.key));
    }

    #[test]
    fn opening_checks_size_and_hash_first_then_decryption_then_plain_hash() {
        let mut rng = rand_core::OsRng;
        let (c, m) = seal_blob(b"hello", &mut rng).unwrap();
        assert_eq!(open_blob(&c[1..], &m).unwrap_err(), FileError::SizeMismatch);
        let mut flipped = c.clone();
        flipped[0] ^= 1;
        assert_eq!(
            open_blob(&flipped, &m).unwrap_err(),
            FileError::HashMismatch
        );
        // A hash that matches but a key that does not decrypt.
        let mut wrong_key = m.clone();
        if let Some(e) = wrong_key.enc.as_mut() {
            e.key = B64.encode([9u8; 32]);
        }
        assert_eq!(open_blob(&c, &wrong_key).unwrap_err(), FileError::Decrypt);
        // Decrypts, but the plaintext is not what plain_sha256 says.
        let mut wrong_plain = m.clone();
        if let Some(e) = wrong_plain.enc.as_mut() {
            e.plain_sha256 = sha(b"other");
        }
        assert_eq!(
            open_blob(&c, &wrong_plain).unwrap_err(),
            FileError::PlainHashMismatch
        );
        // A plaintext reference is checked by sha256 alone.
        let plain = FileMeta {
            sha256: sha(b"pub"),
            size: 3,
            enc: None,
            mirrors: Vec::new(),
            p2p: Vec::new(),
            expires: None,
        };
        assert_eq!(open_blob(b"pub", &plain).unwrap(), b"pub");
        assert_eq!(
            open_blob(b"pux", &plain).unwrap_err(),
            FileError::HashMismatch
        );
    }

    fn propose() -> Value {
        json!({"type": "rdv/transfer", "file": sha(b"x"), "task": "3f9a0000-0000-4000-8000-000000000001",
            "transfer": "3f9a0000-0000-4000-8000-000000000002", "step": "propose",
            "protocols": ["webrtc-datachannel/1"], "data": {}, "expires": "2026-11-01T00:00:00Z"})
    }

    #[test]
    fn transfer_messages_round_trip_and_each_step_allows_only_its_fields() {
        let m = parse_transfer(&propose()).unwrap();
        assert_eq!(m.step.name(), "propose");
        assert_eq!(parse_transfer(&m.to_payload()).unwrap(), m);
        // propose has no protocol; accept has no protocols; done has no data.
        let mut v = propose();
        v["protocol"] = json!("webrtc-datachannel/1");
        assert!(matches!(
            parse_transfer(&v).unwrap_err(),
            TransferError::UnknownKey { step: "propose", ref key } if key == "protocol"
        ));
        let mut v = propose();
        v["step"] = json!("accept");
        assert!(matches!(
            parse_transfer(&v).unwrap_err(),
            TransferError::UnknownKey { step: "accept", ref key } if key == "protocols"
        ));
        let done = json!({"type": "rdv/transfer", "file": sha(b"x"),
            "transfer": "3f9a0000-0000-4000-8000-000000000002", "step": "done", "data": {}});
        assert!(matches!(
            parse_transfer(&done).unwrap_err(),
            TransferError::UnknownKey { step: "done", .. }
        ));
        // signal needs data.
        let signal = json!({"type": "rdv/transfer", "file": sha(b"x"),
            "transfer": "3f9a0000-0000-4000-8000-000000000002", "step": "signal"});
        assert_eq!(
            parse_transfer(&signal).unwrap_err(),
            TransferError::BadField {
                field: "data",
                why: "required on signal"
            }
        );
        // An unknown step, a bad file hash, a non-UUID transfer.
        for (k, v) in [
            ("step", json!("push")),
            ("file", json!("abc")),
            ("transfer", json!("t-1")),
        ] {
            let mut p = propose();
            p[k] = v;
            assert!(
                matches!(
                    parse_transfer(&p).unwrap_err(),
                    TransferError::BadField { .. }
                ),
                "{k}"
            );
        }
    }

    #[test]
    fn transfer_bounds_hold() {
        // 1 to 8 protocols.
        let mut v = propose();
        v["protocols"] = json!([]);
        assert!(matches!(
            parse_transfer(&v).unwrap_err(),
            TransferError::BadField {
                field: "protocols",
                ..
            }
        ));
        v["protocols"] = json!((0..9).map(|i| format!("p{i}/1")).collect::<Vec<_>>());
        assert!(matches!(
            parse_transfer(&v).unwrap_err(),
            TransferError::BadField {
                field: "protocols",
                ..
            }
        ));
        v["protocols"] = json!((0..8).map(|i| format!("p{i}/1")).collect::<Vec<_>>());
        assert!(parse_transfer(&v).is_ok());
        // data at most 16 KiB as canonical JSON.
        let mut v = propose();
        v["data"] = json!({"sdp": "x".repeat(TRANSFER_MAX_DATA_BYTES)});
        assert_eq!(parse_transfer(&v).unwrap_err(), TransferError::DataTooLarge);
        v["data"] = json!({"sdp": "x".repeat(TRANSFER_MAX_DATA_BYTES - 20)});
        assert!(parse_transfer(&v).is_ok());
        // nested at most 16 deep.
        let mut deep = json!({});
        for _ in 0..TRANSFER_MAX_DEPTH {
            deep = json!({"a": deep});
        }
        let mut v = propose();
        v["data"] = deep.clone();
        assert_eq!(parse_transfer(&v).unwrap_err(), TransferError::DataTooDeep);
        v["data"] = deep["a"].clone();
        assert!(parse_transfer(&v).is_ok());
        // An abort's reason is at most 200 characters.
        let abort = |r: String| {
            json!({"type": "rdv/transfer", "file": sha(b"x"),
            "transfer": "3f9a0000-0000-4000-8000-000000000002", "step": "abort", "reason": r})
        };
        assert!(parse_transfer(&abort("r".repeat(200))).is_ok());
        assert!(matches!(
            parse_transfer(&abort("r".repeat(201))).unwrap_err(),
            TransferError::BadField {
                field: "reason",
                ..
            }
        ));
    }
}
