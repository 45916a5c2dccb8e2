//! The one parse of a message's headers (§5.2.1 gate steps 1–2), bounded
//! first, and the header readers every step of the gate uses on it
//! (`gate`, `auth`, `received`, `forwarding`): nothing parses twice.

use mail_parser::{HeaderName, Message, MessageParser};
use rdv_proto::Address;

use crate::verdict::Refusal;

/// The one parse of a message's headers (§5.2.1 gate steps 1–2): the raw
/// size is bounded first, then `mail-parser` reads the header block; every
/// later step (screening, `auth`, `received`, `forwarding`) reads this.
pub fn parse(raw: &[u8], max_bytes: usize) -> Result<Message<'_>, Refusal> {
    if raw.len() > max_bytes {
        return Err(Refusal::TooLarge);
    }
    MessageParser::default()
        .parse_headers(raw)
        .ok_or(Refusal::Malformed)
}

fn header_text(msg: &Message<'_>, h: &mail_parser::Header<'_>) -> String {
    let raw = msg
        .raw_message()
        .get(h.offset_start as usize..h.offset_end as usize)
        .unwrap_or_default();
    // Unfold (RFC 5322 §2.2.3) and trim.
    String::from_utf8_lossy(raw)
        .replace("\r\n", "")
        .replace('\n', "")
        .trim()
        .to_string()
}

/// Every instance of a header, unfolded, by case-insensitive name.
pub fn header_all(msg: &Message<'_>, name: &str) -> Vec<String> {
    msg.headers()
        .iter()
        .filter(|h| h.name.as_str().eq_ignore_ascii_case(name))
        .map(|h| header_text(msg, h))
        .collect()
}

/// The one From mailbox, an email address (§5.2.1 gate step 7).
pub fn single_from(msg: &Message<'_>) -> Result<Address, Refusal> {
    if msg
        .headers()
        .iter()
        .filter(|h| h.name == HeaderName::From)
        .count()
        != 1
    {
        return Err(Refusal::From("not exactly one From header".into()));
    }
    let from = msg
        .from()
        .ok_or_else(|| Refusal::From("unparseable".into()))?;
    let mut it = from.iter();
    let (Some(a), None) = (it.next(), it.next()) else {
        return Err(Refusal::From("not exactly one mailbox".into()));
    };
    let addr = a
        .address
        .as_deref()
        .ok_or_else(|| Refusal::From("no address".into()))?;
    let parsed = Address::parse(addr).map_err(|e| Refusal::From(e.to_string()))?;
    if parsed.kind != rdv_proto::AddressKind::Email {
        return Err(Refusal::From("not an email address".into()));
    }
    Ok(parsed)
}
