//! The RDV/1 mail block (§5.2.1, §5.2.2): the probe, its SYN-ACK, the ACK's
//! echoed cookie (`rdv/probe-echo`, docs/conformance.md) and the invite, carried as one line of canonical JSON fenced by
//! `---BEGIN RDV/1---` / `---END RDV/1---` in a plain-text mail.
//!
//! Composing is pure (the Date and Message-ID are parameters). Extracting is
//! the gate's first step (§5.2.1 "the gate"): the raw message is bounded
//! before parsing, MIME is decoded by `mail-parser`, and anything but exactly
//! one well-formed block is refused before a byte reaches a model.

use mail_parser::{MessageParser, MimeHeaders, PartType};
use serde_json::{Value, json};
use time::format_description::well_known::Rfc2822;

use crate::canon;
use crate::consts::{
    ACK_HEADER, ACK_SUBJECT_MARKER, ADDRESS_MAX_LEN, BLOCK_BEGIN, BLOCK_END, BLOCK_MAX_BYTES,
    INVITE_HEADER, INVITE_SUBJECT_MARKER, INVITE_TOKEN_MAX_LEN, MAIL_MAX_BYTES, MIME_LINE_MAX,
    PROBE_ACK_SUBJECT_MARKER, PROBE_COOKIE_MAX_LEN, PROBE_HEADER, PROBE_SUBJECT_MARKER,
};
use crate::doc::grant::Grant;
use crate::doc::obj::{Obj, is_uuid};
use crate::doc::request::ContactRequest;
use crate::encoding::base64;
use crate::error::{Error, Result};
use crate::keys::{AgentId, AgentKey};
use crate::sign;
use crate::time::{Instant, format_time};

pub const PROBE_TYPE: &str = "rdv/probe";
pub const PROBE_ACK_TYPE: &str = "rdv/probe-ack";
pub const INVITE_TYPE: &str = "rdv/invite";
/// The ACK leg by mail: the requester echoes the SYN-ACK's cookie (§5.2.1).
pub const PROBE_ECHO_TYPE: &str = "rdv/probe-echo";

/// Which of the block payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    Probe,
    ProbeAck,
    Invite,
    ProbeEcho,
}

impl BlockKind {
    fn of(payload: &Value) -> Result<Self> {
        match payload.get("type").and_then(Value::as_str) {
            Some(PROBE_TYPE) => Ok(Self::Probe),
            Some(PROBE_ACK_TYPE) => Ok(Self::ProbeAck),
            Some(INVITE_TYPE) => Ok(Self::Invite),
            Some(PROBE_ECHO_TYPE) => Ok(Self::ProbeEcho),
            _ => Err(Error::shape(
                "type",
                "must be rdv/probe, rdv/probe-ack, rdv/probe-echo or rdv/invite",
            )),
        }
    }

    /// The subject marker (§5.2.1, §5.2.2).
    pub fn marker(self) -> &'static str {
        match self {
            Self::Probe => PROBE_SUBJECT_MARKER,
            Self::ProbeAck => PROBE_ACK_SUBJECT_MARKER,
            Self::Invite => INVITE_SUBJECT_MARKER,
            Self::ProbeEcho => ACK_SUBJECT_MARKER,
        }
    }

    /// The plain-language line after the marker.
    pub fn default_subject_line(self) -> &'static str {
        match self {
            Self::Probe => "bot discovery request - if you're a human, you can ignore this.",
            Self::ProbeAck => "bot discovery reply - sent by an AI agent, not a person.",
            Self::Invite => "an invitation to connect our assistants",
            Self::ProbeEcho => "bot discovery confirmation - sent by an AI agent, not a person.",
        }
    }

    /// The header-aware rules' header (§5.2.1, §5.2.2). The SYN-ACK carries
    /// X-Rdv-Probe too, naming the probe it answers, so the requester's rule
    /// routes it to the agent as well.
    pub fn header_name(self) -> &'static str {
        match self {
            Self::Probe | Self::ProbeAck => PROBE_HEADER,
            Self::Invite => INVITE_HEADER,
            Self::ProbeEcho => ACK_HEADER,
        }
    }

    fn default_intro(self) -> &'static str {
        match self {
            Self::Probe => {
                "This message was sent automatically by an AI agent (Rendezvous protocol) \
                 to ask whether this address has an agent of its own. If you are a person \
                 reading this, you can ignore it: nothing else will follow."
            }
            Self::ProbeAck => {
                "This message is an automatic reply from an AI agent (Rendezvous protocol) \
                 to a bot discovery request. It is meant for an agent, not a person."
            }
            Self::Invite => {
                "This invitation was sent by my AI assistant, on my behalf, using the \
                 Rendezvous protocol. If you use an assistant that speaks it, it can pick \
                 this up; otherwise, just reply to me."
            }
            Self::ProbeEcho => {
                "This message is an automatic confirmation from an AI agent (Rendezvous \
                 protocol) answering a bot discovery reply. It is meant for an agent, not \
                 a person."
            }
        }
    }
}

/// A verified probe: the SYN (§5.2.1).
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub request: ContactRequest,
}

/// A verified SYN-ACK (§5.2.1).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeAck {
    pub grant: Grant,
    /// The stateless challenge the ACK must echo.
    pub cookie: String,
}

/// A verified invite (§5.2.2), signed by `from`.
#[derive(Debug, Clone, PartialEq)]
pub struct Invite {
    pub id: String,
    pub from: AgentId,
    pub to_hint: Option<String>,
    /// Single-use token the acceptance replies with.
    pub token: String,
    pub ts: Instant,
    pub hash: String,
}

/// A verified echo of a SYN-ACK's cookie: the ACK leg by mail (§5.2.1;
/// docs/conformance.md), signed by the requester `from` for the grantor `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeEcho {
    /// The probe's request id.
    pub request_ref: String,
    pub from: AgentId,
    pub to: AgentId,
    /// The cookie of the SYN-ACK, echoed.
    pub cookie: String,
    pub ts: Instant,
    pub hash: String,
}

/// One block payload, verified.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockPayload {
    Probe(Box<Probe>),
    ProbeAck(Box<ProbeAck>),
    Invite(Invite),
    ProbeEcho(ProbeEcho),
}

/// Verifies a block payload at `now`: unknown members refused, the nested
/// request or grant verified (§5.1, §5.3); a probe older than 14 days is
/// expired (§5.2.1).
pub fn parse_payload(v: &Value, now: Instant, allow_ws: bool) -> Result<BlockPayload> {
    match BlockKind::of(v)? {
        BlockKind::Probe => {
            let mut o = Obj::new(v, "")?;
            o.version()?;
            o.doc_type(PROBE_TYPE)?;
            let request = ContactRequest::verify_at(o.req("request")?, "request", now, allow_ws)?;
            if !o.req("cookie")?.is_null() {
                return Err(o.err("cookie", "must be null in a probe"));
            }
            o.deny_unknown()?;
            if request.probe_expired(now) {
                return Err(Error::Expired);
            }
            Ok(BlockPayload::Probe(Box::new(Probe { request })))
        }
        BlockKind::ProbeAck => {
            let mut o = Obj::new(v, "")?;
            o.version()?;
            o.doc_type(PROBE_ACK_TYPE)?;
            let grant = Grant::verify_at(o.req("grant")?, "grant", now, allow_ws)?;
            if grant.is_reverse() {
                return Err(o.err("grant", "must answer a request (request_ref)"));
            }
            let cookie = o.str("cookie")?;
            if !token_ok(cookie, PROBE_COOKIE_MAX_LEN) {
                return Err(o.err(
                    "cookie",
                    format!("must be 1 to {PROBE_COOKIE_MAX_LEN} printable ASCII characters"),
                ));
            }
            let cookie = cookie.to_string();
            o.deny_unknown()?;
            Ok(BlockPayload::ProbeAck(Box::new(ProbeAck { grant, cookie })))
        }
        BlockKind::Invite => Invite::verify(v).map(BlockPayload::Invite),
        BlockKind::ProbeEcho => ProbeEcho::verify(v).map(BlockPayload::ProbeEcho),
    }
}

impl ProbeEcho {
    /// Verifies the signature (by `from`, §4.6), then the shape, strictly.
    pub fn verify(doc: &Value) -> Result<Self> {
        let (mut o, from, hash) = crate::doc::open_signed(doc, "", "probe echo", "from", None)?;
        o.version()?;
        o.doc_type(PROBE_ECHO_TYPE)?;
        let request_ref = o.uuid("request_ref")?.to_string();
        let to = o.id("to")?;
        let cookie = o.str("cookie")?;
        if !token_ok(cookie, PROBE_COOKIE_MAX_LEN) {
            return Err(o.err(
                "cookie",
                format!("must be 1 to {PROBE_COOKIE_MAX_LEN} printable ASCII characters"),
            ));
        }
        let cookie = cookie.to_string();
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        Ok(Self {
            request_ref,
            from,
            to,
            cookie,
            ts,
            hash,
        })
    }

    /// The signed echo, `from` being `key`'s (the requester's).
    pub fn build(
        request_ref: &str,
        to: &AgentId,
        cookie: &str,
        ts: Instant,
        key: &AgentKey,
    ) -> Result<Value> {
        let doc = json!({
            "v": 1,
            "type": PROBE_ECHO_TYPE,
            "request_ref": request_ref,
            "from": key.id().as_str(),
            "to": to.as_str(),
            "cookie": cookie,
            "ts": format_time(ts),
        });
        sign::sign_value(doc, key)
    }
}

fn token_ok(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

impl Invite {
    pub fn verify(doc: &Value) -> Result<Self> {
        let (mut o, from, hash) = crate::doc::open_signed(doc, "", "invite", "from", None)?;
        o.version()?;
        o.doc_type(INVITE_TYPE)?;
        let id = o.uuid("id")?.to_string();
        o.req("to_hint")?;
        let to_hint = match o.opt_str("to_hint")? {
            Some(s) if s.len() > ADDRESS_MAX_LEN => {
                return Err(o.err("to_hint", format!("longer than {ADDRESS_MAX_LEN} bytes")));
            }
            h => h.map(str::to_string),
        };
        let token = o.str("token")?;
        if !token_ok(token, INVITE_TOKEN_MAX_LEN) {
            return Err(o.err(
                "token",
                format!("must be 1 to {INVITE_TOKEN_MAX_LEN} printable ASCII characters"),
            ));
        }
        let token = token.to_string();
        let ts = o.time("ts")?;
        o.deny_unknown()?;
        Ok(Self {
            id,
            from,
            to_hint,
            token,
            ts,
            hash,
        })
    }

    /// The signed invite, `from` being `key`'s.
    pub fn build(
        id: &str,
        to_hint: Option<&str>,
        token: &str,
        ts: Instant,
        key: &AgentKey,
    ) -> Result<Value> {
        let doc = json!({
            "v": 1,
            "type": INVITE_TYPE,
            "id": id,
            "from": key.id().as_str(),
            "to_hint": to_hint,
            "token": token,
            "ts": format_time(ts),
        });
        sign::sign_value(doc, key)
    }
}

/// The probe payload around a signed request (§5.2.1; the cookie slot is null).
pub fn probe_payload(request: &Value) -> Value {
    json!({"v": 1, "type": PROBE_TYPE, "request": request, "cookie": null})
}

/// The SYN-ACK payload: a signed grant and the cookie (§5.2.1).
pub fn probe_ack_payload(grant: &Value, cookie: &str) -> Value {
    json!({"v": 1, "type": PROBE_ACK_TYPE, "grant": grant, "cookie": cookie})
}

/// The fenced block: BEGIN, one line of canonical JSON, END, CRLF-separated.
pub fn block_text(payload: &Value) -> Result<String> {
    let line = canon::to_string(payload)?;
    if line.len() > BLOCK_MAX_BYTES {
        return Err(Error::TooLarge {
            what: "RDV/1 block",
            len: line.len(),
            limit: BLOCK_MAX_BYTES,
        });
    }
    Ok(format!("{BLOCK_BEGIN}\r\n{line}\r\n{BLOCK_END}"))
}

/// The subject: the marker and a plain-language line (`line`, or the
/// default), RFC 2047-encoded when not ASCII.
pub fn subject(kind: BlockKind, line: Option<&str>) -> Result<String> {
    let line = line.unwrap_or(kind.default_subject_line());
    if line.chars().any(char::is_control) {
        return Err(Error::shape("subject", "has control characters"));
    }
    let text = format!("{} {line}", kind.marker());
    Ok(if text.is_ascii() {
        text
    } else {
        format!("{} {}", kind.marker(), encoded_words(line))
    })
}

/// RFC 2047 B-encoded words of at most 75 characters, folded.
fn encoded_words(s: &str) -> String {
    let mut words = Vec::new();
    let mut chunk = String::new();
    for c in s.chars() {
        // 45 bytes of UTF-8 become 60 base64 characters: within 75 with the wrapper.
        if chunk.len() + c.len_utf8() > 45 {
            words.push(format!("=?utf-8?B?{}?=", base64(chunk.as_bytes())));
            chunk.clear();
        }
        chunk.push(c);
    }
    if !chunk.is_empty() {
        words.push(format!("=?utf-8?B?{}?=", base64(chunk.as_bytes())));
    }
    words.join("\r\n ")
}

/// The header value `v=1; id=<uuid>; from=rdv1:…` (§5.2.1, §5.2.2).
pub fn header_value(id: &str, from: &AgentId) -> Result<String> {
    if !is_uuid(id) {
        return Err(Error::shape("id", "must be a lowercase RFC 4122 UUID"));
    }
    Ok(format!("v=1; id={id}; from={from}"))
}

/// A parsed X-Rdv-Probe or X-Rdv-Invite value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdvHeader {
    pub id: String,
    pub from: AgentId,
}

/// Parses a header value strictly: exactly `v=1`, `id` (a UUID) and `from`
/// (an agent ID), each once, separated by `;`, any order, spaces allowed
/// around them (folding is undone by the mail parser).
pub fn parse_header_value(s: &str) -> Result<RdvHeader> {
    let bad = |why: &str| Error::MailBlock(format!("rdv header: {why}"));
    let (mut v, mut id, mut from) = (None, None, None);
    for part in s.split(';') {
        let (k, val) = part
            .trim_matches([' ', '\t', '\r', '\n'])
            .split_once('=')
            .ok_or_else(|| bad("each parameter is key=value"))?;
        let slot = match k {
            "v" => &mut v,
            "id" => &mut id,
            "from" => &mut from,
            _ => return Err(bad("unknown parameter")),
        };
        if slot.replace(val).is_some() {
            return Err(bad("repeated parameter"));
        }
    }
    if v != Some("1") {
        return Err(bad("v must be 1"));
    }
    let id = id.ok_or_else(|| bad("id missing"))?;
    if !is_uuid(id) {
        return Err(bad("id must be a lowercase RFC 4122 UUID"));
    }
    let from = AgentId::parse(from.ok_or_else(|| bad("from missing"))?)
        .map_err(|e| bad(&e.to_string()))?;
    Ok(RdvHeader {
        id: id.to_string(),
        from,
    })
}

/// The body's Content-Transfer-Encoding. The JSON line is longer than the
/// 998 bytes a mail line may hold (RFC 5322 §2.1.1), so it is never 8bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferEncoding {
    QuotedPrintable,
    Base64,
}

/// What the caller chooses of a composed message.
#[derive(Debug, Clone)]
pub struct MailParams<'a> {
    /// The From mailbox (`agent@example.org` or `Name <agent@example.org>`).
    pub from: &'a str,
    /// The one recipient (no Cc/Bcc, never a list, §5.2.1).
    pub to: &'a str,
    pub date: Instant,
    /// `<unique@host>`.
    pub message_id: &'a str,
    pub encoding: TransferEncoding,
    /// Plain-language subject line after the marker; default per kind.
    pub subject_line: Option<&'a str>,
    /// The human paragraph before the block; default per kind.
    pub intro: Option<&'a str>,
}

/// A complete RFC 5322 message carrying `payload` (a probe, SYN-ACK or
/// invite payload) in a text/plain part.
pub fn compose(payload: &Value, p: &MailParams<'_>) -> Result<Vec<u8>> {
    let kind = BlockKind::of(payload)?;
    let (id, from) = header_ids(kind, payload)?;
    for (field, v) in [("from", p.from), ("to", p.to), ("message_id", p.message_id)] {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(Error::shape(field, "must be printable ASCII on one line"));
        }
    }
    if p.to.contains(',') {
        return Err(Error::shape("to", "one recipient only"));
    }
    if !(p.message_id.starts_with('<')
        && p.message_id.ends_with('>')
        && !p.message_id.contains(' '))
    {
        return Err(Error::shape("message_id", "must be <id@host>"));
    }
    let intro = p.intro.unwrap_or(kind.default_intro());
    if intro.contains(BLOCK_BEGIN) || intro.contains(BLOCK_END) {
        return Err(Error::shape("intro", "must not contain the block markers"));
    }
    let intro = intro.replace("\r\n", "\n").replace('\n', "\r\n");
    let text = format!("{intro}\r\n\r\n{}\r\n", block_text(payload)?);
    let date = p
        .date
        .to_offset(time::UtcOffset::UTC)
        .format(&Rfc2822)
        .map_err(|e| Error::shape("date", e.to_string()))?;
    let (cte, body) = match p.encoding {
        TransferEncoding::QuotedPrintable => ("quoted-printable", qp_encode(&text)),
        TransferEncoding::Base64 => ("base64", base64_lines(text.as_bytes())),
    };
    let msg = format!(
        "From: {}\r\nTo: {}\r\nSubject: {}\r\nDate: {date}\r\nMessage-ID: {}\r\n\
         MIME-Version: 1.0\r\n{}: {}\r\nAuto-Submitted: auto-generated\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: {cte}\r\n\r\n{body}",
        p.from,
        p.to,
        subject(kind, p.subject_line)?,
        p.message_id,
        kind.header_name(),
        header_value(&id, &from)?,
    );
    Ok(msg.into_bytes())
}

/// The id and from the header names: the probe's request, the probe a
/// SYN-ACK answers (with the grantor), the invite's own.
fn header_ids(kind: BlockKind, payload: &Value) -> Result<(String, AgentId)> {
    let s = |v: Option<&Value>, f: &str| {
        v.and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| Error::shape(f, "missing"))
    };
    let (id, from) = match kind {
        BlockKind::Probe => {
            let r = payload.get("request");
            (
                s(r.and_then(|r| r.get("id")), "request.id")?,
                s(r.and_then(|r| r.get("from")), "request.from")?,
            )
        }
        BlockKind::ProbeAck => {
            let g = payload.get("grant");
            (
                s(g.and_then(|g| g.get("request_ref")), "grant.request_ref")?,
                s(g.and_then(|g| g.get("from")), "grant.from")?,
            )
        }
        BlockKind::Invite => (s(payload.get("id"), "id")?, s(payload.get("from"), "from")?),
        BlockKind::ProbeEcho => (
            s(payload.get("request_ref"), "request_ref")?,
            s(payload.get("from"), "from")?,
        ),
    };
    Ok((id, AgentId::parse(&from)?))
}

/// RFC 2045 §6.7 quoted-printable of CRLF-separated text: lines of at most
/// 76 characters with soft breaks, `=`, controls, non-ASCII and trailing
/// white space encoded.
pub fn qp_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 11 / 10);
    let lines: Vec<&str> = text.split("\r\n").collect();
    for (li, line) in lines.iter().enumerate() {
        let bytes = line.as_bytes();
        let mut col = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let last = i + 1 == bytes.len();
            let literal = match b {
                b'=' => false,
                b' ' | b'\t' => !last,
                33..=126 => true,
                _ => false,
            };
            let piece_len = if literal { 1 } else { 3 };
            // Leave room for the soft break's `=` unless this ends the line.
            let limit = if last {
                MIME_LINE_MAX
            } else {
                MIME_LINE_MAX - 1
            };
            if col + piece_len > limit {
                out.push_str("=\r\n");
                col = 0;
            }
            if literal {
                out.push(b as char);
            } else {
                out.push_str(&format!("={b:02X}"));
            }
            col += piece_len;
        }
        if li + 1 < lines.len() {
            out.push_str("\r\n");
        }
    }
    out
}

fn base64_lines(bytes: &[u8]) -> String {
    let b = base64(bytes);
    let mut out = String::with_capacity(b.len() + b.len() / MIME_LINE_MAX * 2 + 2);
    for chunk in b.as_bytes().chunks(MIME_LINE_MAX) {
        // base64 output is ASCII, so each chunk is valid UTF-8.
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push_str("\r\n");
    }
    out
}

/// §5.2.1 gate step 1: the one RDV/1 block of a raw message, as canonical
/// JSON. Refuses a message over [`MAIL_MAX_BYTES`] before parsing it, one
/// with no block or more than one (over all its text/plain parts), a block
/// that is not exactly one line, and JSON that is not canonical or is over
/// [`BLOCK_MAX_BYTES`].
pub fn extract_block(raw: &[u8]) -> Result<Value> {
    if raw.len() > MAIL_MAX_BYTES {
        return Err(Error::TooLarge {
            what: "mail message",
            len: raw.len(),
            limit: MAIL_MAX_BYTES,
        });
    }
    let bad = |why: &str| Error::MailBlock(why.to_string());
    let msg = MessageParser::default()
        .parse(raw)
        .ok_or_else(|| bad("not a mail message"))?;
    let mut blocks: Vec<Vec<String>> = Vec::new();
    for part in &msg.parts {
        let PartType::Text(text) = &part.body else {
            continue;
        };
        let plain = part.content_type().is_none_or(|ct| {
            ct.ctype().eq_ignore_ascii_case("text")
                && ct.subtype().is_none_or(|s| s.eq_ignore_ascii_case("plain"))
        });
        if !plain {
            continue;
        }
        let mut open: Option<Vec<String>> = None;
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let marker = line.trim_end_matches([' ', '\t']);
            if marker == BLOCK_BEGIN {
                if open.is_some() {
                    return Err(bad("a block opens inside another"));
                }
                open = Some(Vec::new());
            } else if marker == BLOCK_END {
                blocks.push(open.take().ok_or_else(|| bad("END without BEGIN"))?);
            } else if let Some(lines) = open.as_mut() {
                if lines.len() > 1 {
                    return Err(bad("a block holds exactly one JSON line"));
                }
                lines.push(line.to_string());
            }
        }
        if open.is_some() {
            return Err(bad("a block is not closed"));
        }
    }
    let mut lines = match blocks.len() {
        0 => return Err(bad("no RDV/1 block")),
        1 => blocks.swap_remove(0),
        _ => return Err(bad("more than one RDV/1 block")),
    };
    if lines.len() != 1 {
        return Err(bad("a block holds exactly one JSON line"));
    }
    let line = lines.swap_remove(0);
    if line.len() > BLOCK_MAX_BYTES {
        return Err(Error::TooLarge {
            what: "RDV/1 block",
            len: line.len(),
            limit: BLOCK_MAX_BYTES,
        });
    }
    let v = canon::parse(line.as_bytes(), BLOCK_MAX_BYTES)?;
    if canon::to_vec(&v)? != line.as_bytes() {
        return Err(bad("the block's JSON is not canonical"));
    }
    Ok(v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::doc::grant::GrantRef;
    use crate::doc::grant::tests::grant;
    use crate::doc::request::tests::{REQ_ID, request};
    use crate::doc::resign;
    use crate::doc::testutil::{key, now, t};

    const INVITE_ID: &str = "5d1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

    fn params(encoding: TransferEncoding) -> MailParams<'static> {
        MailParams {
            from: "Alice's agent <rdv+alice@agent.example>",
            to: "john@doe.com",
            date: t("2026-10-08T12:00:00Z"),
            message_id: "<6f1b2c3d@agent.example>",
            encoding,
            subject_line: None,
            intro: None,
        }
    }

    fn invite() -> Value {
        Invite::build(
            INVITE_ID,
            Some("dana@doe.com"),
            "tok_0123456789abcdef",
            now(),
            &key(1),
        )
        .unwrap()
    }

    fn echo() -> Value {
        ProbeEcho::build(REQ_ID, key(2).id(), "c00k1e", now(), &key(1)).unwrap()
    }

    fn payloads() -> Vec<Value> {
        vec![
            probe_payload(&request(1)),
            probe_ack_payload(&grant(), "c00k1e"),
            invite(),
            echo(),
        ]
    }

    #[test]
    fn probe_echo_verifies_and_is_strict() {
        match parse_payload(&echo(), now(), false).unwrap() {
            BlockPayload::ProbeEcho(e) => {
                assert_eq!(
                    (e.request_ref.as_str(), &e.from, &e.to, e.cookie.as_str()),
                    (REQ_ID, key(1).id(), key(2).id(), "c00k1e")
                );
            }
            p => panic!("{p:?}"),
        }
        let err = |v: Value| parse_payload(&v, now(), false).unwrap_err();
        let alter = |f: &dyn Fn(&mut Value)| {
            let mut d = echo();
            f(&mut d);
            err(resign(&d, &key(1)).unwrap())
        };
        assert_eq!(
            alter(&|d| d["x"] = json!(1)),
            Error::UnknownField("x".into())
        );
        for (field, bad) in [
            ("request_ref", json!("r-1")),
            ("to", json!("rdv1:abc")),
            ("cookie", json!("")),
            ("cookie", json!("a b")),
            ("cookie", json!("c".repeat(PROBE_COOKIE_MAX_LEN + 1))),
            ("ts", json!("2026-10-08 00:00:00")),
            ("v", json!(2)),
        ] {
            assert!(
                matches!(alter(&|d| d[field] = bad.clone()), Error::Shape { field: f, .. } if f == field),
                "{field}"
            );
        }
        // Signed by another key than `from`: refused.
        let mut d = echo();
        d["cookie"] = json!("other");
        assert_eq!(err(d), Error::BadSignature);
        assert_eq!(err(resign(&echo(), &key(2)).unwrap()), Error::BadSignature);
        // Composed: [RDV-ACK] and X-Rdv-Ack name the probe and the requester.
        let raw = compose(&echo(), &params(TransferEncoding::QuotedPrintable)).unwrap();
        let text = String::from_utf8(raw.clone()).unwrap();
        assert!(text.contains(&format!(
            "X-Rdv-Ack: v=1; id={REQ_ID}; from={}",
            key(1).id()
        )));
        assert!(text.contains("Subject: [RDV-ACK] "));
        assert_eq!(extract_block(&raw).unwrap(), echo());
    }

    #[test]
    fn payloads_verify() {
        match parse_payload(&probe_payload(&request(1)), now(), false).unwrap() {
            BlockPayload::Probe(p) => assert_eq!(p.request.id, REQ_ID),
            p => panic!("{p:?}"),
        }
        match parse_payload(&probe_ack_payload(&grant(), "c00k1e"), now(), false).unwrap() {
            BlockPayload::ProbeAck(a) => {
                assert_eq!(a.cookie, "c00k1e");
                assert_eq!(a.grant.reference, GrantRef::Request(REQ_ID.into()));
            }
            p => panic!("{p:?}"),
        }
        match parse_payload(&invite(), now(), false).unwrap() {
            BlockPayload::Invite(i) => assert_eq!(
                (i.id.as_str(), i.token.as_str()),
                (INVITE_ID, "tok_0123456789abcdef")
            ),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn payloads_are_strict() {
        let err = |v: Value| parse_payload(&v, now(), false).unwrap_err();
        let mut p = probe_payload(&request(1));
        p["x"] = json!(1);
        assert_eq!(err(p), Error::UnknownField("x".into()));
        let mut p = probe_payload(&request(1));
        p["cookie"] = json!("abc");
        assert!(matches!(err(p), Error::Shape { field, .. } if field == "cookie"));
        let mut p = probe_payload(&request(1));
        p.as_object_mut().unwrap().remove("cookie");
        assert!(matches!(err(p), Error::Shape { field, .. } if field == "cookie"));
        let mut p = probe_payload(&request(1));
        p["request"]["greeting"] = json!("tampered");
        assert_eq!(err(p), Error::BadSignature);
        let mut p = probe_payload(&request(1));
        p["v"] = json!(2);
        assert!(matches!(err(p), Error::Shape { field, .. } if field == "v"));
        // A probe expires after 14 days.
        assert_eq!(
            parse_payload(
                &probe_payload(&request(1)),
                t("2026-10-22T11:00:00Z"),
                false
            ),
            Err(Error::Expired)
        );
        // SYN-ACK: cookie bounds, nested grant verified.
        assert!(
            parse_payload(
                &probe_ack_payload(&grant(), &"c".repeat(PROBE_COOKIE_MAX_LEN)),
                now(),
                false
            )
            .is_ok()
        );
        assert!(
            matches!(err(probe_ack_payload(&grant(), &"c".repeat(PROBE_COOKIE_MAX_LEN + 1))), Error::Shape { field, .. } if field == "cookie")
        );
        assert!(
            matches!(err(probe_ack_payload(&grant(), "")), Error::Shape { field, .. } if field == "cookie")
        );
        assert!(
            matches!(err(probe_ack_payload(&grant(), "a b")), Error::Shape { field, .. } if field == "cookie")
        );
        let mut a = probe_ack_payload(&grant(), "c");
        a["grant"]["tier"] = json!("spouse");
        assert_eq!(err(a), Error::BadSignature);
        let mut a = probe_ack_payload(&grant(), "c");
        a["grant"]["id"] = json!("g-1");
        let a2 = json!({"v": 1, "type": PROBE_ACK_TYPE, "grant": resign(&a["grant"], &key(2)).unwrap(), "cookie": "c"});
        assert!(matches!(err(a2), Error::Shape { field, .. } if field == "grant.id"));
        // Invite: strict, signed.
        let alter = |f: &dyn Fn(&mut Value)| {
            let mut d = invite();
            f(&mut d);
            err(resign(&d, &key(1)).unwrap())
        };
        assert_eq!(
            alter(&|d| d["x"] = json!(1)),
            Error::UnknownField("x".into())
        );
        assert!(
            matches!(alter(&|d| d["id"] = json!("inv-1")), Error::Shape { field, .. } if field == "id")
        );
        assert!(
            matches!(alter(&|d| d["token"] = json!("")), Error::Shape { field, .. } if field == "token")
        );
        assert!(
            matches!(alter(&|d| d["token"] = json!("t".repeat(INVITE_TOKEN_MAX_LEN + 1))), Error::Shape { field, .. } if field == "token")
        );
        assert!(
            matches!(alter(&|d| { d.as_object_mut().unwrap().remove("to_hint"); }), Error::Shape { field, .. } if field == "to_hint")
        );
        let mut d = invite();
        d["token"] = json!("other");
        assert_eq!(err(d), Error::BadSignature);
        assert!(
            matches!(err(json!({"type": "rdv/other"})), Error::Shape { field, .. } if field == "type")
        );
    }

    #[test]
    fn header_values() {
        let v = header_value(REQ_ID, key(1).id()).unwrap();
        assert_eq!(v, format!("v=1; id={REQ_ID}; from={}", key(1).id()));
        let h = parse_header_value(&v).unwrap();
        assert_eq!((h.id.as_str(), &h.from), (REQ_ID, key(1).id()));
        parse_header_value(&format!("from={};v=1;  id={REQ_ID} ", key(1).id())).unwrap();
        for bad in [
            format!("v=2; id={REQ_ID}; from={}", key(1).id()),
            format!("v=1; id=abc; from={}", key(1).id()),
            format!("v=1; id={REQ_ID}; from=rdv1:abc"),
            format!("v=1; id={REQ_ID}"),
            format!("v=1; id={REQ_ID}; from={}; x=1", key(1).id()),
            format!("v=1; v=1; id={REQ_ID}; from={}", key(1).id()),
            format!("v=1; id={REQ_ID}; from={}; ", key(1).id()),
            format!("v = 1; id={REQ_ID}; from={}", key(1).id()),
        ] {
            assert!(parse_header_value(&bad).is_err(), "{bad}");
        }
        assert!(header_value("x", key(1).id()).is_err());
    }

    #[test]
    fn subjects() {
        assert_eq!(
            subject(BlockKind::Probe, None).unwrap(),
            "[RDV-PROBE] bot discovery request - if you're a human, you can ignore this."
        );
        assert!(
            subject(BlockKind::ProbeAck, None)
                .unwrap()
                .starts_with("[RDV-PROBE-ACK] ")
        );
        assert!(
            subject(BlockKind::Invite, Some("Omer invites you"))
                .unwrap()
                .starts_with("[RDV-INVITE] Omer")
        );
        let enc = subject(BlockKind::Invite, Some("Omer — invites you")).unwrap();
        assert!(enc.starts_with("[RDV-INVITE] =?utf-8?B?") && enc.is_ascii());
        assert!(subject(BlockKind::Invite, Some("a\r\nBcc: x")).is_err());
    }

    fn kind_is_long(p: &Value) -> bool {
        matches!(
            BlockKind::of(p).unwrap(),
            BlockKind::Probe | BlockKind::ProbeAck
        )
    }

    #[test]
    fn compose_extract_round_trip_both_encodings() {
        for enc in [TransferEncoding::QuotedPrintable, TransferEncoding::Base64] {
            for p in payloads() {
                let raw = compose(&p, &params(enc)).unwrap();
                let text = String::from_utf8(raw.clone()).unwrap();
                // Every line of the wire form fits a mail line (and MIME's 76).
                assert!(text.split("\r\n").all(|l| l.len() <= 998), "{enc:?}");
                if kind_is_long(&p) {
                    assert!(
                        canon::to_vec(&p).unwrap().len() > 998,
                        "the JSON line is long"
                    );
                }
                assert_eq!(extract_block(&raw).unwrap(), p, "{enc:?}");
                parse_payload(&extract_block(&raw).unwrap(), now(), false).unwrap();
                let m = MessageParser::default().parse(&raw).unwrap();
                assert_eq!(
                    m.header_raw("Auto-Submitted").unwrap().trim(),
                    "auto-generated"
                );
                let kind = BlockKind::of(&p).unwrap();
                let h = parse_header_value(m.header_raw(kind.header_name()).unwrap()).unwrap();
                assert!(h.from == *key(1).id() || h.from == *key(2).id());
                assert!(m.subject().unwrap().starts_with(kind.marker()));
                assert_eq!(m.date().unwrap().to_rfc3339(), "2026-10-08T12:00:00Z");
                assert_eq!(m.message_id(), Some("6f1b2c3d@agent.example"));
            }
        }
    }

    #[test]
    fn composed_headers() {
        let raw = String::from_utf8(
            compose(
                &probe_payload(&request(1)),
                &params(TransferEncoding::QuotedPrintable),
            )
            .unwrap(),
        )
        .unwrap();
        let head = raw.split("\r\n\r\n").next().unwrap();
        for h in [
            "From: ",
            "To: john@doe.com",
            "Subject: [RDV-PROBE] ",
            "Date: Thu, 08 Oct 2026 12:00:00 +0000",
            "Message-ID: <6f1b2c3d@agent.example>",
            "MIME-Version: 1.0",
            "X-Rdv-Probe: v=1; id=",
            "Auto-Submitted: auto-generated",
            "Content-Type: text/plain; charset=utf-8",
            "Content-Transfer-Encoding: quoted-printable",
        ] {
            assert!(head.lines().any(|l| l.starts_with(h)), "{h}");
        }
        assert!(!head.contains("Cc:"));
        let ack = String::from_utf8(
            compose(
                &probe_ack_payload(&grant(), "c"),
                &params(TransferEncoding::Base64),
            )
            .unwrap(),
        )
        .unwrap();
        assert!(ack.contains(&format!(
            "X-Rdv-Probe: v=1; id={REQ_ID}; from={}",
            key(2).id()
        )));
        let inv = String::from_utf8(compose(&invite(), &params(TransferEncoding::Base64)).unwrap())
            .unwrap();
        assert!(inv.contains(&format!(
            "X-Rdv-Invite: v=1; id={INVITE_ID}; from={}",
            key(1).id()
        )));
        // Header injection and more than one recipient are refused.
        let mut p = params(TransferEncoding::Base64);
        p.to = "a@b.c\r\nBcc: x@y.z";
        assert!(compose(&invite(), &p).is_err());
        p.to = "a@b.c, d@e.f";
        assert!(compose(&invite(), &p).is_err());
        let mut p = params(TransferEncoding::Base64);
        p.intro = Some(BLOCK_BEGIN);
        assert!(compose(&invite(), &p).is_err());
    }

    #[test]
    fn qp_encoder() {
        let long = format!("{}é= \t", "x".repeat(200));
        let enc = qp_encode(&format!("{long}\r\nsecond line \r\n"));
        assert!(enc.split("\r\n").all(|l| l.len() <= MIME_LINE_MAX), "{enc}");
        assert!(enc.contains("=C3=A9=3D"));
        assert!(enc.contains("=09\r\nsecond line=20\r\n"));
        // Decoded by an independent decoder (mail-parser) back to the input.
        let raw = format!(
            "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n{enc}"
        );
        let m = MessageParser::default().parse(raw.as_bytes()).unwrap();
        assert_eq!(
            m.body_text(0).unwrap(),
            format!("{long}\r\nsecond line \r\n")
        );
    }

    fn mail(body: &str) -> Vec<u8> {
        format!("From: a@b.c\r\nTo: d@e.f\r\nSubject: x\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}").into_bytes()
    }

    fn line(p: &Value) -> String {
        canon::to_string(p).unwrap()
    }

    #[test]
    fn zero_two_and_malformed_blocks_refused() {
        let p = invite();
        let one = format!("Hi\r\n{}\r\nBye\r\n", block_text(&p).unwrap());
        assert_eq!(extract_block(&mail(&one)).unwrap(), p);
        assert!(matches!(
            extract_block(&mail("no block here")),
            Err(Error::MailBlock(_))
        ));
        let two = format!(
            "{}\r\n{}\r\n",
            block_text(&p).unwrap(),
            block_text(&p).unwrap()
        );
        assert!(
            matches!(extract_block(&mail(&two)), Err(Error::MailBlock(m)) if m.contains("more than one"))
        );
        let empty = format!("{BLOCK_BEGIN}\r\n{BLOCK_END}\r\n");
        assert!(extract_block(&mail(&empty)).is_err());
        let two_lines = format!(
            "{BLOCK_BEGIN}\r\n{}\r\n{}\r\n{BLOCK_END}\r\n",
            line(&p),
            line(&p)
        );
        assert!(extract_block(&mail(&two_lines)).is_err());
        let blank_extra = format!("{BLOCK_BEGIN}\r\n{}\r\n\r\n{BLOCK_END}\r\n", line(&p));
        assert!(extract_block(&mail(&blank_extra)).is_err());
        let unclosed = format!("{BLOCK_BEGIN}\r\n{}\r\n", line(&p));
        assert!(extract_block(&mail(&unclosed)).is_err());
        let stray_end = format!("{BLOCK_END}\r\n{}", block_text(&p).unwrap());
        assert!(extract_block(&mail(&stray_end)).is_err());
        // Not canonical: spaces, or members out of order.
        let spaced = serde_json::to_string_pretty(&p).unwrap().replace('\n', " ");
        let nc = format!("{BLOCK_BEGIN}\r\n{spaced}\r\n{BLOCK_END}\r\n");
        assert!(
            matches!(extract_block(&mail(&nc)), Err(Error::MailBlock(m)) if m.contains("canonical"))
        );
        let nj = format!("{BLOCK_BEGIN}\r\nnot json\r\n{BLOCK_END}\r\n");
        assert!(matches!(extract_block(&mail(&nj)), Err(Error::Json(_))));
        // A quoted block in a reply is not a block.
        let quoted = format!("> {BLOCK_BEGIN}\r\n> {}\r\n> {BLOCK_END}\r\n", line(&p));
        assert!(extract_block(&mail(&quoted)).is_err());
    }

    #[test]
    fn multipart_and_html() {
        let p = invite();
        let b = block_text(&p).unwrap();
        let qp = qp_encode(&format!("Hello\r\n\r\n{b}\r\n"));
        let multipart = |plain_parts: usize| {
            let mut s = String::from(
                "From: a@b.c\r\nTo: d@e.f\r\nSubject: x\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"BND\"\r\n\r\n",
            );
            for _ in 0..plain_parts {
                s.push_str(&format!("--BND\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n{qp}\r\n"));
            }
            s.push_str(&format!("--BND\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--BND--\r\n", base64_lines(format!("<pre>{b}</pre>").as_bytes())));
            s.into_bytes()
        };
        assert_eq!(
            extract_block(&multipart(1)).unwrap(),
            p,
            "the html copy is not counted"
        );
        assert!(
            extract_block(&multipart(2)).is_err(),
            "two plain parts, two blocks"
        );
        assert!(extract_block(&multipart(0)).is_err(), "html only: no block");
    }

    #[test]
    fn size_bounds() {
        let big = vec![b'a'; MAIL_MAX_BYTES + 1];
        assert!(matches!(extract_block(&big), Err(Error::TooLarge { .. })));
        // A block line at BLOCK_MAX_BYTES passes; one byte more is refused.
        let sized = |n: usize| {
            let base = line(&json!({"type": "x", "p": ""})).len();
            json!({"type": "x", "p": "y".repeat(n - base)})
        };
        let exact = sized(BLOCK_MAX_BYTES);
        let body = qp_encode(&format!("{}\r\n", block_text(&exact).unwrap()));
        let raw = format!(
            "From: a@b.c\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n{body}"
        );
        assert_eq!(extract_block(raw.as_bytes()).unwrap(), exact);
        assert!(block_text(&sized(BLOCK_MAX_BYTES + 1)).is_err());
        let over = format!(
            "{BLOCK_BEGIN}\r\n{}\r\n{BLOCK_END}\r\n",
            line(&sized(BLOCK_MAX_BYTES + 1))
        );
        let body = qp_encode(&over);
        let raw = format!(
            "From: a@b.c\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n{body}"
        );
        assert!(matches!(
            extract_block(raw.as_bytes()),
            Err(Error::TooLarge { .. })
        ));
    }
}
