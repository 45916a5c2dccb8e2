//! The directory's signed documents as a reader meets them (`listing.rs`,
//! `lookup.rs`, `seal.rs`): `rdv_proto::canon::parse`, then
//! `Listing::parse_signed` and `Listing::verify`, `Removal::verify`,
//! `Derived::find` (signature, key, expiry, unsealing, the card and its
//! claim of the address) and `seal::open`.
//!
//! Input: a mode byte, then the rest, in which `\x01` + a letter expands to
//! a fixture (see `common::expand`: `\x01L` a real signed listing, `\x01R`
//! a real removal, `\x01I` its lookup_id, `\x01S` a sealed card, `\x01K`
//! the key id, ...). Mode bits 0-1: 0 the rest is a document; 1 the rest is
//! edits (two offset bytes and an XOR byte each) to the real listing (the
//! removal when bit 2 is set); 2 the rest is a card, re-signed, sealed
//! under the first address's OPRF output and listed for it, then looked
//! up; 3 the rest is a `sealed` value, opened and also listed and looked up.
//! Bit 2 in modes 0 and 2: re-sign the document as the fixture agent
//! (setting `agent`, or a card's `id`), so the checks behind the signature
//! are reached; in mode 1, bit 3 does. Bit 4 allows `ws://` relays in cards.
//!
//! Checked: nothing panics; an accepted listing or removal keeps its
//! document, holds its invariants (hex ids, `updated` < `expires` within 30
//! days), reads the same from its canonical bytes, and, when signed by the
//! fixture agent with whole-second times, is byte for byte what
//! `Listing::sign` / `Removal::sign` make of its fields; `verify` accepts
//! only what `parse_signed` does, unexpired and not ahead of the clock;
//! every card a lookup accepts is the listing agent's, claims the address,
//! is under the key and lookup_id asked for and unexpired, and every
//! matching entry is either accepted or refused; a value that unseals
//! seals and unseals back to itself. Run with `scripts/fuzz 120 listing`.
#![no_main]

mod common;

use common::{FX, check_lookup, expand};
use libfuzzer_sys::fuzz_target;
use rdv_directory_client::listing::{Listing, REMOVE_MAX_BYTES, Removal};
use rdv_directory_client::seal;
use rdv_proto::consts::{DIR_LISTING_MAX_BYTES, DIR_LISTING_MAX_LIFETIME_SECS, DIR_MAX_AHEAD_SECS};
use rdv_proto::doc::resign;
use rdv_proto::encoding::is_hash;
use rdv_proto::time::format_time;
use rdv_proto::{AgentKey, canon};
use serde_json::{Value, json};

/// Parsing is bounded by the caller: a listing's limit, with room to spare.
const MAX: usize = 2 * DIR_LISTING_MAX_BYTES;

/// `doc` with `field` set to `key`'s id and signed again by `key`.
fn resigned(doc: &Value, field: &str, key: &AgentKey) -> Option<Value> {
    let mut d = doc.clone();
    d.as_object_mut()?
        .insert(field.into(), json!(key.id().as_str()));
    resign(&d, key).ok()
}

fn whole_seconds(doc: &Value, field: &str, t: time::OffsetDateTime) -> bool {
    doc.get(field).and_then(Value::as_str) == Some(format_time(t).as_str())
}

/// Every reader of a document, with the properties of what it accepts.
fn readers(doc: &Value, allow_ws: bool) {
    let fx = &*FX;
    let now = fx.now;
    let by_fixture = doc.get("agent").and_then(Value::as_str) == Some(fx.agent.id().as_str());
    let again = canon::to_vec(doc)
        .ok()
        .and_then(|b| canon::parse(&b, usize::MAX).ok());

    let parsed = Listing::parse_signed(doc);
    if let Ok(l) = &parsed {
        assert_eq!(&l.doc, doc, "listing keeps its document");
        assert!(is_hash(&l.key_id) && is_hash(&l.lookup_id), "ids are hex");
        assert!(l.updated < l.expires, "updated before expires");
        assert!((l.expires - l.updated).whole_seconds() <= DIR_LISTING_MAX_LIFETIME_SECS);
        let again = again.as_ref().expect("an accepted listing is canonical");
        assert_eq!(again, doc, "canonical bytes read back the same");
        assert_eq!(Listing::parse_signed(again).as_ref(), Ok(l));
        if by_fixture
            && whole_seconds(doc, "updated", l.updated)
            && whole_seconds(doc, "expires", l.expires)
        {
            let signed = Listing::sign(
                &fx.agent,
                &l.key_id,
                &l.lookup_id,
                &l.sealed,
                l.updated,
                l.expires,
            )
            .expect("an accepted listing signs again");
            assert_eq!(&signed, doc, "Listing::sign of its fields");
        }
    }
    match Listing::verify(doc, now) {
        Ok(l) => {
            assert_eq!(
                parsed.as_ref(),
                Ok(&l),
                "verify accepts what parse_signed does"
            );
            assert!(l.expires > now, "expired listing verified");
            assert!((l.updated - now).whole_seconds() <= DIR_MAX_AHEAD_SECS);
        }
        Err(_) => {
            if let Ok(l) = &parsed {
                assert!(
                    l.expires <= now || (l.updated - now).whole_seconds() > DIR_MAX_AHEAD_SECS,
                    "a current listing refused"
                );
            }
        }
    }

    if let Ok(r) = Removal::verify(doc, now) {
        assert!(is_hash(&r.key_id) && is_hash(&r.lookup_id), "ids are hex");
        assert!((r.updated - now).whole_seconds() <= DIR_MAX_AHEAD_SECS);
        let again = again.as_ref().expect("an accepted removal is canonical");
        assert_eq!(Removal::verify(again, now).as_ref(), Ok(&r));
        if by_fixture && whole_seconds(doc, "updated", r.updated) {
            let signed = Removal::sign(&fx.agent, &r.key_id, &r.lookup_id, r.updated)
                .expect("an accepted removal signs again");
            assert_eq!(&signed, doc, "Removal::sign of its fields");
        }
    }

    lookup(std::slice::from_ref(doc), allow_ws);
}

/// `Derived::find` of the first address over `entries`.
fn lookup(entries: &[Value], allow_ws: bool) {
    check_lookup(&FX.derived[0], entries, allow_ws);
}

/// A listing of the first address by the fixture agent with this `sealed`.
fn listing_with(sealed: &str) -> Option<Value> {
    let fx = &*FX;
    Listing::sign(
        &fx.agent,
        &fx.key_id,
        &fx.derived[0].lookup_id,
        sealed,
        common::t("2026-10-08T00:00:00Z"),
        common::t("2026-10-18T00:00:00Z"),
    )
    .ok()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let fx = &*FX;
    let allow_ws = mode & 0x10 != 0;
    match mode & 3 {
        0 => {
            let Ok(mut doc) = canon::parse(&expand(rest), MAX) else {
                return;
            };
            if mode & 4 != 0 {
                let Some(d) = resigned(&doc, "agent", &fx.agent) else {
                    return;
                };
                doc = d;
            }
            readers(&doc, allow_ws);
        }
        1 => {
            let base = if mode & 4 != 0 {
                &fx.removal
            } else {
                &fx.listing
            };
            let mut bytes = canon::to_vec(base).expect("canonical");
            for e in rest.chunks_exact(3) {
                let at = usize::from(u16::from_be_bytes([e[0], e[1]])) % bytes.len();
                bytes[at] ^= e[2];
            }
            let limit = if mode & 4 != 0 {
                REMOVE_MAX_BYTES
            } else {
                DIR_LISTING_MAX_BYTES
            };
            let Ok(mut doc) = canon::parse(&bytes, limit) else {
                return;
            };
            if mode & 8 != 0 {
                let Some(d) = resigned(&doc, "agent", &fx.agent) else {
                    return;
                };
                doc = d;
            } else if bytes != canon::to_vec(base).expect("canonical") {
                // An edit of the signed bytes that still parses: the
                // signature must fail unless the edit left the signed
                // content as it was (white space).
                if doc != *base {
                    assert!(
                        Listing::parse_signed(&doc).is_err(),
                        "edited listing accepted"
                    );
                    assert!(
                        Removal::verify(&doc, fx.now).is_err(),
                        "edited removal accepted"
                    );
                }
            }
            readers(&doc, allow_ws);
        }
        2 => {
            let Ok(mut card) = canon::parse(&expand(rest), MAX) else {
                return;
            };
            if mode & 4 != 0 {
                let Some(c) = resigned(&card, "id", &fx.agent) else {
                    return;
                };
                card = c;
            }
            // Sealed under the first address's OPRF output, listed for it.
            let Ok(listing) = fx.derived[0].listing(
                &fx.agent,
                &card,
                &fx.key_id,
                common::t("2026-10-08T00:00:00Z"),
                common::t("2026-10-18T00:00:00Z"),
                &mut common::Mix(u64::from(mode)),
            ) else {
                return;
            };
            let l = Listing::parse_signed(&listing).expect("a listing we signed parses");
            assert_eq!(
                seal::open(&l.sealed, &fx.ys[0]).as_ref(),
                Ok(&card),
                "a sealed card opens to itself"
            );
            readers(&listing, allow_ws);
            lookup(&[listing, fx.listing.clone()], allow_ws);
        }
        _ => {
            let Ok(sealed) = std::str::from_utf8(rest) else {
                return;
            };
            let sealed = String::from_utf8_lossy(&expand(sealed.as_bytes())).into_owned();
            if let Ok(v) = seal::open(&sealed, &fx.ys[0]) {
                // What unseals seals and unseals back to itself.
                if let Ok(s) = seal::seal(&v, &fx.ys[0], &mut common::Mix(1)) {
                    assert_eq!(seal::open(&s, &fx.ys[0]).as_ref(), Ok(&v));
                }
            }
            if let Some(doc) = listing_with(&sealed) {
                readers(&doc, allow_ws);
            }
        }
    }
});
