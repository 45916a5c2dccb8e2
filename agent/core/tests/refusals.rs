//! A refused input changes no state (SPEC §5: every received document is
//! verified before any state changes; §5.4: a blocked key and the block
//! policy get silence). The two rules the inbound fuzz target found broken
//! (a refused request recorded as seen; a repeated card-update counted)
//! have their own tests here, and every refusal of a set of hostile inputs
//! leaves the node's records byte for byte as they were.
#![allow(clippy::unwrap_used)]

mod common;

use common::Net;
use rdv_agent_core::Command;
use rdv_agent_core::record::Table;
use rdv_proto::doc::card_update::card_update_payload;
use rdv_proto::{Address, AgentKey};
use serde_json::{Value, json};

const ALICE: usize = 0;
const BOB: usize = 1;
const CAROL: usize = 2;
const DAVE: usize = 3;
/// Never initialised, never heard of by Alice: a stranger's key.
const ERIN: usize = 4;

fn alice_topic() -> String {
    Address::parse("alice@example.com").unwrap().dtopic()
}

/// Alice (alice@example.com) with Bob as a contact, Carol blocked, Dave a
/// stranger who will ask her, Erin a stranger who never does.
fn world() -> Net {
    let mut net = Net::new(5);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    net.init(CAROL, &["carol@example.com"]);
    net.init(DAVE, &["dave@example.com"]);
    net.befriend(BOB, ALICE, "alice@example.com");
    net.cmd(
        ALICE,
        Command::Block {
            id: net.nodes[CAROL].id(),
        },
    )
    .unwrap();
    net
}

/// Asserts two snapshots are the same, naming the records that differ.
fn same(after: &common::Snapshot, before: &common::Snapshot, what: &str) {
    if after == before {
        return;
    }
    let show = |s: &common::Snapshot| -> Vec<String> {
        s.iter()
            .map(|(t, k, v)| format!("{t:?}/{k}: {}", String::from_utf8_lossy(v)))
            .collect()
    };
    let (a, b) = (show(after), show(before));
    let gone: Vec<&String> = b.iter().filter(|x| !a.contains(x)).collect();
    let new: Vec<&String> = a.iter().filter(|x| !b.contains(x)).collect();
    panic!("{what}: the records changed\nbefore: {gone:#?}\nafter: {new:#?}");
}

fn set_policy(net: &mut Net, i: usize, inbound: &str) {
    net.cmd(
        i,
        Command::SetPolicy {
            inbound: inbound.into(),
        },
    )
    .unwrap();
}

/// Node `i`'s records without the one kept chain of `from`: an admitted
/// sender's envelope moves its chain on even when its payload is refused
/// (§6.4 orders the channel before reading the payload).
fn snapshot_but_chain(net: &Net, i: usize, from: usize) -> common::Snapshot {
    let from = net.nodes[from].id().to_string();
    net.nodes[i]
        .snapshot()
        .into_iter()
        .filter(|(t, k, _)| !(*t == Table::ChannelIn && *k == from))
        .collect()
}

// ---- the fuzz-found rules ---------------------------------------------------

/// Under the block policy a request gets silence and leaves nothing behind:
/// not even its id as seen, so the owner who opens the policy later sees
/// the same request when it comes again (fuzz-found, b68f84c).
#[test]
fn a_request_refused_by_the_block_policy_is_not_recorded_as_seen() {
    let mut net = world();
    set_policy(&mut net, ALICE, "block");
    let probe = net.probe_event(DAVE, "alice@example.com", &alice_topic());
    let before = net.nodes[ALICE].snapshot();
    let out = net.inject(ALICE, &probe);
    assert!(out.events.is_empty() && out.effects.is_empty());
    let request: Value = serde_json::from_str(probe["content"].as_str().unwrap()).unwrap();
    let id = request["id"].as_str().unwrap();
    assert!(!net.nodes[ALICE].agent.state.seen.contains_key(id));
    same(
        &net.nodes[ALICE].snapshot(),
        &before,
        "a request refused by the block policy changed the records",
    );

    // Not seen, so not a replay: once the owner prompts, it is asked.
    set_policy(&mut net, ALICE, "prompt");
    net.inject(ALICE, &probe);
    let dave = net.nodes[DAVE].id();
    let reqs: Vec<Value> = net.nodes[ALICE]
        .events_of("contact_request")
        .into_iter()
        .filter(|r| r["from"] == dave.as_str())
        .collect();
    assert_eq!(reqs.len(), 1, "the request was kept as seen while refused");
}

/// A request from a current contact decides nothing and keeps nothing
/// (fuzz-found, b68f84c: its id was recorded as seen).
#[test]
fn a_request_from_a_current_contact_changes_no_state() {
    let mut net = world();
    let probe = net.probe_event(BOB, "alice@example.com", &alice_topic());
    let before = net.nodes[ALICE].snapshot();
    let out = net.inject(ALICE, &probe);
    assert!(out.events.is_empty() && out.effects.is_empty());
    assert!(net.nodes[ALICE].agent.state.pending.is_empty());
    same(
        &net.nodes[ALICE].snapshot(),
        &before,
        "a current contact's request changed the records",
    );
}

/// §4.3: the card a contact already holds, sent again, is ignored and not
/// counted (fuzz-found, b68f84c): the contact's record is byte for byte
/// what it was, and 25 repeats do not use up the 20 an hour, so the next
/// real change still lands.
#[test]
fn a_repeated_card_update_is_not_counted_and_changes_no_state() {
    let mut net = world();
    let bob = net.nodes[BOB].id();
    net.cmd(
        BOB,
        Command::AddRelay {
            url: "wss://relay2.test".into(),
        },
    )
    .unwrap();
    assert_eq!(net.nodes[ALICE].events_of("card_updated").len(), 1);
    let held = &net.nodes[ALICE].agent.state.contacts[&bob];
    assert_eq!(held.card, net.card(BOB));
    assert_eq!(held.card_updates.len(), 1);

    let same = card_update_payload(&net.card(BOB));
    let contact_record = |net: &Net| {
        net.nodes[ALICE]
            .snapshot()
            .into_iter()
            .find(|(t, k, _)| *t == Table::Contact && k == bob.as_str())
            .unwrap()
    };
    let before = contact_record(&net);
    let before_rest = snapshot_but_chain(&net, ALICE, BOB);
    for _ in 0..25 {
        let ev = net.forge(BOB, ALICE, &same);
        let out = net.inject(ALICE, &ev);
        assert!(out.events.is_empty(), "{:?}", out.events);
    }
    assert_eq!(
        contact_record(&net),
        before,
        "a repeated card-update changed the contact's record"
    );
    assert_eq!(snapshot_but_chain(&net, ALICE, BOB), before_rest);
    assert_eq!(
        net.nodes[ALICE].agent.state.contacts[&bob]
            .card_updates
            .len(),
        1
    );

    // The hourly bound is still whole: a real change is taken.
    net.advance(2);
    net.cmd(
        BOB,
        Command::AddRelay {
            url: "wss://relay3.test".into(),
        },
    )
    .unwrap();
    assert!(
        net.nodes[ALICE].events_of("card_update_refused").is_empty(),
        "{:?}",
        net.nodes[ALICE].events_of("card_update_refused")
    );
    assert_eq!(net.nodes[ALICE].events_of("card_updated").len(), 2);
    assert_eq!(
        net.nodes[ALICE].agent.state.contacts[&bob].card,
        net.card(BOB)
    );
}

// ---- every refusal ----------------------------------------------------------

/// An event JSON with one field changed (its id and signature no longer hold).
fn with(ev: &Value, field: &str, v: Value) -> Value {
    let mut e = ev.clone();
    e[field] = v;
    e
}

/// The envelope inside an envelope event.
fn envelope_of(ev: &Value) -> Value {
    serde_json::from_str(ev["content"].as_str().unwrap()).unwrap()
}

/// A validly signed Nostr event of another kind, tagged for `to`.
fn text_note_for(net: &Net, to: usize) -> Value {
    use nostr::event::{Kind, Tag, UnsignedEvent};
    let keys = AgentKey::from_seed([42; 32]).nostr_keys().unwrap();
    let p = hex::encode(net.nodes[to].id().key_bytes());
    let mut unsigned = UnsignedEvent::new(
        keys.public_key(),
        nostr::types::Timestamp::from_secs(net.now.unix_timestamp() as u64),
        Kind::TextNote,
        [Tag::parse(["p", p.as_str()]).unwrap()],
        "hello",
    );
    let id = unsigned.id();
    let secp = secp256k1::Secp256k1::signing_only();
    let sig = keys.sign_schnorr_with_aux_rand(&secp, id.as_bytes(), &[5; 32]);
    serde_json::to_value(unsigned.add_signature(sig).unwrap()).unwrap()
}

/// Each of a set of hostile inputs is refused (no event, no effect) and
/// leaves Alice's records byte for byte as they were: bad signatures (the
/// Nostr event's, the envelope's, the request's), oversize events and
/// envelopes, the wrong recipient, replays, blocked keys, unknown kinds and
/// payload types, and requests her policy or her contacts refuse.
#[test]
fn refused_inputs_leave_the_records_byte_identical() {
    let mut net = world();
    let topic = alice_topic();

    // What the cases are made of, made first (forging moves the sender's
    // own chain, never Alice's records).
    let note = json!({"type": "note/text", "text": "hi"});
    let from_bob = net.forge(BOB, ALICE, &note);
    // Delivered once, so the same event again is a replay.
    net.inject(ALICE, &from_bob);
    assert_eq!(net.nodes[ALICE].events_of("message").len(), 1);
    let bob_next = net.forge(BOB, ALICE, &note);
    let dave_probe = net.probe_event(DAVE, "alice@example.com", &topic);
    // Pending at Alice, so the same event again is a replay.
    net.inject(ALICE, &dave_probe);
    assert_eq!(net.nodes[ALICE].agent.state.pending.len(), 1);

    let mut bad_env = envelope_of(&bob_next);
    let sig = bad_env["sig"].as_str().unwrap().to_string();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    bad_env["sig"] = json!(format!("{flipped}{}", &sig[1..]));
    let mut tampered_request = net.probe_event(DAVE, "alice@example.com", &topic);
    let mut req: Value =
        serde_json::from_str(tampered_request["content"].as_str().unwrap()).unwrap();
    req["greeting"] = json!("changed after signing");
    let carrier = AgentKey::from_seed([9; 32]).nostr_keys().unwrap();
    tampered_request = serde_json::to_value(
        rdv_proto::nostr_event::probe_event(
            &req,
            &topic,
            &carrier,
            net.now.unix_timestamp() as u64,
            [3; 32],
        )
        .unwrap(),
    )
    .unwrap();
    let oversize_event = serde_json::to_value(
        rdv_proto::nostr_event::probe_event(
            &json!({"type": "rdv/contact-request", "pad": "x".repeat(100 * 1024)}),
            &topic,
            &carrier,
            net.now.unix_timestamp() as u64,
            [4; 32],
        )
        .unwrap(),
    )
    .unwrap();
    let mut big = envelope_of(&bob_next);
    big["pad"] = json!("x".repeat(60 * 1024));
    let oversize_envelope = net.wrap(BOB, &big);
    let to_dave = net.forge(BOB, DAVE, &note);
    let wrong_hint = net.probe_event(DAVE, "mallory@example.com", &topic);
    let other_topic = net.probe_event(
        DAVE,
        "alice@example.com",
        &Address::parse("nobody@example.com").unwrap().dtopic(),
    );
    let carol_probe = net.probe_event(CAROL, "alice@example.com", &topic);
    let carol_request = {
        let key = AgentKey::from_seed(net.nodes[CAROL].key);
        rdv_proto::doc::request::RequestBuilder {
            id: "7b0e9a52-3c1f-4a55-9d1e-2f4b6c8d0a11".into(),
            to_hint: None,
            card: net.card(CAROL),
            greeting: "let me in".into(),
            capabilities_offered: Vec::new(),
            ts: net.now,
        }
        .sign(&key)
        .unwrap()
    };
    let carol_envelope = net.forge(CAROL, ALICE, &carol_request);
    let bogus_from_stranger = net.forge(ERIN, ALICE, &json!({"type": "rdv/bogus"}));
    let app_from_stranger = net.forge(ERIN, ALICE, &json!({"type": "x.unknown/thing"}));
    let text_note = text_note_for(&net, ALICE);
    let bob_again = net.probe_event(BOB, "alice@example.com", &topic);

    let cases: Vec<(&str, Value)> = vec![
        (
            "bad Nostr signature",
            with(&bob_next, "sig", json!("00".repeat(64))),
        ),
        (
            "content changed under the Nostr signature",
            with(&bob_next, "content", json!("{}")),
        ),
        ("bad envelope signature", net.wrap(BOB, &bad_env)),
        ("bad request signature", tampered_request),
        ("oversize event", oversize_event),
        ("oversize envelope", oversize_envelope),
        ("envelope for another agent", to_dave),
        ("probe naming another address", wrong_hint),
        ("probe on a topic not ours", other_topic),
        ("replayed envelope", from_bob),
        ("replayed probe", dave_probe),
        ("blocked key's probe", carol_probe),
        ("blocked key's envelope", carol_envelope),
        ("unknown rdv type from a stranger", bogus_from_stranger),
        ("app payload from a stranger", app_from_stranger),
        ("unknown event kind", text_note),
        ("request from a current contact", bob_again),
    ];
    for (what, ev) in cases {
        let before = net.nodes[ALICE].snapshot();
        let out = net.inject(ALICE, &ev);
        assert!(
            out.events.is_empty() && out.effects.is_empty(),
            "{what}: {:?} {:?}",
            out.events,
            out.effects
        );
        same(&net.nodes[ALICE].snapshot(), &before, what);
    }

    // The block policy: a new request is silence and leaves nothing.
    set_policy(&mut net, ALICE, "block");
    let fresh = net.probe_event(DAVE, "alice@example.com", &topic);
    let before = net.nodes[ALICE].snapshot();
    let out = net.inject(ALICE, &fresh);
    assert!(out.events.is_empty() && out.effects.is_empty());
    same(
        &net.nodes[ALICE].snapshot(),
        &before,
        "block policy: a refused request changed the records",
    );

    // From a contact, a payload type the protocol does not know moves only
    // the contact's chain (§6.4) and is shown as dropped.
    // (bob_next first, so the chain has no gap.)
    net.inject(ALICE, &bob_next);
    let bogus = net.forge(BOB, ALICE, &json!({"type": "rdv/bogus"}));
    let before = snapshot_but_chain(&net, ALICE, BOB);
    let out = net.inject(ALICE, &bogus);
    assert!(out.effects.is_empty());
    assert_eq!(snapshot_but_chain(&net, ALICE, BOB), before);
    assert_eq!(
        net.nodes[ALICE].events_of("dropped").last().unwrap()["reason"],
        "unsupported rdv payload"
    );
}
