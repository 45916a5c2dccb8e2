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
    Ok(AgentKey::from_seed(crate::encoding::hex_array::<32>(
        "seed", SEEDS[i],
    )?))
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
        ("documents", document_vectors()?),
        ("mail", mail_vectors()?),
        ("restore", restore_vectors()?),
    ];
    Ok(out)
}

/// Inputs for canon: valid ones with their canonical form, invalid ones refused.
pub const CANON_CASES: &[(&str, &str)] = &[
    ("sorted members", r#"{"b":1,"a":2,"c":{"z":true,"y":null}}"#),
    (
        "utf16 order",
        r#"{"\ud83d\ude00":1,"\ue000":2,"a":3,"\u20ac":4}"#,
    ),
    ("escapes", r#"["\u0001\b\t\n\f\r\"\\\/\u007f\u2028\u00e9"]"#),
    ("whitespace", " { \"a\" : [ 1 , -2 , 0 ] } "),
    ("negative zero", "-0"),
    (
        "largest safe integer",
        "[9007199254740991,-9007199254740991]",
    ),
    ("empty containers", r#"{"a":{},"b":[]}"#),
    (
        "depth 32",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    ),
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
    (
        "depth 33",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    ),
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
    let invalid: Vec<Value> = CANON_INVALID
        .iter()
        .map(|(n, i)| json!({"name": n, "input": i}))
        .collect();
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
    Ok(
        json!({"description": "§4.2, §6.2, §6.4: keys and IDs derived from Ed25519 seeds.", "keys": v}),
    )
}

/// Addresses for the topic vectors: valid ones and ones that must be refused.
pub const ADDRESSES: &[&str] = &[
    "john@doe.com",
    "  John@Doe.COM ",
    "+972-54-000-0000",
    "+1 (555) 010.99/99",
    "Ünïcode@Exämple.org",
];
pub const ADDRESSES_INVALID: &[&str] = &[
    "john",
    "john@",
    "@doe.com",
    "a@b@c",
    "jo hn@doe.com",
    "972540000000",
    "+972-54-abc",
    "+",
];

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
    Ok(
        json!({"description": "§4.6: sig over \"rdv1/sig:\" ‖ canon(doc without sig); hash = hex SHA-256 of canon(doc).", "cases": v}),
    )
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
    let (c2, _) = seal_case(
        2,
        Some(&h1),
        &json!({"type": "rdv/resend", "from_seq": 1, "to_seq": 1}),
        0x22,
    )?;
    let overhead = canon::to_vec(&json!({"type": "big", "fill": ""}))?.len();
    let big = json!({"type": "big", "fill": "x".repeat(crate::consts::ENVELOPE_MAX_PLAINTEXT - overhead)});
    let (mut c3, e3) = seal_case(1, None, &big, 0x33)?;
    // The largest case is checked, not stored twice: drop the payload copy.
    c3["payload"] = json!({"type": "big", "fill": format!("x × {}", crate::consts::ENVELOPE_MAX_PLAINTEXT - overhead)});
    c3["payload_note"] = json!(
        "the payload is {\"type\":\"big\",\"fill\":<that many x>}: exactly 32,768 bytes as canonical JSON"
    );

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
    oversize["content"]["ciphertext"] =
        json!("A".repeat(crate::consts::ENVELOPE_MAX_CIPHERTEXT_B64 + 4));
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

fn uuid(n: u8) -> String {
    format!("{n:02x}000000-0000-4000-8000-0000000000{n:02x}")
}

/// One valid signed document of each kind, and for each kind variants that
/// break exactly one rule while still being validly signed (§4.3, §5, §7.8).
fn document_vectors() -> Result<Value> {
    use crate::consts::EXT_GROUPS;
    use crate::doc::card::CardBuilder;
    use crate::doc::grant::{GrantBuilder, GrantRef};
    use crate::doc::group::{
        GroupInvite, GroupJoinBuilder, GroupLeave, GroupState, GroupStateBuilder, Member, Role,
    };
    use crate::doc::group_msg::{GroupMsgBuilder, GroupTo};
    use crate::doc::request::RequestBuilder;
    use crate::doc::resign;
    use crate::doc::revoke::Revoke;

    let t = |s: &str| parse_time("t", s);
    let (carol, alice, bob) = (key(0)?, key(1)?, key(2)?);
    let created = t("2026-10-08T00:00:00Z")?;
    let ts = t("2026-10-08T00:10:00Z")?;
    let relays = vec![
        "wss://relay.one.example".to_string(),
        "wss://relay.two.example".to_string(),
    ];
    let card_of = |k: &AgentKey, addr: &str| -> Result<Value> {
        let mut b = CardBuilder::new(created, relays.clone());
        b.addresses = vec![Address::parse(addr)?];
        b.public_pointer = true;
        b.capabilities.push(crate::consts::EXT_MEETINGS.into());
        b.capabilities.push(EXT_GROUPS.into());
        b.sign(k)
    };
    let alice_card = card_of(&alice, "alice@example.org")?;
    let bob_card = card_of(&bob, "+1 555 010 9999")?;
    let carol_card = card_of(&carol, "carol@example.org")?;

    let request = RequestBuilder {
        id: uuid(1),
        to_hint: Some("+15550109999".into()),
        card: alice_card.clone(),
        greeting: "Alice's agent requests contact on Alice's behalf.".into(),
        capabilities_offered: vec!["a2a/0.3".into()],
        ts,
    }
    .sign(&alice)?;
    let scope = json!({
        "may_initiate": true, "may_propose_meetings": true, "may_access_calendar": "free_busy",
        "max_frequency": "20/day",
        "invoke": {crate::consts::EXT_MEETINGS: {}, crate::consts::EXT_MEETING_CANCEL: {}},
    });
    let grant = GrantBuilder {
        id: uuid(2),
        to: alice.id().clone(),
        reference: GrantRef::Request(uuid(1)),
        card: bob_card.clone(),
        tier: "colleague".into(),
        scope: scope.clone(),
        expires: Some(t("2027-10-08T00:00:00Z")?),
        ts,
    }
    .sign(&bob)?;
    let reverse = GrantBuilder {
        id: uuid(3),
        to: bob.id().clone(),
        reference: GrantRef::Grant(uuid(2)),
        card: alice_card.clone(),
        tier: "friend".into(),
        scope: json!({"may_initiate": true, "may_propose_meetings": true, "max_frequency": "100/day"}),
        expires: None,
        ts,
    }
    .sign(&alice)?;
    let revoke = Revoke::build(&uuid(4), bob.id(), ts, &alice)?;

    let group = uuid(5);
    let member = |k: &AgentKey, role: Role, card: &Value, name: Option<&str>| -> Result<Member> {
        Ok(Member {
            id: k.id().clone(),
            role,
            card: sign::hash(card)?,
            name: name.map(str::to_string),
        })
    };
    let state = GroupStateBuilder {
        group: group.clone(),
        epoch: 0,
        prev: None,
        members: vec![
            member(&alice, Role::Admin, &alice_card, None)?,
            member(&bob, Role::Member, &bob_card, Some("Bob"))?,
        ],
        member_rate: "60/hour".into(),
        name: "Microsite launch".into(),
        ts,
    }
    .sign(&alice)?;
    let state_hash = sign::hash(&state)?;
    let invite = GroupInvite::build(
        &uuid(6),
        carol.id(),
        &state,
        "Help with the microsite?",
        t("2026-10-15T00:10:00Z")?,
        ts,
        &alice,
    )?;
    let join = GroupJoinBuilder {
        id: uuid(7),
        group: group.clone(),
        to: alice.id().clone(),
        invite_ref: Some(uuid(6)),
        state: state_hash.clone(),
        card: carol_card.clone(),
        invoke: json!({"https://rendezvous.nesher.co/ext/request/v1": {}}),
        max_frequency: "20/day".into(),
        ts,
    }
    .sign(&carol)?;
    let leave = GroupLeave::build(&GroupState::verify(&state)?, ts, &bob)?;
    let msg = GroupMsgBuilder {
        group: group.clone(),
        epoch: 0,
        state: state_hash,
        to: GroupTo::Board {
            gseq: 1,
            gprev: None,
        },
        heads: Default::default(),
        ts,
    }
    .sign(&json!({"type": "note", "text": "hello group"}), &bob)?;
    let header = msg.get("msg").cloned().unwrap_or(Value::Null);

    let valid = [
        ("card", &alice_card),
        ("contact-request", &request),
        ("contact-grant", &grant),
        ("contact-grant", &reverse),
        ("revoke", &revoke),
        ("group-state", &state),
        ("group-invite", &invite),
        ("group-join", &join),
        ("group-leave", &leave),
        ("group-msg-header", &header),
    ];
    let mut valid_out = Vec::new();
    for (kind, doc) in valid {
        valid_out.push(json!({"kind": kind, "doc": doc, "hash": sign::hash(doc)?}));
    }

    let edit = |doc: &Value, k: &AgentKey, f: &dyn Fn(&mut Value)| -> Result<Value> {
        let mut d = doc.clone();
        f(&mut d);
        resign(&d, k)
    };
    let mut invalid = Vec::new();
    let mut bad = |name: &str, kind: &str, doc: Value| {
        invalid.push(json!({"name": name, "kind": kind, "doc": doc}))
    };
    bad(
        "card with an unknown top-level member",
        "card",
        edit(&alice_card, &alice, &|d| d["x"] = json!(1))?,
    );
    bad(
        "card with 33 capabilities",
        "card",
        edit(&alice_card, &alice, &|d| {
            d["capabilities"] = json!((0..33).map(|i| format!("urn:x:{i}")).collect::<Vec<_>>())
        })?,
    );
    bad(
        "card with no nostr relay",
        "card",
        edit(&alice_card, &alice, &|d| d["rendezvous"] = json!([]))?,
    );
    bad(
        "expired card",
        "card",
        edit(&alice_card, &alice, &|d| {
            d["expires"] = json!("2026-10-08T00:30:00Z")
        })?,
    );
    let mut forged = alice_card.clone();
    forged["created"] = json!("2026-10-08T00:00:01Z");
    bad("card altered after signing", "card", forged);
    bad(
        "request with a non-UUID id",
        "contact-request",
        edit(&request, &alice, &|d| d["id"] = json!("req-1"))?,
    );
    bad(
        "request whose card is another agent's",
        "contact-request",
        edit(&request, &alice, &|d| d["card"] = bob_card.clone())?,
    );
    bad(
        "request whose card is a string",
        "contact-request",
        edit(&request, &alice, &|d| {
            d["card"] = json!(canon::to_string(&d["card"]).unwrap_or_default())
        })?,
    );
    bad(
        "grant with both request_ref and grant_ref",
        "contact-grant",
        edit(&grant, &bob, &|d| d["grant_ref"] = json!(uuid(9)))?,
    );
    bad(
        "grant with neither request_ref nor grant_ref",
        "contact-grant",
        edit(&grant, &bob, &|d| {
            if let Some(m) = d.as_object_mut() {
                m.remove("request_ref");
            }
        })?,
    );
    bad(
        "grant with an unknown tier",
        "contact-grant",
        edit(&grant, &bob, &|d| d["tier"] = json!("boss"))?,
    );
    bad(
        "grant whose invoke key is not https",
        "contact-grant",
        edit(&grant, &bob, &|d| {
            d["scope"]["invoke"] = json!({"http://example.org/ext/x/v1": {}})
        })?,
    );
    bad(
        "grant with a malformed max_frequency",
        "contact-grant",
        edit(&grant, &bob, &|d| {
            d["scope"]["max_frequency"] = json!("20 per day")
        })?,
    );
    bad(
        "revoke with an extra member",
        "revoke",
        edit(&revoke, &alice, &|d| d["reason"] = json!("x"))?,
    );
    bad(
        "group state with no admin",
        "group-state",
        edit(&state, &alice, &|d| {
            d["members"][0]["role"] = json!("member")
        })?,
    );
    bad(
        "group state with an unknown member field",
        "group-state",
        edit(&state, &alice, &|d| d["members"][1]["x"] = json!(1))?,
    );
    bad(
        "group state at epoch 0 with a prev",
        "group-state",
        edit(&state, &alice, &|d| d["prev"] = json!("a".repeat(64)))?,
    );
    bad(
        "group invite with a 281-character greeting",
        "group-invite",
        edit(&invite, &alice, &|d| d["greeting"] = json!("g".repeat(281)))?,
    );
    bad(
        "group invite to a member",
        "group-invite",
        edit(&invite, &alice, &|d| d["to"] = json!(bob.id().as_str()))?,
    );
    bad(
        "group join invoking the groups extension",
        "group-join",
        edit(&join, &carol, &|d| {
            d["scope"]["invoke"] = json!({EXT_GROUPS: {}})
        })?,
    );
    bad(
        "group join with an extra scope member",
        "group-join",
        edit(&join, &carol, &|d| d["scope"]["tier"] = json!("friend"))?,
    );
    bad(
        "group leave with an unknown member",
        "group-leave",
        edit(&leave, &bob, &|d| d["x"] = json!(1))?,
    );
    bad(
        "group message header with gprev at gseq 1",
        "group-msg-header",
        edit(&header, &bob, &|d| d["gprev"] = json!("a".repeat(64)))?,
    );
    bad(
        "group message header with a bad heads entry",
        "group-msg-header",
        edit(&header, &bob, &|d| {
            d["heads"] = json!({alice.id().as_str(): [0, "abc"]})
        })?,
    );

    Ok(json!({
        "description": "§4.3, §5.1, §5.3, §5.4, §7.8: one valid document of each kind (verify with `rdv proto verify --kind <kind> --now <now>`; the hash is §4.6's) and invalid variants, each validly signed and breaking one rule, that must be refused. The group message is {\"type\": \"rdv/group-msg\", \"msg\": <header>, \"body\"}; `group_msg` gives it whole.",
        "now": NOW,
        "valid": valid_out,
        "group_msg": msg,
        "invalid": invalid,
    }))
}

/// §5.2.1: a probe carried in mail, quoted-printable and base64, and the
/// block both must yield.
fn mail_vectors() -> Result<Value> {
    use crate::mailblock::{MailParams, TransferEncoding, compose, probe_payload};
    let docs = document_vectors()?;
    let request = docs["valid"]
        .as_array()
        .and_then(|v| v.iter().find(|c| c["kind"] == "contact-request"))
        .map(|c| c["doc"].clone())
        .ok_or_else(|| crate::Error::shape("vectors", "no request"))?;
    let payload = probe_payload(&request);
    let mut mails = Vec::new();
    for (name, encoding) in [
        ("quoted-printable", TransferEncoding::QuotedPrintable),
        ("base64", TransferEncoding::Base64),
    ] {
        let p = MailParams {
            from: "alice@example.org",
            to: "bob@example.net",
            date: parse_time("date", "2026-10-08T00:10:00Z")?,
            message_id: "<probe-0001@example.org>",
            encoding,
            subject_line: None,
            intro: None,
        };
        let raw = compose(&payload, &p)?;
        mails.push(json!({"encoding": name, "message": String::from_utf8_lossy(&raw)}));
    }
    // The ACK leg by mail (docs/conformance.md): the requester (seed 1)
    // echoes the SYN-ACK's cookie to the grantor (seed 2).
    let request_id = request["id"]
        .as_str()
        .ok_or_else(|| crate::Error::shape("vectors", "request id"))?;
    let echo = crate::mailblock::ProbeEcho::build(
        request_id,
        key(2)?.id(),
        "mfrggzdfmztwq2lknnwg23tpob4a",
        parse_time("ts", "2026-10-08T00:20:00Z")?,
        &key(1)?,
    )?;
    let echo_mail = compose(
        &echo,
        &MailParams {
            from: "rdv+aaaaaaaaaa@gw.example.org",
            to: "rdv+bbbbbbbbbb@gw.example.org",
            date: parse_time("date", "2026-10-08T00:20:00Z")?,
            message_id: "<ack-0001@gw.example.org>",
            encoding: TransferEncoding::QuotedPrintable,
            subject_line: None,
            intro: None,
        },
    )?;
    Ok(json!({
        "description": "§5.2.1: a mailbox probe as composed mail (CRLF line ends). Extracting the RDV/1 block from either message yields exactly `block` (one line of canonical JSON), whose `request` verifies as a contact request at `now`. `probe_echo` is the ACK leg by mail (docs/conformance.md): `message` yields exactly `block`, an rdv/probe-echo signed by `from` (seed 1) per §4.6.",
        "now": NOW,
        "block": canon::to_string(&payload)?,
        "messages": mails,
        "probe_echo": {
            "block": canon::to_string(&echo)?,
            "message": String::from_utf8_lossy(&echo_mail),
        },
    }))
}

/// §6.4.1: a restore seen from both sides, every envelope sealed for real.
/// Alice (seed 1) wrote seq 1–3 to Bob (seed 2); Bob's backup holds her seq 1
/// and his own seq 1 to her. Restored, Bob sends the notice on a new epoch;
/// Alice answers with the ack in her seq 4 and resends seq 2–3. Times in the
/// payloads are milliseconds; whole seconds are read too, other fractions not.
fn restore_vectors() -> Result<Value> {
    use crate::channel::{Inbound, Meta, Outbound};
    use crate::doc::restored::{Restored, RestoredAck};

    let (alice, bob) = (key(1)?, key(2)?);
    let now = parse_time("now", NOW)?;
    let t = |s: &str| parse_time("t", s);
    let sealed = |from: &AgentKey,
                  out: &mut Outbound,
                  to: &AgentKey,
                  payload: &Value,
                  created: &str,
                  fill: u8|
     -> Result<Value> {
        let (seq, prev) = out.next();
        let prev = prev.map(str::to_string);
        let env = envelope::seal(
            payload,
            &SealParams {
                from,
                to: to.id(),
                seq,
                prev: prev.as_deref(),
                created: t(created)?,
                ttl: "48h",
                ephemeral: [fill; 32],
                nonce: [fill.wrapping_add(1); 12],
            },
        )?;
        let header = envelope::verify_value(&env, now)?.into_parts().0;
        out.record(&header, env.clone());
        Ok(env)
    };
    let meta = |env: &Value| -> Result<Meta> {
        Ok(Meta::from(envelope::verify_value(env, now)?.header()))
    };

    let mut alice_out = Outbound::new();
    let mut alice_chain = Vec::new();
    for (i, created) in [
        "2026-10-08T00:00:00Z",
        "2026-10-08T00:00:10Z",
        "2026-10-08T00:00:20Z",
    ]
    .iter()
    .enumerate()
    {
        let text = format!("note {}", i + 1);
        let payload = json!({"type": "note", "text": text});
        alice_chain.push(sealed(
            &alice,
            &mut alice_out,
            &bob,
            &payload,
            created,
            0x50 + i as u8,
        )?);
    }
    let mut bob_out = Outbound::new();
    let bob_first = sealed(
        &bob,
        &mut bob_out,
        &alice,
        &json!({"type": "note", "text": "hello alice"}),
        "2026-10-08T00:00:05Z",
        0x60,
    )?;

    // Bob restored at 00:30: his epoch jumps to the restore time in ms.
    let restore_time = t("2026-10-08T00:30:00Z")?;
    let backup_created = t("2026-10-08T00:00:06.500Z")?;
    let notice = bob_out.restore(restore_time, 1, Some(backup_created));
    let notice_env = sealed(
        &bob,
        &mut bob_out,
        &alice,
        &notice,
        "2026-10-08T00:30:00Z",
        0x61,
    )?;
    let notice_hash = sign::hash(&notice_env)?;
    bob_out.record_notice(&notice_hash);

    // Alice takes the notice and answers.
    let mut alice_in: Inbound<()> = Inbound::new();
    alice_in.receive(&meta(&bob_first)?, (), true);
    let rebased = alice_in.on_restored(&meta(&notice_env)?, t("2026-10-08T00:30:05Z")?);
    let ack_created = "2026-10-08T00:30:05Z";
    let (ack, resent) = alice_out.ack(&notice_hash, 1, t(ack_created)?);
    let resent: Vec<String> = resent.into_iter().map(sign::hash).collect::<Result<_>>()?;
    let ack_env = sealed(&alice, &mut alice_out, &bob, &ack, ack_created, 0x53)?;

    // Bob takes the ack once; Alice's seq 2 is newer than its floor.
    let parsed = RestoredAck::parse(&ack)?;
    let taken = bob_out.take_ack(&parsed);
    let mut bob_in: Inbound<()> = Inbound::anchored(&meta(&alice_chain[0])?);
    bob_in.on_restored_ack(&parsed);
    let delivers = matches!(
        bob_in.receive(&meta(&alice_chain[1])?, (), true),
        crate::channel::Decision::Deliver { .. }
    );
    if rebased != crate::channel::RestoredDecision::Rebased || !taken || !delivers {
        return Err(crate::Error::shape("vectors", "restore scenario"));
    }

    let read = |input: Value| -> Result<Value> {
        let written = match input["type"].as_str() {
            Some(crate::doc::restored::RESTORED_TYPE) => Restored::parse(&input)?.to_value(),
            _ => RestoredAck::parse(&input)?.to_value(),
        };
        Ok(json!({"input": input, "written": written}))
    };
    let alice_first = sign::hash(&alice_chain[0])?;
    let ack_with = |floor: Value| {
        json!({"type": "rdv/restored-ack", "v": 1, "notice": notice_hash, "from_seq": 2,
               "prev": alice_first, "floor": floor})
    };
    let notice_with = |backup: Value| json!({"type": "rdv/restored", "v": 1, "in_seq": 17, "backup_created": backup});
    let accepted = vec![
        read(notice_with(json!("2026-10-20T08:00:00.000Z")))?,
        read(notice_with(json!("2026-10-20T08:00:00Z")))?,
        read(notice_with(Value::Null))?,
        read(ack_with(json!("2026-10-08T00:00:09.999Z")))?,
        read(ack_with(json!("2026-10-08T00:00:09Z")))?,
    ];
    let mut invalid = Vec::new();
    for (name, v) in [
        ("backup_created", "2026-10-20T08:00:00.5Z"),
        ("backup_created", "2026-10-20T08:00:00.000000Z"),
        ("backup_created", "2026-10-20T10:00:00.000+02:00"),
        ("backup_created", "2026-10-20T08:00:00.000z"),
    ] {
        invalid.push(json!({"name": format!("{name} {v}"), "payload": notice_with(json!(v))}));
    }
    for v in [
        "2026-10-08T00:00:09.99Z",
        "2026-10-08T00:00:09.9990Z",
        "2026-10-08T00:00:09.999+00:00",
    ] {
        invalid.push(json!({"name": format!("floor {v}"), "payload": ack_with(json!(v))}));
    }
    invalid.push(json!({"name": "floor null", "payload": ack_with(Value::Null)}));
    invalid.push(json!({"name": "backup_created missing",
                        "payload": {"type": "rdv/restored", "v": 1, "in_seq": 17}}));

    Ok(json!({
        "description": "§6.4.1: a restore from both sides. `alice_chain` (seed 1 to seed 2, seq 1–3) is Alice's outbox; `bob_first` is Bob's seq 1 to Alice, the last he sent before his backup (`backup_created`), which holds Alice's seq 1. Restored at `restore_time`, Bob sends `notice` first, in `notice_envelope` (seq = restore time in ms, prev = hash of bob_first). Alice answers with `ack` in `ack_envelope` (her seq 4) and resends the envelopes whose hashes are `resend`; `floor` is 1 ms before the created of the first resent one (her seq 2). backup_created and floor are written with exactly three fractional digits; `accepted[].input` parse and are written as `written`; every `invalid[].payload` must be refused.",
        "now": NOW,
        "alice_seed": SEEDS[1],
        "bob_seed": SEEDS[2],
        "alice_chain": alice_chain,
        "bob_first": bob_first,
        "restore_time": crate::time::format_time_ms(restore_time),
        "notice": notice,
        "notice_envelope": notice_env,
        "notice_hash": notice_hash,
        "ack": ack,
        "ack_envelope": ack_env,
        "resend": resent,
        "accepted": accepted,
        "invalid": invalid,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed files are exactly what this code generates. With
    /// `RDV_WRITE_VECTORS=1` it writes them instead, as `rdv proto vectors`.
    #[test]
    fn committed_vectors_are_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/test-vectors");
        let write = std::env::var_os("RDV_WRITE_VECTORS").is_some();
        for (name, v) in generate().unwrap() {
            let path = dir.join(format!("{name}.json"));
            if write {
                let text = serde_json::to_string_pretty(&v).unwrap() + "\n";
                std::fs::write(&path, text).unwrap();
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|_| {
                panic!(
                    "{} missing: run `rdv proto vectors --out docs/test-vectors`",
                    path.display()
                )
            });
            let committed: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                committed, v,
                "{name}.json is stale: run `rdv proto vectors --out docs/test-vectors`"
            );
        }
    }

    /// Every valid document verifies with its hash; every invalid one is refused.
    #[test]
    fn document_vectors_verify() {
        let v = document_vectors().unwrap();
        let now = parse_time("now", NOW).unwrap();
        for c in v["valid"].as_array().unwrap() {
            let kind = c["kind"].as_str().unwrap().parse().unwrap();
            assert_eq!(
                crate::doc::verify_doc(kind, &c["doc"], now).unwrap(),
                c["hash"].as_str().unwrap()
            );
        }
        let invalid = v["invalid"].as_array().unwrap();
        assert!(invalid.len() >= 20);
        for c in invalid {
            let kind = c["kind"].as_str().unwrap().parse().unwrap();
            assert!(
                crate::doc::verify_doc(kind, &c["doc"], now).is_err(),
                "{} accepted",
                c["name"]
            );
        }
        crate::doc::group_msg::parse_group_msg(&v["group_msg"]).unwrap();
    }

    /// Every envelope vector opens (valid) or is refused (invalid).
    #[test]
    fn envelope_vectors_open() {
        let v = envelope_vectors().unwrap();
        let now = parse_time("now", NOW).unwrap();
        let bob = key(2).unwrap();
        for c in v["valid"].as_array().unwrap() {
            let o = envelope::open(&canon::to_vec(&c["envelope"]).unwrap(), &bob, now).unwrap();
            assert_eq!(o.header.hash, c["hash"].as_str().unwrap());
        }
        for c in v["invalid"].as_array().unwrap() {
            assert!(
                envelope::open(&canon::to_vec(&c["envelope"]).unwrap(), &bob, now).is_err(),
                "{}",
                c["name"]
            );
        }
    }

    /// The restore envelopes open to their payloads; accepted payloads are
    /// written as given, invalid ones refused; the floor is seq 2's created
    /// minus 1 ms.
    #[test]
    fn restore_vectors_check() {
        use crate::doc::restored::{Restored, RestoredAck};
        let v = restore_vectors().unwrap();
        let now = parse_time("now", NOW).unwrap();
        let open = |env: &Value, k: usize| {
            envelope::open(&canon::to_vec(env).unwrap(), &key(k).unwrap(), now).unwrap()
        };
        let notice = open(&v["notice_envelope"], 1);
        assert_eq!(Value::Object(notice.payload), v["notice"]);
        assert_eq!(notice.header.seq, 1_791_419_400_000);
        assert_eq!(v["notice"]["backup_created"], "2026-10-08T00:00:06.500Z");
        let ack = open(&v["ack_envelope"], 2);
        assert_eq!(Value::Object(ack.payload), v["ack"]);
        assert_eq!(v["ack"]["floor"], "2026-10-08T00:00:09.999Z");
        assert_eq!(v["alice_chain"][1]["created"], "2026-10-08T00:00:10Z");
        assert_eq!(v["resend"].as_array().unwrap().len(), 2);
        for c in v["accepted"].as_array().unwrap() {
            let written = if c["input"]["type"] == "rdv/restored" {
                Restored::parse(&c["input"]).unwrap().to_value()
            } else {
                RestoredAck::parse(&c["input"]).unwrap().to_value()
            };
            assert_eq!(written, c["written"]);
        }
        for c in v["invalid"].as_array().unwrap() {
            let p = &c["payload"];
            let refused = if p["type"] == "rdv/restored" {
                Restored::parse(p).is_err()
            } else {
                RestoredAck::parse(p).is_err()
            };
            assert!(refused, "{} accepted", c["name"]);
        }
    }

    /// Both composed probe mails yield the same block; the echo verifies.
    #[test]
    fn mail_vectors_extract() {
        let v = mail_vectors().unwrap();
        let e = &v["probe_echo"];
        let block =
            crate::mailblock::extract_block(e["message"].as_str().unwrap().as_bytes()).unwrap();
        assert_eq!(
            canon::to_string(&block).unwrap(),
            e["block"].as_str().unwrap()
        );
        let now = parse_time("now", "2026-10-08T00:30:00Z").unwrap();
        assert!(matches!(
            crate::mailblock::parse_payload(&block, now, false).unwrap(),
            crate::mailblock::BlockPayload::ProbeEcho(_)
        ));
        for m in v["messages"].as_array().unwrap() {
            let block =
                crate::mailblock::extract_block(m["message"].as_str().unwrap().as_bytes()).unwrap();
            assert_eq!(
                canon::to_string(&block).unwrap(),
                v["block"].as_str().unwrap()
            );
        }
    }
}
