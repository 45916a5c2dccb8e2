//! Deterministic test vectors (docs/test-vectors/*.json), generated here so
//! that they are exactly what this implementation produces, and checked by
//! every crate's tests. Another implementation reads the same files.

use serde_json::{Value, json};

use crate::address::{Address, idtopic};
use crate::canon;
use crate::envelope::{self, SealParams};
use crate::error::Result;
use crate::keys::AgentKey;
use crate::nostr_event;
use crate::sign;
use crate::time::parse_time;

/// Fixed seeds: RFC 8032 test 1's, then simple patterns.
pub const SEEDS: [&str; 3] = [
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "0101010101010101010101010101010101010101010101010101010101010101",
    "0202020202020202020202020202020202020202020202020202020202020202",
];

/// The reference time the vectors are built and checked at.
pub const NOW: &str = "2026-10-08T01:00:00Z";

fn key(i: usize) -> Result<AgentKey> {
    Ok(AgentKey::from_seed(crate::encoding::hex_array::<32>("seed", SEEDS[i])?))
}

/// Every vector file: (file stem, contents).
pub fn generate() -> Result<Vec<(&'static str, Value)>> {
    let out = vec![
        ("canon", canon_vectors()?),
        ("keys", key_vectors()?),
        ("topics", topic_vectors()?),
        ("signatures", signature_vectors()?),
        ("envelopes", envelope_vectors()?),
        ("nostr", nostr_vectors()?),
    ];
    Ok(out)
}

/// Inputs for canon: valid ones with their canonical form, invalid ones refused.
pub const CANON_CASES: &[(&str, &str)] = &[
    ("sorted members", r#"{"b":1,"a":2,"c":{"z":true,"y":null}}"#),
    ("utf16 order", r#"{"\ud83d\ude00":1,"\ue000":2,"a":3,"\u20ac":4}"#),
    ("escapes", r#"["\u0001\b\t\n\f\r\"\\\/\u007f\u2028\u00e9"]"#),
    ("whitespace", " { \"a\" : [ 1 , -2 , 0 ] } "),
    ("negative zero", "-0"),
    ("largest safe integer", "[9007199254740991,-9007199254740991]"),
    ("empty containers", r#"{"a":{},"b":[]}"#),
    ("depth 32", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"),
];

/// Inputs every implementation must refuse.
pub const CANON_INVALID: &[(&str, &str)] = &[
    ("fraction", "1.0"),
    ("exponent", "1e2"),
    ("unsafe integer", "9007199254740992"),
    ("duplicate member", r#"{"a":1,"a":2}"#),
    ("duplicate after unescaping", r#"{"a":1,"\u0061":2}"#),
    ("lone high surrogate", r#""\ud800""#),
    ("lone low surrogate", r#""\udc00""#),
    ("depth 33", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"),
    ("trailing comma", "[1,]"),
    ("leading zero", "01"),
    ("raw control character", "\"a\u{1}\""),
    ("trailing garbage", "[] []"),
];

fn canon_vectors() -> Result<Value> {
    let mut valid = Vec::new();
    for (name, input) in CANON_CASES {
        let c = canon::to_string(&canon::parse_str(input, usize::MAX)?)?;
        valid.push(json!({"name": name, "input": input, "canonical": c}));
    }
    let invalid: Vec<Value> = CANON_INVALID.iter().map(|(n, i)| json!({"name": n, "input": i})).collect();
    Ok(json!({
        "description": "§4.6 canonical JSON. `input` is raw JSON text; `canonical` is the exact output. Every `invalid` input is refused.",
        "valid": valid,
        "invalid": invalid,
    }))
}

fn key_vectors() -> Result<Value> {
    let mut v = Vec::new();
    for (i, s) in SEEDS.iter().enumerate() {
        let k = key(i)?;
        let nostr = k.nostr_keys()?;
        v.push(json!({
            "seed": s,
            "id": k.id().as_str(),
            "fingerprint": k.id().fingerprint(),
            "ed25519_pub": hex::encode(k.id().key_bytes()),
            "x25519_secret": hex::encode(k.x25519_secret().to_bytes()),
            "x25519_pub": hex::encode(k.id().x25519_public()?.as_bytes()),
            "nostr_secret": nostr.secret_key().to_secret_hex(),
            "nostr_pub": nostr.public_key().to_hex(),
        }));
    }
    Ok(json!({"description": "§4.2, §6.2, §6.4: keys and IDs derived from Ed25519 seeds.", "keys": v}))
}

/// Addresses for the topic vectors: valid ones and ones that must be refused.
pub const ADDRESSES: &[&str] =
    &["john@doe.com", "  John@Doe.COM ", "+972-54-000-0000", "+1 (555) 010.99/99", "Ünïcode@Exämple.org"];
pub const ADDRESSES_INVALID: &[&str] = &["john", "john@", "@doe.com", "a@b@c", "jo hn@doe.com", "972540000000", "+972-54-abc", "+"];

fn topic_vectors() -> Result<Value> {
    let mut a = Vec::new();
    for s in ADDRESSES {
        let addr = Address::parse(s)?;
        a.push(json!({"input": s, "canon": addr.canon(), "dtopic": addr.dtopic()}));
    }
    let mut ids = Vec::new();
    for i in 0..SEEDS.len() {
        let k = key(i)?;
        ids.push(json!({"id": k.id().as_str(), "idtopic": idtopic(k.id())}));
    }
    Ok(json!({
        "description": "§4.4, §4.6: canon(address), dtopic and idtopic.",
        "addresses": a,
        "invalid_addresses": ADDRESSES_INVALID,
        "ids": ids,
    }))
}

fn signature_vectors() -> Result<Value> {
    let k = key(0)?;
    let docs = [
        json!({"v": 1, "type": "example", "text": "héllo", "n": 42, "list": [1, null, true]}),
        json!({"z": "last", "a": "first", "\u{e000}": "private use", "\u{1f600}": "emoji"}),
    ];
    let mut v = Vec::new();
    for d in docs {
        let signed = sign::sign_value(d.clone(), &k)?;
        let mut input = crate::consts::SIG_PREFIX.to_vec();
        input.extend(canon::to_vec(&d)?);
        v.push(json!({
            "seed": SEEDS[0],
            "unsigned": d,
            "signing_input": String::from_utf8_lossy(&input),
            "signed": signed,
            "signed_canonical": canon::to_string(&signed)?,
            "hash": sign::hash(&signed)?,
        }));
    }
    Ok(json!({"description": "§4.6: sig over \"rdv1/sig:\" ‖ canon(doc without sig); hash = hex SHA-256 of canon(doc).", "cases": v}))
}

fn seal_case(seq: u64, prev: Option<&str>, payload: &Value, fill: u8) -> Result<(Value, Value)> {
    let a = key(1)?;
    let b = key(2)?;
    let p = SealParams {
        from: &a,
        to: b.id(),
        seq,
        prev,
        created: parse_time("created", "2026-10-08T00:00:00Z")?,
        ttl: "48h",
        ephemeral: [fill; 32],
        nonce: [fill.wrapping_add(1); 12],
    };
    let env = envelope::seal(payload, &p)?;
    let case = json!({
        "sender_seed": SEEDS[1],
        "recipient_seed": SEEDS[2],
        "seq": seq,
        "prev": prev,
        "created": "2026-10-08T00:00:00Z",
        "ttl": "48h",
        "ephemeral_seed": hex::encode([fill; 32]),
        "nonce": hex::encode([fill.wrapping_add(1); 12]),
        "payload": payload,
        "envelope": env,
        "hash": sign::hash(&env)?,
    });
    Ok((case, env))
}

fn envelope_vectors() -> Result<Value> {
    let (c1, e1) = seal_case(1, None, &json!({"type": "note", "text": "hello ☃"}), 0x11)?;
    let h1 = sign::hash(&e1)?;
    let (c2, _) = seal_case(2, Some(&h1), &json!({"type": "rdv/resend", "from_seq": 1, "to_seq": 1}), 0x22)?;
    let overhead = canon::to_vec(&json!({"type": "big", "fill": ""}))?.len();
    let big = json!({"type": "big", "fill": "x".repeat(crate::consts::ENVELOPE_MAX_PLAINTEXT - overhead)});
    let (mut c3, e3) = seal_case(1, None, &big, 0x33)?;
    // The largest case is checked, not stored twice: drop the payload copy.
    c3["payload"] = json!({"type": "big", "fill": format!("x × {}", crate::consts::ENVELOPE_MAX_PLAINTEXT - overhead)});
    c3["payload_note"] = json!("the payload is {\"type\":\"big\",\"fill\":<that many x>}: exactly 32,768 bytes as canonical JSON");

    let b = key(2)?;
    let mut invalid = Vec::new();
    // §6.4: a genuine header with a substituted ciphertext.
    let mallory = key(0)?;
    let forged_src = envelope::seal(
        &json!({"type": "note", "text": "forged"}),
        &SealParams {
            from: &mallory,
            to: b.id(),
            seq: 1,
            prev: None,
            created: parse_time("created", "2026-10-08T00:00:00Z")?,
            ttl: "48h",
            ephemeral: [0x44; 32],
            nonce: [0x45; 12],
        },
    )?;
    let mut swapped = e1.clone();
    swapped["content"] = forged_src["content"].clone();
    invalid.push(json!({"name": "swapped ciphertext under a genuine header", "envelope": swapped, "error": "bad signature"}));
    let mut oversize = e3.clone();
    oversize["content"]["ciphertext"] = json!("A".repeat(crate::consts::ENVELOPE_MAX_CIPHERTEXT_B64 + 4));
    invalid.push(json!({"name": "ciphertext over the cap (refused from its base64 length, before the signature)", "envelope": oversize, "error": "too large"}));
    let a = key(1)?;
    let resign = |f: &dyn Fn(&mut Value)| -> Result<Value> {
        let mut e = e1.clone();
        if let Some(m) = e.as_object_mut() {
            m.remove("sig");
        }
        f(&mut e);
        sign::sign_value(e, &a)
    };
    invalid.push(json!({"name": "ttl over 7 days (validly signed)", "envelope": resign(&|e| e["ttl"] = json!("8d"))?, "error": "ttl"}));
    invalid.push(json!({"name": "created more than 5 minutes ahead of now", "envelope": resign(&|e| e["created"] = json!("2026-10-08T01:05:01Z"))?, "error": "future"}));
    invalid.push(json!({"name": "expired (created + ttl before now)", "envelope": resign(&|e| e["created"] = json!("2026-10-05T00:59:59Z"))?, "error": "expired"}));
    invalid.push(json!({"name": "unknown header field (validly signed)", "envelope": resign(&|e| e["x"] = json!(1))?, "error": "unknown field"}));
    Ok(json!({
        "description": "§6.4: envelopes. X25519 secret of the recipient = clamped SHA-512(seed)[0..32]; key = HKDF-SHA256(X25519(eph, recipient), salt = epk ‖ recipient_pub, info \"rdv1/envelope\"); AES-256-GCM, AAD = canon of the header fields {v,from,to,seq,prev,created,ttl}. Open each valid case with recipient_seed at `now`; each invalid one must be refused.",
        "now": NOW,
        "valid": [c1, c2, c3],
        "largest_envelope_hash": sign::hash(&e3)?,
        "invalid": invalid,
    }))
}

fn nostr_vectors() -> Result<Value> {
    let a = key(1)?;
    let carrier = a.nostr_keys()?;
    let (_, env) = seal_case(1, None, &json!({"type": "note", "text": "hello ☃"}), 0x11)?;
    let aux = [0u8; 32];
    let ev = nostr_event::envelope_event(&env, &carrier, 1_791_421_200, aux)?;
    let card = sign::sign_value(
        json!({"v": 1, "id": a.id().as_str(), "created": "2026-10-08T00:00:00Z", "expires": null,
               "capabilities": ["rdv/v1", "a2a/0.3"],
               "rendezvous": [{"type": "nostr", "relay": "wss://relay.example", "pref": 1}],
               "policy": {"inbound": "prompt", "public": true}}),
        &a,
    )?;
    let topic = idtopic(a.id());
    let cev = nostr_event::card_event(&card, &topic, &carrier, 1_791_417_600, aux)?;
    let as_value = |e: &nostr::event::Event| canon::parse(e.as_json().as_bytes(), usize::MAX);
    Ok(json!({
        "description": "§6.2: kind 30417 events signed with the carrier key (BIP-340, aux_rand = 32 zero bytes). Envelope tags [[p, recipient Ed25519 hex], [d, envelope hash]]; card tags [[t, topic], [d, \"rdv1/card:\" ‖ topic]]; content = canonical JSON.",
        "seed": SEEDS[1],
        "aux_rand": hex::encode(aux),
        "envelope_event": {"created_at": 1_791_421_200u64, "envelope": env, "event": as_value(&ev)?},
        "card_event": {"created_at": 1_791_417_600u64, "topic": topic, "card": card, "event": as_value(&cev)?},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed files are exactly what this code generates.
    #[test]
    fn committed_vectors_are_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/test-vectors");
        for (name, v) in generate().unwrap() {
            let path = dir.join(format!("{name}.json"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|_| panic!("{} missing: run `rdv proto vectors --out docs/test-vectors`", path.display()));
            let committed: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(committed, v, "{name}.json is stale: run `rdv proto vectors --out docs/test-vectors`");
        }
    }
}
