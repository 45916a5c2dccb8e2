//! The Nostr mapping (§6.2): kind 30417 events carrying envelopes (tags `p`
//! and `d`), discovery probes (`t` and `d`) and public-pointer cards (`t` and
//! `d` = `rdv1/card:` ‖ topic, so relays keep only the newest card).
//!
//! Events are signed with the carrier key (§6.2), which proves nothing about
//! the sender: authenticity is the envelope's or the card's own signature.

use nostr::event::{Event, Kind, Tag, UnsignedEvent};
use nostr::key::Keys;
use nostr::types::Timestamp;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::address::is_topic;
use crate::canon;
use crate::consts::{CARD_MAX_BYTES, ENVELOPE_MAX_BYTES, NOSTR_CARD_D_PREFIX, NOSTR_KIND};
use crate::error::{Error, Result};
use crate::keys::AgentId;
use crate::sign;
use crate::time::parse_time;

static SECP: std::sync::LazyLock<secp256k1::Secp256k1<secp256k1::SignOnly>> =
    std::sync::LazyLock::new(secp256k1::Secp256k1::signing_only);

/// Largest event JSON we parse: the biggest envelope plus event overhead,
/// under the 128 KB message limit of the smallest relay surveyed (§6.4).
pub const NOSTR_EVENT_MAX_BYTES: usize = 2 * ENVELOPE_MAX_BYTES;

/// What a kind 30417 event carries, after every check of [`parse_event`].
#[derive(Debug, Clone, PartialEq)]
pub enum Carried {
    /// An envelope for the agent whose Ed25519 key is the `p` tag.
    Envelope { recipient: AgentId, envelope: Value },
    /// A public-pointer card on an address or ID topic.
    Card { topic: String, card: Value },
    /// A discovery probe (a contact request) posted on a dtopic (§4.4).
    Probe { topic: String, request: Value },
}

/// An envelope event: `p` = recipient Ed25519 key hex, `d` = envelope hash.
pub fn envelope_event(
    envelope: &Value,
    carrier: &Keys,
    created_at: u64,
    aux: [u8; 32],
) -> Result<Event> {
    let to = envelope
        .get("to")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::shape("to", "missing"))?;
    let to = AgentId::parse(to)?;
    let tags = [
        tag("p", &hex::encode(to.key_bytes()))?,
        tag("d", &sign::hash(envelope)?)?,
    ];
    build(carrier, created_at, tags, canon::to_string(envelope)?, aux)
}

/// A public-pointer card event on `topic` (a dtopic or the idtopic).
/// `created_at` may not be earlier than the card's `created` (§6.2), so a
/// newer card never ties with an older one.
pub fn card_event(
    card: &Value,
    topic: &str,
    carrier: &Keys,
    created_at: u64,
    aux: [u8; 32],
) -> Result<Event> {
    if !is_topic(topic) {
        return Err(Error::shape(
            "topic",
            "must be 26 lowercase base32 characters",
        ));
    }
    let created = card
        .get("created")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::shape("card.created", "missing"))?;
    let created = parse_time("card.created", created)?.unix_timestamp();
    if (created_at as i128) < created as i128 {
        return Err(Error::shape(
            "created_at",
            "earlier than the card's created",
        ));
    }
    let tags = [
        tag("t", topic)?,
        tag("d", &format!("{NOSTR_CARD_D_PREFIX}{topic}"))?,
    ];
    build(carrier, created_at, tags, canon::to_string(card)?, aux)
}

/// A listen-mode probe event: a contact request on the dtopic, `d` = the hex
/// SHA-256 of the content (§4.4, §6.2).
pub fn probe_event(
    request: &Value,
    dtopic: &str,
    carrier: &Keys,
    created_at: u64,
    aux: [u8; 32],
) -> Result<Event> {
    if !is_topic(dtopic) {
        return Err(Error::shape(
            "topic",
            "must be 26 lowercase base32 characters",
        ));
    }
    let content = canon::to_string(request)?;
    let d = hex::encode(Sha256::digest(content.as_bytes()));
    build(
        carrier,
        created_at,
        [tag("t", dtopic)?, tag("d", &d)?],
        content,
        aux,
    )
}

/// Verifies an event's NIP-01 id and BIP-340 signature, checks that it is a
/// kind 30417 event shaped as §6.2 says, and returns what it carries. The
/// carried document's own signature is the caller's next step.
pub fn parse_event(json: &[u8]) -> Result<(Event, Carried)> {
    if json.len() > NOSTR_EVENT_MAX_BYTES {
        return Err(Error::TooLarge {
            what: "nostr event",
            len: json.len(),
            limit: NOSTR_EVENT_MAX_BYTES,
        });
    }
    let text = std::str::from_utf8(json).map_err(|_| Error::Nostr("not UTF-8".into()))?;
    // Strict JSON first (duplicate keys and floats refused), then nostr's types.
    canon::parse(json, NOSTR_EVENT_MAX_BYTES)?;
    let ev = Event::from_json(text).map_err(|e| Error::Nostr(e.to_string()))?;
    ev.verify().map_err(|e| Error::Nostr(e.to_string()))?;
    if ev.kind != Kind::Custom(NOSTR_KIND) {
        return Err(Error::Nostr(format!("kind must be {NOSTR_KIND}")));
    }
    let tags: Vec<&[String]> = ev.tags.iter().map(|t| t.as_slice()).collect();
    let one = |name: &str| -> Result<Option<&str>> {
        let mut found = tags
            .iter()
            .filter(|t| t.first().map(String::as_str) == Some(name));
        match (found.next(), found.next()) {
            (None, _) => Ok(None),
            (Some(t), None) if t.len() >= 2 => Ok(Some(t[1].as_str())),
            _ => Err(Error::Nostr(format!(
                "one {name} tag with a value expected"
            ))),
        }
    };
    let d = one("d")?.ok_or_else(|| Error::Nostr("missing d tag".into()))?;
    let carried = match (one("p")?, one("t")?) {
        (Some(p), None) => {
            let envelope = canon::parse(ev.content.as_bytes(), ENVELOPE_MAX_BYTES)?;
            let to = envelope
                .get("to")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::shape("to", "missing"))?;
            let recipient = AgentId::parse(to)?;
            if p != hex::encode(recipient.key_bytes()) {
                return Err(Error::Nostr("p tag is not the envelope's recipient".into()));
            }
            if d != sign::hash(&envelope)? {
                return Err(Error::Nostr("d tag is not the envelope hash".into()));
            }
            Carried::Envelope {
                recipient,
                envelope,
            }
        }
        (None, Some(t)) => {
            if !is_topic(t) {
                return Err(Error::Nostr("t tag is not a topic".into()));
            }
            if d == format!("{NOSTR_CARD_D_PREFIX}{t}") {
                let card = canon::parse(ev.content.as_bytes(), CARD_MAX_BYTES)?;
                Carried::Card {
                    topic: t.to_string(),
                    card,
                }
            } else if d == hex::encode(Sha256::digest(ev.content.as_bytes())) {
                let request = canon::parse(ev.content.as_bytes(), NOSTR_EVENT_MAX_BYTES)?;
                Carried::Probe {
                    topic: t.to_string(),
                    request,
                }
            } else {
                return Err(Error::Nostr(
                    "d tag matches neither a card pointer nor the content hash".into(),
                ));
            }
        }
        _ => {
            return Err(Error::Nostr(
                "exactly one of the p and t tags expected".into(),
            ));
        }
    };
    Ok((ev, carried))
}

fn tag(name: &str, value: &str) -> Result<Tag> {
    Tag::parse([name, value]).map_err(|e| Error::Nostr(e.to_string()))
}

fn build(
    carrier: &Keys,
    created_at: u64,
    tags: [Tag; 2],
    content: String,
    aux: [u8; 32],
) -> Result<Event> {
    let mut unsigned = UnsignedEvent::new(
        carrier.public_key(),
        Timestamp::from_secs(created_at),
        Kind::Custom(NOSTR_KIND),
        tags,
        content,
    );
    let id = unsigned.id();
    let sig = carrier.sign_schnorr_with_aux_rand(&SECP, id.as_bytes(), &aux);
    unsigned
        .add_signature(sig)
        .map_err(|e| Error::Nostr(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{SealParams, seal};
    use crate::keys::AgentKey;
    use serde_json::json;

    fn env() -> (AgentKey, AgentKey, Value) {
        let a = AgentKey::from_seed([1; 32]);
        let b = AgentKey::from_seed([2; 32]);
        let p = SealParams {
            from: &a,
            to: b.id(),
            seq: 1,
            prev: None,
            created: parse_time("t", "2026-10-08T00:00:00Z").unwrap(),
            ttl: "48h",
            ephemeral: [4; 32],
            nonce: [5; 12],
        };
        let e = seal(&json!({"type": "note"}), &p).unwrap();
        (a, b, e)
    }

    #[test]
    fn envelope_event_round_trip_and_tags() {
        let (a, b, e) = env();
        let ev = envelope_event(&e, &a.nostr_keys().unwrap(), 1_791_417_600, [0; 32]).unwrap();
        let tags: Vec<Vec<String>> = ev.tags.iter().map(|t| t.as_slice().to_vec()).collect();
        assert_eq!(
            tags[0],
            vec!["p".to_string(), hex::encode(b.id().key_bytes())]
        );
        assert_eq!(tags[1], vec!["d".to_string(), sign::hash(&e).unwrap()]);
        assert_eq!(ev.content, canon::to_string(&e).unwrap());
        let (_, c) = parse_event(ev.as_json().as_bytes()).unwrap();
        assert_eq!(
            c,
            Carried::Envelope {
                recipient: b.id().clone(),
                envelope: e
            }
        );
    }

    #[test]
    fn tampered_events_refused() {
        let (a, _, e) = env();
        let ev = envelope_event(&e, &a.nostr_keys().unwrap(), 1_791_417_600, [0; 32]).unwrap();
        let mut j: Value = serde_json::from_str(&ev.as_json()).unwrap();
        j["content"] = json!(ev.content.replace("\"seq\":1", "\"seq\":2"));
        assert!(
            parse_event(j.to_string().as_bytes()).is_err(),
            "id mismatch"
        );
        // A validly signed event whose d tag is not the envelope hash.
        let keys = a.nostr_keys().unwrap();
        let bad = build(
            &keys,
            1,
            [
                tag("p", &hex::encode(a.id().key_bytes())).unwrap(),
                tag("d", &"0".repeat(64)).unwrap(),
            ],
            canon::to_string(&e).unwrap(),
            [0; 32],
        )
        .unwrap();
        assert!(parse_event(bad.as_json().as_bytes()).is_err());
    }

    #[test]
    fn card_pointer_d_tag_and_created_at_rule() {
        let a = AgentKey::from_seed([1; 32]);
        let card = json!({"v": 1, "id": a.id().as_str(), "created": "2026-10-08T00:00:00Z"});
        let card = sign::sign_value(card, &a).unwrap();
        let topic = crate::address::idtopic(a.id());
        let created = parse_time("t", "2026-10-08T00:00:00Z")
            .unwrap()
            .unix_timestamp() as u64;
        assert!(
            card_event(
                &card,
                &topic,
                &a.nostr_keys().unwrap(),
                created - 1,
                [0; 32]
            )
            .is_err()
        );
        let ev = card_event(&card, &topic, &a.nostr_keys().unwrap(), created, [0; 32]).unwrap();
        let (_, c) = parse_event(ev.as_json().as_bytes()).unwrap();
        assert_eq!(
            c,
            Carried::Card {
                topic: topic.clone(),
                card
            }
        );
        let d: Vec<String> = ev.tags.to_vec()[1].as_slice().to_vec();
        assert_eq!(d[1], format!("rdv1/card:{topic}"));
    }

    #[test]
    fn probe_event_d_is_content_hash() {
        let a = AgentKey::from_seed([1; 32]);
        let topic = crate::Address::parse("john@doe.com").unwrap().dtopic();
        let req = json!({"type": "rdv/contact-request"});
        let ev = probe_event(&req, &topic, &a.nostr_keys().unwrap(), 5, [0; 32]).unwrap();
        let (_, c) = parse_event(ev.as_json().as_bytes()).unwrap();
        assert_eq!(
            c,
            Carried::Probe {
                topic,
                request: req
            }
        );
    }
}
