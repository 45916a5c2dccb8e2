//! `rdv/card-update` (§4.3, issue #45): a contact's new card, sent over the
//! pairwise channel. The envelope authenticates the sender and the card is
//! self-signed, so the payload has no sig of its own.

use serde_json::{Value, json};

use crate::consts::CARD_UPDATE_MAX_AHEAD_SECS;
use crate::error::{Error, Result};
use crate::keys::AgentId;
use crate::time::Instant;

use super::card::Card;
use super::obj::Obj;

pub const CARD_UPDATE_TYPE: &str = "rdv/card-update";

/// What a receiver does with a card-update (§4.3). Verdicts are data.
#[derive(Debug, Clone, PartialEq)]
pub enum CardUpdateVerdict {
    /// Replace the held card with this one (and nothing else).
    Replace(Box<Card>),
    /// The card already held: ignore.
    SameCard,
    /// Drop it and tell the human.
    Refused(Error),
}

/// The payload carrying `card` (a signed card).
pub fn card_update_payload(card: &Value) -> Value {
    json!({"type": CARD_UPDATE_TYPE, "card": card})
}

/// §4.3: the receiver's checks, for a payload from the current contact
/// `from` (the envelope's), whose card we hold as `held`. A ws:// relay is
/// taken only if `held` listed it, or with `allow_ws` (test or dev).
pub fn check_card_update(
    payload: &Value,
    from: &AgentId,
    held: &Card,
    now: Instant,
    allow_ws: bool,
) -> CardUpdateVerdict {
    match check(payload, from, held, now, allow_ws) {
        Ok(Some(c)) => CardUpdateVerdict::Replace(Box::new(c)),
        Ok(None) => CardUpdateVerdict::SameCard,
        Err(e) => CardUpdateVerdict::Refused(e),
    }
}

fn check(
    payload: &Value,
    from: &AgentId,
    held: &Card,
    now: Instant,
    allow_ws: bool,
) -> Result<Option<Card>> {
    let mut o = Obj::new(payload, "")?;
    o.doc_type(CARD_UPDATE_TYPE)?;
    let doc = o.req("card")?;
    o.deny_unknown()?;
    if crate::sign::hash(doc)? == held.hash {
        return Ok(None);
    }
    // Parsed with ws:// admitted, then narrowed to the held card's relays.
    let card = Card::verify_at(doc, "card", now, true)?;
    if &card.id != from {
        return Err(Error::shape("card.id", "is not the envelope's sender"));
    }
    if card.created <= held.created {
        return Err(Error::shape("card.created", "not later than the card held"));
    }
    if (card.created - now).whole_seconds() > CARD_UPDATE_MAX_AHEAD_SECS {
        return Err(Error::FromFuture("card.created"));
    }
    if !allow_ws {
        for r in &card.relays {
            if r.starts_with("ws://") && !held.relays.contains(r) {
                return Err(Error::shape(
                    "card.rendezvous",
                    format!("ws:// relay {r} was not on the card held"),
                ));
            }
        }
    }
    Ok(Some(card))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::doc::card::tests::builder;
    use crate::doc::testutil::{key, now, t};

    fn held(relays: Vec<&str>) -> Card {
        let mut b = builder();
        b.relays = relays.into_iter().map(String::from).collect();
        Card::verify(&b.sign(&key(1)).unwrap(), now(), true).unwrap()
    }

    fn update(created: &str, relays: Vec<&str>, n: u8) -> Value {
        let mut b = builder();
        b.created = t(created);
        b.relays = relays.into_iter().map(String::from).collect();
        b.capabilities
            .push("https://rendezvous.nesher.co/ext/tasks/v1".into());
        card_update_payload(&b.sign(&key(n)).unwrap())
    }

    fn verdict(p: &Value, held: &Card, allow_ws: bool) -> CardUpdateVerdict {
        check_card_update(p, key(1).id(), held, now(), allow_ws)
    }

    fn refused(v: CardUpdateVerdict) -> Error {
        match v {
            CardUpdateVerdict::Refused(e) => e,
            v => panic!("not refused: {v:?}"),
        }
    }

    #[test]
    fn newer_card_replaces() {
        let h = held(vec!["wss://relay.example"]);
        let p = update("2026-10-08T11:00:00Z", vec!["wss://other.example"], 1);
        match verdict(&p, &h, false) {
            CardUpdateVerdict::Replace(c) => {
                assert_eq!(c.relays, vec!["wss://other.example"]);
                assert!(c.supersedes(&h));
            }
            v => panic!("{v:?}"),
        }
        // At most 10 minutes ahead: exactly 10 passes, one second more fails.
        let p = update("2026-10-08T12:10:00Z", vec!["wss://relay.example"], 1);
        assert!(matches!(
            verdict(&p, &h, false),
            CardUpdateVerdict::Replace(_)
        ));
        let p = update("2026-10-08T12:10:01Z", vec!["wss://relay.example"], 1);
        assert_eq!(
            refused(verdict(&p, &h, false)),
            Error::FromFuture("card.created")
        );
    }

    #[test]
    fn same_and_older() {
        let h = held(vec!["wss://relay.example"]);
        assert_eq!(
            verdict(&card_update_payload(&h.doc), &h, false),
            CardUpdateVerdict::SameCard
        );
        // Same created, different content: not later, refused.
        let p = update("2026-10-08T00:00:00Z", vec!["wss://relay.example"], 1);
        assert!(
            matches!(refused(verdict(&p, &h, false)), Error::Shape { field, .. } if field == "card.created")
        );
        let p = update("2026-10-07T00:00:00Z", vec!["wss://relay.example"], 1);
        assert!(
            matches!(refused(verdict(&p, &h, false)), Error::Shape { field, .. } if field == "card.created")
        );
    }

    #[test]
    fn wrong_sender_bad_sig_bad_shape() {
        let h = held(vec!["wss://relay.example"]);
        let p = update("2026-10-08T11:00:00Z", vec!["wss://relay.example"], 2);
        assert!(
            matches!(refused(verdict(&p, &h, false)), Error::Shape { field, .. } if field == "card.id")
        );
        let mut p = update("2026-10-08T11:00:00Z", vec!["wss://relay.example"], 1);
        p["card"]["created"] = json!("2026-10-08T11:00:01Z");
        assert_eq!(refused(verdict(&p, &h, false)), Error::BadSignature);
        let mut p = update("2026-10-08T11:00:00Z", vec!["wss://relay.example"], 1);
        p["sig"] = json!("x");
        assert_eq!(
            refused(verdict(&p, &h, false)),
            Error::UnknownField("sig".into())
        );
        let p = json!({"type": "rdv/card-updates", "card": h.doc});
        assert!(
            matches!(refused(verdict(&p, &h, false)), Error::Shape { field, .. } if field == "type")
        );
        let none: Vec<&str> = vec![];
        let p = update("2026-10-08T11:00:00Z", none, 1);
        assert!(
            matches!(refused(verdict(&p, &h, false)), Error::Shape { field, .. } if field == "card.rendezvous")
        );
        let many: Vec<String> = (0..17).map(|i| format!("wss://r{i}.example")).collect();
        let p = update(
            "2026-10-08T11:00:00Z",
            many.iter().map(String::as_str).collect(),
            1,
        );
        assert!(
            matches!(refused(verdict(&p, &h, false)), Error::Shape { field, .. } if field == "card.rendezvous")
        );
    }

    #[test]
    fn ws_relays() {
        let h = held(vec!["ws://localhost:7000"]);
        let p = update(
            "2026-10-08T11:00:00Z",
            vec!["ws://localhost:7000", "wss://relay.example"],
            1,
        );
        assert!(matches!(
            verdict(&p, &h, false),
            CardUpdateVerdict::Replace(_)
        ));
        let p = update("2026-10-08T11:00:00Z", vec!["ws://localhost:7001"], 1);
        assert!(
            matches!(refused(verdict(&p, &h, false)), Error::Shape { field, .. } if field == "card.rendezvous")
        );
        assert!(matches!(
            verdict(&p, &h, true),
            CardUpdateVerdict::Replace(_)
        ));
    }

    #[test]
    fn size_bound() {
        let h = held(vec!["wss://relay.example"]);
        let mut b = builder();
        b.created = t("2026-10-08T11:00:00Z");
        b.owner = Some(json!({"name": "x".repeat(crate::consts::CARD_MAX_BYTES)}));
        let p = card_update_payload(&b.sign(&key(1)).unwrap());
        assert!(matches!(
            refused(verdict(&p, &h, false)),
            Error::TooLarge { .. }
        ));
    }
}
