//! The agent's journeys, end to end (SPEC §4.3, §4.4, §5.1–§5.5, §6.2, §6.4,
//! §7): several real `rdv` processes, each with its own home, against real
//! relays on ephemeral loopback ports: `rdv-dev-relay`, and nostr-rs-relay
//! 0.8.12, an independent relay implementation (`RDV_NOSTR_RS_RELAY`; see
//! `rdv_e2e::nostr_rs_relay_bin` for what happens when it is missing).
//!
//! Every journey is asserted on both sides. Waits are bounded polls of
//! `rdv inbox --json`, `rdv contact pending --json` or `rdv status --json`;
//! nothing sleeps to assert timing. Where a journey must show that
//! something did NOT arrive, it waits for a later sentinel that travels the
//! same relay subscription (a contact request from a fresh agent, or the
//! next message), so the absence is observed after the fact, not guessed.
//! Every process is owned by a guard that kills it when dropped.
//!
//! A command that changes a home's state runs before that home's listener
//! starts, or after the listener has visibly handled something: a commit
//! that lands while `rdv listen` starts up can be missed by it (the
//! listener's startup commit adopts the generation without reloading), so
//! a journey never races one.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};

mod agents;
use agents::*;

// ---- 1. discovery by email: topic probe → candidate → confirm ---------------

fn discover_by_email_journey(relay: &Relay) {
    let mut alice = Agent::init(
        "alice",
        &[
            "--address",
            "alice@example.com",
            "--relay",
            &relay.url,
            "--public-pointer",
            "--allow-ws",
        ],
    );
    let mut bob = Agent::on("bob", "bob@example.com", relay);
    alice.listen();

    // Bob finds Alice's public pointer on her address topic (§4.4).
    let d = bob.ok(&["discover", "alice@example.com"]);
    let found = d["found"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{d}");
    assert_eq!(found[0]["id"], alice.id.as_str(), "{d}");
    assert_eq!(found[0]["fingerprint"], alice.fingerprint.as_str(), "{d}");
    assert_eq!(found[0]["binding"], "claimed", "{d}");
    assert!(
        found[0]["claimed_addresses"]
            .as_array()
            .unwrap()
            .contains(&json!("alice@example.com")),
        "{d}"
    );

    // A topic probe: cleartext on Alice's address topic.
    let r = bob.ok(&[
        "contact",
        "request",
        "alice@example.com",
        "--greeting",
        "Hi, it's Bob from the climbing gym",
        "--label",
        "Alice",
    ]);
    assert_eq!(r["kind"], "topic-probe", "{r}");
    let probe = r["request_id"].as_str().unwrap().to_string();
    assert_eq!(delivery(&r, "accepted"), vec![relay.url.clone()], "{r}");
    bob.listen();

    // Alice's side: the probe waits for her, binding claimed, via the topic.
    let req = alice.wait_request_from(&bob);
    assert_eq!(req["request_id"], probe.as_str(), "{req}");
    assert_eq!(req["via"], "topic", "{req}");
    assert_eq!(req["binding"], "claimed", "{req}");
    assert_eq!(req["address"], "alice@example.com", "{req}");
    assert_eq!(req["fingerprint"], bob.fingerprint.as_str(), "{req}");
    assert_eq!(
        req["greeting"],
        json!({"untrusted_peer_text": "Hi, it's Bob from the climbing gym"}),
        "{req}"
    );
    let e = alice.wait_event("contact_request", |e| e["kind"] == "contact_request");
    assert_eq!(e["request_id"], probe.as_str(), "{e}");
    let g = alice.ok(&[
        "contact", "grant", &probe, "--tier", "friend", "--label", "Bob",
    ]);
    assert_eq!(g["contact"], bob.id.as_str(), "{g}");
    assert_eq!(g["tier"], "friend", "{g}");
    let bid = bob.id.clone();
    let e = alice.wait_event("contact granted", |e| {
        e["kind"] == "contact" && e["id"] == bid.as_str()
    });
    assert_eq!(e["how"], "granted", "{e}");
    assert!(alice.requests().is_empty(), "the request left pending");

    // Bob's side: the answer is a candidate, not a contact, until he confirms.
    let aid = alice.id.clone();
    let cand = bob.wait_pending("candidate", |p| {
        p["sent"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["request_id"] == probe.as_str())
            .and_then(|s| s["candidates"].as_array().unwrap().first().cloned())
    });
    assert_eq!(cand["agent"], alice.id.as_str(), "{cand}");
    assert_eq!(cand["fingerprint"], alice.fingerprint.as_str(), "{cand}");
    let e = bob.wait_event("contact_candidate", |e| e["kind"] == "contact_candidate");
    assert_eq!(e["grantor"], alice.id.as_str(), "{e}");
    assert_eq!(e["address"], "alice@example.com", "{e}");
    assert!(
        bob.contact(&alice).is_none(),
        "a candidate is no contact yet"
    );
    let c = bob.ok(&["contact", "confirm", &probe]);
    assert_eq!(c["contact"], alice.id.as_str(), "{c}");
    assert_eq!(c["binding"], "claimed", "{c}");
    let e = bob.wait_event("contact confirmed", |e| {
        e["kind"] == "contact" && e["id"] == aid.as_str()
    });
    assert_eq!(e["how"], "confirmed", "{e}");
    let held = bob.contact(&alice).unwrap();
    assert_eq!(held["label"], "Alice", "{held}");
    assert_eq!(held["binding"], "claimed", "{held}");
    assert_eq!(held["they_allow"]["tier"], "friend", "{held}");
    assert!(
        bob.sent_requests()
            .iter()
            .all(|s| s["request_id"] != probe.as_str()),
        "a confirmed probe is closed"
    );
    let held = alice.contact(&bob).unwrap();
    assert_eq!(held["label"], "Bob", "{held}");
    assert_eq!(held["binding"], "claimed", "{held}");

    // Messages both ways, by label.
    bob.send_note("Alice", "dinner?");
    let e = alice.wait_note(&bob, "dinner?");
    assert_eq!(e["label"], "Bob", "{e}");
    alice.send_note("Bob", "yes, at 8");
    let e = bob.wait_note(&alice, "yes, at 8");
    assert_eq!(e["label"], "Alice", "{e}");
}

#[test]
fn discover_by_email_probe_confirm_and_talk_on_dev_relay() {
    let relay = Relay::dev("j1");
    discover_by_email_journey(&relay);
}

#[test]
fn discover_by_email_probe_confirm_and_talk_on_nostr_rs_relay() {
    let Some(relay) = Relay::nostr_rs("discover_by_email_nostr_rs") else {
        return;
    };
    discover_by_email_journey(&relay);
}

// ---- 2. by agent ID through the public pointer -------------------------------

#[test]
fn find_by_agent_id_request_and_accepted_contact() {
    let Some(relay) = Relay::nostr_rs("find_by_agent_id") else {
        return;
    };
    let mut alice = Agent::init(
        "alice",
        &[
            "--address",
            "alice@example.com",
            "--relay",
            &relay.url,
            "--public-pointer",
            "--allow-ws",
        ],
    );
    let mut bob = Agent::init("bob", &["--relay", &relay.url, "--allow-ws"]);
    alice.listen();

    // Bob holds only Alice's ID (pasted from a message): the ID topic has her card.
    let d = bob.ok(&["discover", &alice.id]);
    let found = d["found"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{d}");
    assert_eq!(found[0]["id"], alice.id.as_str(), "{d}");
    assert_eq!(found[0]["binding"], "claimed", "{d}");
    assert_eq!(found[0]["relays"], json!([relay.url]), "{d}");

    let r = bob.ok(&[
        "contact",
        "request",
        &alice.id,
        "--greeting",
        "Hello from Bob",
        "--label",
        "Alice",
    ]);
    assert_eq!(r["kind"], "card", "an encrypted request to her card: {r}");
    assert_eq!(r["to"], alice.id.as_str(), "{r}");
    let rid = r["request_id"].as_str().unwrap().to_string();
    bob.listen();

    // Alice's side: an envelope request, binding card (it came to her card).
    let req = alice.wait_request_from(&bob);
    assert_eq!(req["request_id"], rid.as_str(), "{req}");
    assert_eq!(req["via"], "envelope", "{req}");
    assert_eq!(req["address"], Value::Null, "{req}");
    assert_eq!(
        req["greeting"],
        json!({"untrusted_peer_text": "Hello from Bob"}),
        "{req}"
    );
    alice.ok(&[
        "contact",
        "grant",
        &rid,
        "--tier",
        "colleague",
        "--label",
        "Bob",
    ]);

    // Bob's side: a contact at once (no candidate, no confirm), how accepted.
    let aid = alice.id.clone();
    let e = bob.wait_event("contact accepted", |e| {
        e["kind"] == "contact" && e["id"] == aid.as_str()
    });
    assert_eq!(e["how"], "accepted", "{e}");
    assert_eq!(e["label"], "Alice", "{e}");
    assert_eq!(e["binding"], "claimed", "found on a public pointer: {e}");
    assert!(
        !bob.inbox().iter().any(|e| e["kind"] == "contact_candidate"),
        "a request by ID makes no candidate"
    );
    let held = bob.contact(&alice).unwrap();
    assert_eq!(held["they_allow"]["tier"], "colleague", "{held}");
    assert!(bob.sent_requests().is_empty(), "the request is closed");
    assert_eq!(
        alice.contact(&bob).unwrap()["we_allow"]["tier"],
        "colleague"
    );

    alice.send_note("Bob", "welcome");
    bob.wait_note(&alice, "welcome");
    bob.send_note("Alice", "thanks");
    alice.wait_note(&bob, "thanks");

    // An ID with no public pointer: a clear error that says what to do.
    let carol = Agent::init("carol", &["--relay", &relay.url, "--allow-ws"]);
    let err = bob.fail(&["contact", "request", &carol.id]);
    assert!(
        err.contains("no card for") && err.contains("rdv card import"),
        "{err}"
    );
}

// ---- 3. a card change reaching a contact -------------------------------------

/// Alice adds a relay, Bob is told (`card_updated`) and sends to the new
/// card's relays; then she drops the first relay, which goes away, and
/// Bob's next message must reach her on the second relay only. When
/// `restart` is set, Alice restarts `rdv listen` after her changes (the
/// workaround for the bug `a_running_listener_follows_a_relay_change_made_in_another_terminal`
/// shows).
fn card_change_journey(test: &str, restart: bool) {
    let Some(relay) = Relay::nostr_rs(test) else {
        return;
    };
    let second = Relay::dev(&format!("{test}-second"));
    let (mut alice, mut bob) = contacts(&relay);
    let aid = alice.id.clone();

    // Alice adds a relay: her card is re-signed and sent to Bob.
    let r = alice.ok(&["relays", "add", &second.url]);
    assert_eq!(r["card_sent_to"], json!([bob.id]), "{r}");
    assert!(delivery(&r, "accepted").contains(&relay.url), "{r}");
    let e = bob.wait_event("card_updated", |e| {
        e["kind"] == "card_updated" && e["id"] == aid.as_str()
    });
    assert_eq!(e["id"], alice.id.as_str());
    let listed = alice.ok(&["relays", "list"]);
    let urls: Vec<&str> = listed["relays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["url"].as_str().unwrap())
        .collect();
    assert_eq!(urls, vec![relay.url.as_str(), second.url.as_str()]);

    // Bob now sends to the new card's relays, the added one included.
    let r = bob.send_note("Alice", "after the change");
    let accepted = delivery(&r, "accepted");
    assert!(
        accepted.contains(&second.url) && accepted.contains(&relay.url),
        "Bob sends to both relays of the new card: {r}"
    );
    alice.wait_note(&bob, "after the change");
    // Nothing the humans set changed: label, tier.
    let held = bob.contact(&alice).unwrap();
    assert_eq!(held["label"], "Alice", "{held}");
    assert_eq!(held["they_allow"]["tier"], "friend", "{held}");

    // Alice drops the first relay: Bob follows, and his next message goes
    // to the second relay only, where she must get it. (Bob still listens
    // on the first, so her answer reaches him there.)
    let r = alice.ok(&["relays", "remove", &relay.url]);
    assert_eq!(r["card_sent_to"], json!([bob.id]), "{r}");
    wait_until("a second card_updated at Bob", WAIT, || {
        (bob.inbox()
            .iter()
            .filter(|e| e["kind"] == "card_updated")
            .count()
            >= 2)
            .then_some(())
    });
    if restart {
        alice.stop_listener();
        alice.listen();
    }
    let r = bob.send_note("Alice", "on the second relay only");
    assert_eq!(delivery(&r, "accepted"), vec![second.url.clone()], "{r}");
    alice.wait_note(&bob, "on the second relay only");
    alice.send_note("Bob", "got it");
    bob.wait_note(&alice, "got it");
}

#[test]
fn card_change_reaches_the_contact_and_messages_follow_it() {
    card_change_journey("card_change", true);
}

/// `rdv relays add|remove` in one terminal while `rdv listen` runs in
/// another: the listener keeps its old subscriptions (it resubscribes only
/// for changes it made itself), so a message on the new relay never
/// reaches it until it is restarted.
#[test]

fn a_running_listener_follows_a_relay_change_made_in_another_terminal() {
    card_change_journey("card_change_live", false);
}

// ---- 4. a fork after copying an old home -------------------------------------

#[test]
fn a_copied_home_forks_the_chain_until_the_owner_resyncs() {
    let Some(relay) = Relay::nostr_rs("fork") else {
        return;
    };
    let (mut alice, mut bob) = contacts(&relay);
    let bid = bob.id.clone();
    bob.send_note("Alice", "one");
    alice.wait_note(&bob, "one");

    // Bob copies his home (listener stopped), then both copies write.
    bob.stop_listener();
    let copy = bob.copy("bob-copy");
    bob.listen();
    let original = bob.send_note("Alice", "two from the original");
    alice.wait_note(&bob, "two from the original");
    let forked = copy.send_note("Alice", "two from the copy");
    // The original's restarted listener may have sent Alice its card first
    // (§4.3: once per card at start), so the copy reuses that seq or the
    // note's: one Alice accepted either way.
    assert!(
        forked["seq"].as_u64().unwrap() <= original["seq"].as_u64().unwrap(),
        "the copy reuses an accepted seq: {forked} vs {original}"
    );

    // Alice is told; the chain is refused, later envelopes included.
    let e = alice.wait_event("forked", |e| {
        e["kind"] == "forked" && e["id"] == bid.as_str()
    });
    assert_eq!(e["seq"], forked["seq"], "{e}");
    assert!(e["reason"].as_str().unwrap().contains("seq"), "{e}");
    assert_eq!(alice.contact(&bob).unwrap()["chain_refused"], true);
    bob.send_note("Alice", "three, while refused");
    let _s = sentinel(&mut alice, &relay);
    let texts: Vec<String> = alice
        .messages()
        .iter()
        .filter_map(|(_, _, p)| p["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        texts,
        vec!["one", "two from the original"],
        "neither the copy's message nor a later one is accepted"
    );

    // Alice re-syncs: Bob's next message is taken.
    let r = alice.ok(&["contact", "resync", "Bob"]);
    assert_eq!(r["resynced"], bob.id.as_str(), "{r}");
    assert_eq!(r["was_refused"], true, "{r}");
    bob.send_note("Alice", "four, after the resync");
    alice.wait_note(&bob, "four, after the resync");
    let texts: Vec<String> = alice
        .messages()
        .iter()
        .filter_map(|(_, _, p)| p["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        texts,
        vec!["one", "two from the original", "four, after the resync"]
    );
    assert_eq!(alice.contact(&bob).unwrap()["chain_refused"], false);
    let forks = alice
        .inbox()
        .iter()
        .filter(|e| e["kind"] == "forked")
        .count();
    assert_eq!(forks, 1, "one fork, told once");

    // And the other way, unchanged.
    alice.send_note("Bob", "welcome back");
    bob.wait_note(&alice, "welcome back");
    bob.send_note("Alice", "five");
    alice.wait_note(&bob, "five");
}

// ---- 5. kill -9 of the listener while sending ----------------------------------

#[test]
fn killing_the_listener_while_sending_loses_nothing_and_reuses_no_seq() {
    let Some(relay) = Relay::nostr_rs("kill_listener") else {
        return;
    };
    let (mut alice, mut bob) = contacts(&relay);
    let bid = bob.id.clone();
    let texts: Vec<String> = (1..=8).map(|i| format!("message {i}")).collect();
    let mut seqs = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        // Both processes write Bob's store: the send, and the listener,
        // which dies mid-way (kill -9) before or during the send.
        let send = bob.spawn(&["send", "Alice", &note(text)]);
        if i % 2 == 0 {
            bob.kill_listener();
        }
        let r = send.finish();
        assert_eq!(r.code, 0, "{}: {}", r.what, r.stderr);
        let v = r.lines().pop().unwrap();
        seqs.push(v["seq"].as_u64().unwrap());
        if i % 2 == 1 {
            bob.kill_listener();
        }
        // Alice writes while Bob's listener is down; he gets it on restart.
        alice.send_note("Bob", &format!("reply {}", i + 1));
        bob.listen();
    }
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "Bob's seqs strictly increase: {seqs:?}"
    );
    for text in &texts {
        alice.wait_note(&bob, text);
    }
    for i in 1..=texts.len() {
        bob.wait_note(&alice, &format!("reply {i}"));
    }
    let got: Vec<(u64, String)> = alice
        .messages()
        .into_iter()
        .filter(|(from, _, _)| *from == bid)
        .map(|(_, seq, p)| (seq, p["text"].as_str().unwrap().to_string()))
        .collect();
    let got_texts: Vec<&str> = got.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(got_texts, texts, "each once, in order");
    assert!(
        got.windows(2).all(|w| w[0].0 < w[1].0),
        "Alice's inbox seqs strictly increase: {got:?}"
    );
    let got_seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(got_seqs, seqs, "the seqs the sends reported");
    for who in [&alice, &bob] {
        assert!(
            !who.inbox().iter().any(|e| e["kind"] == "forked"),
            "{}: no fork",
            who.name
        );
    }
    wait_until("Bob's deliveries to finish", WAIT, || {
        (bob.ok(&["status"])["deliveries_under_way"] == 0).then_some(())
    });
}

// ---- 6. relay down: queued, retried on the tick --------------------------------

#[test]
fn relay_down_the_send_is_queued_and_the_listener_retries() {
    let Some(mut relay) = Relay::nostr_rs("relay_down") else {
        return;
    };
    let (mut alice, mut bob) = contacts(&relay);
    bob.send_note("Alice", "before");
    alice.wait_note(&bob, "before");

    relay.stop();
    let r = bob.send_note("Alice", "while the relay is down");
    assert_eq!(delivery(&r, "failed"), vec![relay.url.clone()], "{r}");
    assert!(delivery(&r, "accepted").is_empty(), "{r}");
    let s = bob.ok(&["status"]);
    assert!(
        s["deliveries_under_way"].as_u64().unwrap() >= 1,
        "the delivery is queued: {s}"
    );
    let health = &s["relays"][0];
    assert_eq!(health["url"], relay.url.as_str(), "{s}");
    assert!(health["last_error"].is_object(), "the relay's error: {s}");
    assert_eq!(health["last_error"]["kind"], "unreachable", "{s}");
    assert_eq!(s["inbound"], "consumer running", "{s}");

    // The relay comes back on the same port: Bob's listener retries on its
    // tick, Alice's reconnects, and the message arrives.
    relay.start();
    alice.wait_note_for(&bob, "while the relay is down", WAIT_RECONNECT);
    wait_until("Bob's queue to drain", WAIT, || {
        let s = bob.ok(&["status"]);
        (s["deliveries_under_way"] == 0 && s["relays"][0]["last_ok"].is_string()).then_some(())
    });
    alice.send_note("Bob", "back again");
    bob.wait_note_for(&alice, "back again", WAIT_RECONNECT);
}

// ---- 6b. relay down: the delivery heals to ntfy ---------------------------------

#[test]
fn relay_down_the_delivery_heals_to_ntfy() {
    let mut relay = Relay::dev("j6b");
    let bridge = start_bridge();
    let mut alice = Agent::init(
        "alice",
        &[
            "--address",
            "alice@example.com",
            "--relay",
            &relay.url,
            "--allow-ws",
            "--ntfy",
            &bridge.http,
        ],
    );
    let card = alice.ok(&["card"]);
    assert!(
        card["rendezvous"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["type"] == "ntfy" && r["server"] == bridge.http.as_str()),
        "the card lists the ntfy fallback: {card}"
    );
    let mut bob = Agent::on("bob", "bob@example.com", &relay);
    alice.listen();
    let file = alice.card_file();
    bob.ok(&["card", "import", file.to_str().unwrap()]);
    let r = bob.ok(&["contact", "request", &alice.id, "--label", "Alice"]);
    let rid = r["request_id"].as_str().unwrap().to_string();
    bob.listen();
    alice.wait_request_from(&bob);
    alice.ok(&["contact", "grant", &rid, "--label", "Bob"]);
    let aid = alice.id.clone();
    bob.wait_event("contact", |e| {
        e["kind"] == "contact" && e["id"] == aid.as_str()
    });

    // The only relay goes away for good: Bob's listener heals the delivery
    // to the next carrier on Alice's card, and her listener gets it there.
    relay.stop();
    let r = bob.send_note("Alice", "over ntfy");
    assert_eq!(delivery(&r, "failed"), vec![relay.url.clone()], "{r}");
    alice.wait_note_for(&bob, "over ntfy", WAIT_RECONNECT);
    wait_until("Bob's queue to drain", WAIT, || {
        (bob.ok(&["status"])["deliveries_under_way"] == 0).then_some(())
    });
}

// ---- 7. refusals shown --------------------------------------------------------

#[test]
fn refusals_block_decline_and_revoke() {
    let relay = Relay::dev("j7");
    let mut alice = Agent::on("alice", "alice@example.com", &relay);
    let mut bob = Agent::on("bob", "bob@example.com", &relay);
    let mut carol = Agent::on("carol", "carol@example.com", &relay);
    let card = alice.card_file();
    let card = card.to_str().unwrap();

    // A blocked agent's request never reaches Alice's pending list.
    let b = alice.ok(&["contact", "block", &carol.id]);
    assert_eq!(b["blocked"], carol.id.as_str(), "{b}");
    alice.listen();
    carol.ok(&["card", "import", card]);
    let r = carol.ok(&["contact", "request", &alice.id, "--greeting", "let me in"]);
    assert_eq!(delivery(&r, "accepted"), vec![relay.url.clone()], "{r}");
    carol.listen();
    let dave = sentinel(&mut alice, &relay);
    assert!(
        alice
            .requests()
            .iter()
            .all(|r| r["from"] != carol.id.as_str()),
        "a blocked agent's request is dropped"
    );
    assert!(
        !alice
            .inbox()
            .iter()
            .any(|e| e["kind"] == "contact_request" && e["from"] == carol.id.as_str()),
        "and Alice is not told of it"
    );
    // Carol hears nothing back: silence, her request still open.
    let sent = carol.sent_requests();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["candidates"], json!([]));
    carol.check_listener();
    assert!(!carol.inbox().iter().any(|e| e["kind"] == "contact"));
    // Blocking someone whose request waits removes it.
    assert!(
        alice
            .requests()
            .iter()
            .any(|r| r["from"] == dave.id.as_str())
    );
    alice.ok(&["contact", "block", &dave.id]);
    assert!(
        alice
            .requests()
            .iter()
            .all(|r| r["from"] != dave.id.as_str())
    );

    // A decline sends nothing.
    bob.ok(&["card", "import", card]);
    let r = bob.ok(&["contact", "request", &alice.id, "--label", "Alice"]);
    let first = r["request_id"].as_str().unwrap().to_string();
    let req = alice.wait_request_from(&bob);
    assert_eq!(req["request_id"], first.as_str());
    let d = alice.ok(&["contact", "decline", &first]);
    assert_eq!(
        d,
        json!({"declined": first, "blocked": false}),
        "nothing was published"
    );
    assert!(
        alice
            .requests()
            .iter()
            .all(|r| r["from"] != bob.id.as_str())
    );
    // Bob asks again and Alice grants that one. Bob's listener starts now
    // and reads everything the relay holds for him, in order: whatever the
    // decline had sent would come before this grant.
    let r = bob.ok(&["contact", "request", &alice.id, "--label", "Alice"]);
    let second = r["request_id"].as_str().unwrap().to_string();
    bob.listen();
    let req = alice.wait_request_from(&bob);
    assert_eq!(req["request_id"], second.as_str());
    alice.ok(&["contact", "grant", &second, "--label", "Bob"]);
    let aid = alice.id.clone();
    bob.wait_event("contact", |e| {
        e["kind"] == "contact" && e["id"] == aid.as_str()
    });
    let sent = bob.sent_requests();
    assert_eq!(
        sent.len(),
        1,
        "the declined request got no answer: {sent:?}"
    );
    assert_eq!(sent[0]["request_id"], first.as_str());
    assert_eq!(sent[0]["candidates"], json!([]));
    bob.send_note("Alice", "hello");
    alice.wait_note(&bob, "hello");

    // A revoke ends the contact on both sides.
    let r = alice.ok(&["contact", "revoke", "Bob"]);
    assert_eq!(r["revoked"], bob.id.as_str(), "{r}");
    assert_eq!(delivery(&r, "accepted"), vec![relay.url.clone()], "{r}");
    let bid = bob.id.clone();
    let e = alice.wait_event("revoked", |e| {
        e["kind"] == "revoked" && e["id"] == bid.as_str()
    });
    assert_eq!(e["by"], "owner", "{e}");
    let e = bob.wait_event("revoked", |e| {
        e["kind"] == "revoked" && e["id"] == aid.as_str()
    });
    assert_eq!(e["by"], "peer", "{e}");
    assert!(alice.contact(&bob).is_none());
    assert!(bob.contact(&alice).is_none());
    let err = bob.fail(&["send", "Alice", &note("still there?")]);
    assert!(err.contains("no contact is labelled \"Alice\""), "{err}");
    let err = bob.fail(&["send", &alice.id, &note("still there?")]);
    assert!(err.contains("is not a current contact"), "{err}");
    let err = alice.fail(&["send", &bob.id, &note("bye")]);
    assert!(err.contains("is not a current contact"), "{err}");
    let status = bob.ok(&["status"]);
    assert_eq!(status["contacts"], 0, "{status}");
}

// ---- 8. CLI errors people hit ---------------------------------------------------

#[test]
fn cli_errors_people_hit() {
    // No agent yet.
    let nobody = Agent::new("nobody");
    let err = nobody.fail(&["status"]);
    assert!(
        err.contains("no agent") && err.contains("rdv init"),
        "{err}"
    );
    let err = nobody.fail(&["send", "Alice", &note("hi")]);
    assert!(err.contains("rdv init"), "{err}");

    // A ws:// relay without --allow-ws: refused, and no agent is made.
    let err = nobody.fail(&["init", "--relay", "ws://127.0.0.1:9"]);
    assert!(err.contains("ws://") && err.contains("wss://"), "{err}");
    assert!(nobody.fail(&["status"]).contains("rdv init"));

    let relay = Relay::dev("j8");
    let (mut alice, bob) = contacts(&relay);

    // init twice: refused, the agent unchanged.
    let err = alice.fail(&["init", "--relay", &relay.url, "--allow-ws"]);
    assert!(
        err.contains("already has an agent") && err.contains("--force"),
        "{err}"
    );
    assert!(err.contains(&alice.id), "{err}");
    assert_eq!(alice.ok(&["status"])["id"], alice.id.as_str());
    assert_eq!(alice.contacts().len(), 1, "nothing was lost");

    // An agent on wss:// relays cannot add a ws:// one.
    let wss = Agent::init("wss", &["--relay", "wss://relay.example.invalid"]);
    let err = wss.fail(&["relays", "add", &relay.url]);
    assert!(err.contains("ws://") && err.contains("wss://"), "{err}");

    // Malformed payloads: each a clear error, nothing sent.
    let err = bob.fail(&["send", "Alice", "dinner?"]);
    assert!(err.contains("not a JSON object"), "{err}");
    let err = bob.fail(&["send", "Alice", r#"{"text":"no type"}"#]);
    assert!(err.contains("\"type\""), "{err}");
    let err = bob.fail(&["send", "Alice", "[1, 2]"]);
    assert!(err.contains("JSON object"), "{err}");
    let err = bob.fail(&["send", "Alice", r#"{"type":"Note Text"}"#]);
    assert!(err.contains("type must match"), "{err}");
    let err = bob.fail(&["send", "Alice", r#"{"type":"rdv/revoke"}"#]);
    assert!(err.contains("protocol's own"), "{err}");
    let big = note(&"x".repeat(40 * 1024));
    let err = bob.fail(&["send", "Alice", &big]);
    assert!(err.contains("32768"), "the size limit is named: {err}");
    let err = bob.fail(&["send", "Alicia", &note("hi")]);
    assert!(err.contains("no contact is labelled \"Alicia\""), "{err}");
    let err = bob.fail(&["contact", "grant", "nope"]);
    assert!(err.contains("no pending request"), "{err}");
    let err = bob.fail(&["contact", "grant", "nope", "--tier", "boss"]);
    assert!(err.contains("tier must be one of"), "{err}");

    // Nothing of those reached Alice: the next good one is her first.
    bob.send_note("Alice", "a good one");
    alice.wait_note(&bob, "a good one");
    assert_eq!(alice.messages().len(), 1, "only the good one arrived");
}

// ---- the listener lock ----------------------------------------------------------

/// `rdv status` (and `rdv init --force`) probe the listener lock with a
/// shared lock they drop at once; home.rs says a listener starting during
/// such a probe "should retry rather than conclude another listener
/// runs". Here the probe is held a moment longer, as a slow probe would.
#[test]

fn a_listener_starting_during_a_status_probe_still_starts() {
    let relay = Relay::dev("lock");
    let mut alice = Agent::on("alice", "alice@example.com", &relay);
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(alice.home.join("listener.lock"))
        .unwrap();
    lock.lock_shared().unwrap();
    alice.listen();
    // It says so on stderr just before it takes the lock; the probe ends
    // a moment after.
    let err = alice.dir.path().join("listen-1.err");
    wait_until("the listener to start", WAIT, || {
        std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("listening as")
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    drop(lock);
    wait_until("the listener to hold its lock", WAIT, || {
        alice.check_listener();
        (alice.ok(&["status"])["inbound"] == "consumer running").then_some(())
    });
}
