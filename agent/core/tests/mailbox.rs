//! The mailbox probe and the invite (SPEC §5.2.1, §5.2.2) against a
//! network of in-memory agents; the probe gateway is played by the test:
//! it takes the core's [`GatewayCall`]s and hands back inbox items as the
//! real gateway shapes them (docs/probe-gateway.md "An inbox item"). Each
//! test fails when its rule is broken.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Net, RELAY};
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::mailbox::{CallOutcome, GatewayCall, GatewayInput};
use rdv_agent_core::record::Table;
use rdv_agent_core::state::{Binding, ContactStatus};
use rdv_agent_core::{Command, Effect, Input, PublishOutcome};
use rdv_proto::AgentKey;
use rdv_proto::doc::card::CardBuilder;
use rdv_proto::doc::grant::{GrantBuilder, GrantRef};
use rdv_proto::mailblock::{ProbeEcho, probe_ack_payload, probe_payload};
use serde_json::{Value, json};

const ALICE: usize = 0;
const BOB: usize = 1;
const MALLORY: usize = 2;
const GW: &str = "https://gw.test";
const A_MAIL: &str = "alice@a.test";
const B_MAIL: &str = "bob@b.test";
const COOKIE: &str = "abcdefghijklmnopqrstuvwxyz";

/// The test's gateway: the calls each node made, and the next seq.
struct Gw {
    calls: Vec<(usize, GatewayCall)>,
    seq: u64,
}

/// Runs an input on node `i`, carries its Nostr effects to quiescence
/// (as `Net::carry` does) and keeps every gateway call made on the way.
fn run(net: &mut Net, gw: &mut Gw, i: usize, input: Input) -> rdv_agent_core::Result<Value> {
    let now = net.now;
    let out = net.nodes[i].handle(input, now)?;
    let reply = out.reply.clone().unwrap_or(Value::Null);
    let mut queue: Vec<(usize, Effect)> = out.effects.into_iter().map(|e| (i, e)).collect();
    while let Some((src, e)) = queue.pop() {
        match e {
            Effect::Gateway(call) => gw.calls.push((src, call)),
            Effect::PublishNostr {
                delivery,
                event,
                relays,
            } => {
                let outcomes = relays
                    .iter()
                    .map(|r| (r.clone(), PublishOutcome::Accepted))
                    .collect();
                let out = net.nodes[src]
                    .handle(Input::Published { delivery, outcomes }, now)
                    .unwrap();
                queue.extend(out.effects.into_iter().map(|e| (src, e)));
                let json = serde_json::to_value(&*event).unwrap();
                let raw = serde_json::to_vec(&json).unwrap();
                for n in 0..net.nodes.len() {
                    if n == src || !net.concerns(n, &json) {
                        continue;
                    }
                    let out = net.nodes[n]
                        .handle(
                            Input::Nostr {
                                relay: RELAY.into(),
                                json: raw.clone(),
                            },
                            now,
                        )
                        .unwrap();
                    queue.extend(out.effects.into_iter().map(|e| (n, e)));
                }
            }
            _ => {}
        }
    }
    Ok(reply)
}

fn cmd(net: &mut Net, gw: &mut Gw, i: usize, c: Command) -> rdv_agent_core::Result<Value> {
    run(net, gw, i, Input::Command(c))
}

/// The last call node `i` made, removed.
fn take_call(gw: &mut Gw, i: usize) -> GatewayCall {
    let pos = gw
        .calls
        .iter()
        .rposition(|(n, _)| *n == i)
        .expect("a gateway call");
    gw.calls.remove(pos).1
}

/// The gateway answers a call.
fn answer(net: &mut Net, gw: &mut Gw, i: usize, call: GatewayCall, outcome: CallOutcome) {
    run(
        net,
        gw,
        i,
        Input::Gateway(GatewayInput::Answered { call, outcome }),
    )
    .unwrap();
}

/// An inbox item for node `i`'s mailbox, at a fresh seq.
fn deliver(net: &mut Net, gw: &mut Gw, i: usize, mut item: Value) -> u64 {
    gw.seq += 1;
    item["seq"] = json!(gw.seq);
    item["received"] = json!("2026-12-01T10:00:00Z");
    let seq = gw.seq;
    run(
        net,
        gw,
        i,
        Input::Gateway(GatewayInput::Item {
            gateway: GW.into(),
            item,
        }),
    )
    .unwrap();
    seq
}

fn probe_item(request: &Value, binding: &str) -> Value {
    json!({
        "kind": "probe", "mailbox": A_MAIL, "id": request["id"], "requester": request["from"],
        "sender": "rdv+bobtag@gw.test", "payload": probe_payload(request), "auth": {},
        "binding": binding, "cookie": COOKIE, "status": "pending",
    })
}

fn syn_ack_item(grant: &Value, cookie: &str) -> Value {
    json!({
        "kind": "probe_ack", "mailbox": B_MAIL, "id": grant["id"], "requester": grant["from"],
        "sender": "rdv+alicetag@gw.test", "payload": probe_ack_payload(grant, cookie),
        "auth": {}, "binding": "weak_mailbox_proof",
    })
}

fn prove(net: &mut Net, gw: &mut Gw, i: usize, mailbox: &str) {
    cmd(
        net,
        gw,
        i,
        Command::MailboxAdd {
            address: mailbox.into(),
            gateway: GW.into(),
            on_card: false,
        },
    )
    .unwrap();
    cmd(
        net,
        gw,
        i,
        Command::MailboxVerified {
            address: mailbox.into(),
            gateway_address: Some(format!("rdv+{i}@gw.test")),
        },
    )
    .unwrap();
}

/// Alice (alice@a.test on her card) and Bob, each with a proved mailbox.
fn setup() -> (Net, Gw) {
    let mut net = Net::new(3);
    let mut gw = Gw {
        calls: Vec::new(),
        seq: 0,
    };
    net.init(ALICE, &[A_MAIL]);
    net.init(BOB, &[B_MAIL]);
    net.init(MALLORY, &[]);
    prove(&mut net, &mut gw, ALICE, A_MAIL);
    prove(&mut net, &mut gw, BOB, B_MAIL);
    (net, gw)
}

/// Bob's mailbox probe to Alice, mailed; returns (request id, request).
fn bob_probes(net: &mut Net, gw: &mut Gw) -> (String, Value) {
    let r = cmd(
        net,
        gw,
        BOB,
        Command::MailProbe {
            address: A_MAIL.into(),
            greeting: "Hi, Bob's agent".into(),
            label: Some("Alice".into()),
            from_mailbox: None,
        },
    )
    .unwrap();
    let call = take_call(gw, BOB);
    let GatewayCall::SendProbe { request, to, .. } = &call else {
        panic!("{call:?}")
    };
    assert_eq!(to, A_MAIL);
    let request = request.clone();
    answer(net, gw, BOB, call, CallOutcome::Done);
    (r["request_id"].as_str().unwrap().to_string(), request)
}

/// Alice grants the probe that reached her; returns the SYN-ACK's grant
/// and the probe's seq in Alice's inbox.
fn alice_grants(net: &mut Net, gw: &mut Gw, request: &Value) -> (Value, u64) {
    let seq = deliver(net, gw, ALICE, probe_item(request, "needs_cookie"));
    let id = request["id"].as_str().unwrap().to_string();
    let r = cmd(
        net,
        gw,
        ALICE,
        Command::Grant {
            request_id: id,
            tier: "friend".into(),
            scope: default_scope(false, &[], "100/day"),
            label: Some("Bob".into()),
        },
    )
    .unwrap();
    assert_eq!(r["pending_ack"], true);
    let call = take_call(gw, ALICE);
    let GatewayCall::SynAck {
        seq: s,
        grant,
        gateway,
        ..
    } = &call
    else {
        panic!("{call:?}")
    };
    assert_eq!((*s, gateway.as_str()), (seq, GW));
    let grant = grant.clone();
    answer(net, gw, ALICE, call, CallOutcome::Done);
    (grant, seq)
}

#[test]
fn mailbox_probe_syn_ack_confirm_ack_then_messages() {
    let (mut net, mut gw) = setup();
    let (probe_id, request) = bob_probes(&mut net, &mut gw);
    assert_eq!(request["to_hint"], A_MAIL);

    // SYN: a pending request on Alice's side, via mailbox; no DMARC pass,
    // so the binding is claimed until the cookie comes back.
    let seq = deliver(
        &mut net,
        &mut gw,
        ALICE,
        probe_item(&request, "needs_cookie"),
    );
    let reqs = net.nodes[ALICE].events_of("contact_request");
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        (&reqs[0]["via"], &reqs[0]["binding"], &reqs[0]["address"]),
        (&json!("mailbox"), &json!("claimed"), &json!(A_MAIL))
    );
    assert!(net.nodes[ALICE].agent.state.contacts.is_empty());

    // The grant goes back as a SYN-ACK through the gateway, not by envelope,
    // and the contact waits for the ACK (§5.2.1).
    let published = net.log.len();
    cmd(
        &mut net,
        &mut gw,
        ALICE,
        Command::Grant {
            request_id: probe_id.clone(),
            tier: "friend".into(),
            scope: default_scope(false, &[], "100/day"),
            label: Some("Bob".into()),
        },
    )
    .unwrap();
    let call = take_call(&mut gw, ALICE);
    let GatewayCall::SynAck {
        seq: s, ref grant, ..
    } = call
    else {
        panic!("{call:?}")
    };
    assert_eq!(s, seq);
    let grant = grant.clone();
    answer(&mut net, &mut gw, ALICE, call, CallOutcome::Done);
    assert_eq!(net.log.len(), published, "nothing on the relays");
    assert!(
        net.nodes[ALICE].agent.state.contacts.is_empty(),
        "pending on the grantor's side until the ACK lands"
    );
    assert!(net.nodes[ALICE].agent.state.pending.is_empty());

    // SYN-ACK: a candidate on Bob's side, never a contact by itself (§5.3).
    deliver(&mut net, &mut gw, BOB, syn_ack_item(&grant, COOKIE));
    let cands = net.nodes[BOB].events_of("contact_candidate");
    assert_eq!(cands.len(), 1);
    assert_eq!(cands[0]["grantor"], net.nodes[ALICE].id().as_str());
    assert!(net.nodes[BOB].agent.state.contacts.is_empty());

    // Confirm: the contact (binding mailbox) and the ACK in the first
    // envelope, echoing the cookie; Alice's contact is made, and her
    // gateway told to release the probe.
    let r = cmd(
        &mut net,
        &mut gw,
        BOB,
        Command::Confirm {
            request_id: probe_id.clone(),
            grantor: None,
            label: None,
        },
    )
    .unwrap();
    assert_eq!(
        (&r["binding"], &r["ack"]),
        (&json!("mailbox"), &json!("envelope"))
    );
    let alice = net.nodes[ALICE].id();
    let bob = net.nodes[BOB].id();
    let at_bob = &net.nodes[BOB].agent.state.contacts[&alice];
    assert_eq!(at_bob.binding, Binding::Mailbox);
    // §5.3 direction: Alice's grant sets what Bob may do towards her only.
    assert_eq!(at_bob.granted_to_us.as_ref().unwrap().tier, "friend");
    assert!(at_bob.granted_by_us.is_none());
    assert_eq!(at_bob.tier, "stranger");
    assert_eq!(at_bob.label.as_deref(), Some("Alice"));
    let at_alice = &net.nodes[ALICE].agent.state.contacts[&bob];
    assert_eq!(at_alice.binding, Binding::Mailbox);
    assert_eq!(at_alice.status, ContactStatus::Active);
    assert_eq!(at_alice.granted_by_us.as_ref().unwrap().tier, "friend");
    assert_eq!(at_alice.label.as_deref(), Some("Bob"));
    let acked = net.nodes[ALICE].events_of("contact");
    assert_eq!(acked.last().unwrap()["how"], "acked");
    let call = take_call(&mut gw, ALICE);
    assert!(
        matches!(&call, GatewayCall::Ack { seq: s, cookie, .. } if *s == seq && cookie == COOKIE),
        "{call:?}"
    );

    // Messages both ways on the pairwise channel.
    for (from, to, text) in [
        (BOB, ALICE, "hello"),
        (ALICE, BOB, "hi"),
        (BOB, ALICE, "ok"),
    ] {
        let to_id = net.nodes[to].id();
        cmd(
            &mut net,
            &mut gw,
            from,
            Command::Send {
                to: to_id,
                payload: json!({"type": "note/text", "text": text}),
            },
        )
        .unwrap();
    }
    assert_eq!(net.nodes[ALICE].events_of("message").len(), 2);
    assert_eq!(net.nodes[BOB].events_of("message").len(), 1);
}

#[test]
fn the_ack_completes_the_contact_only_with_the_probes_cookie_from_the_requester() {
    let (mut net, mut gw) = setup();
    let (probe_id, request) = bob_probes(&mut net, &mut gw);
    alice_grants(&mut net, &mut gw, &request);
    let alice = net.nodes[ALICE].id();
    let bob = net.nodes[BOB].id();

    // A wrong cookie from Bob: nothing.
    let bob_key = AgentKey::from_seed(net.nodes[BOB].key);
    let wrong = ProbeEcho::build(
        &probe_id,
        &alice,
        "zzzzzzzzzzzzzzzzzzzzzzzzzz",
        net.now,
        &bob_key,
    )
    .unwrap();
    let ev = net.forge(BOB, ALICE, &wrong);
    net.inject(ALICE, &ev);
    assert!(net.nodes[ALICE].agent.state.contacts.is_empty());

    // The right cookie, signed and sent by Mallory: nothing.
    let mallory_key = AgentKey::from_seed(net.nodes[MALLORY].key);
    let stolen = ProbeEcho::build(&probe_id, &alice, COOKIE, net.now, &mallory_key).unwrap();
    let ev = net.forge(MALLORY, ALICE, &stolen);
    net.inject(ALICE, &ev);
    assert!(net.nodes[ALICE].agent.state.contacts.is_empty());

    // The right cookie from Bob, for another probe id: nothing.
    let other = ProbeEcho::build(
        "0b1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        &alice,
        COOKIE,
        net.now,
        &bob_key,
    )
    .unwrap();
    let ev = net.forge(BOB, ALICE, &other);
    net.inject(ALICE, &ev);
    assert!(net.nodes[ALICE].agent.state.contacts.is_empty());

    // Bob's echo of the probe's cookie: the contact.
    let right = ProbeEcho::build(&probe_id, &alice, COOKIE, net.now, &bob_key).unwrap();
    let ev = net.forge(BOB, ALICE, &right);
    net.inject(ALICE, &ev);
    assert_eq!(
        net.nodes[ALICE].agent.state.contacts[&bob].binding,
        Binding::Mailbox
    );
    assert_eq!(net.nodes[ALICE].events_of("contact").len(), 1);
}

#[test]
fn the_ack_by_mail_completes_the_contact_through_the_gateways_release() {
    let (mut net, mut gw) = setup();
    let (probe_id, request) = bob_probes(&mut net, &mut gw);
    let (grant, seq) = alice_grants(&mut net, &mut gw, &request);
    deliver(&mut net, &mut gw, BOB, syn_ack_item(&grant, COOKIE));
    // Every relay of Alice's card cools down after a refusal: Bob's ACK
    // goes by mail (§5.2.1 "or replies by email if none is reachable").
    let until = rdv_proto::time::format_time(net.now + time::Duration::minutes(10));
    net.nodes[BOB].records.insert(
        (Table::RelayHealth, RELAY.to_string()),
        json!({"last_ok": null, "last_error_at": null, "last_error_kind": "blocked",
               "last_error_message": null, "cooldown_until": until, "failures": 1}),
    );
    net.nodes[BOB].reload();
    let r = cmd(
        &mut net,
        &mut gw,
        BOB,
        Command::Confirm {
            request_id: probe_id.clone(),
            grantor: None,
            label: None,
        },
    )
    .unwrap();
    assert_eq!(r["ack"], "mail");
    let call = take_call(&mut gw, BOB);
    let GatewayCall::SendAck { echo, .. } = &call else {
        panic!("{call:?}")
    };
    assert_eq!(echo["cookie"], COOKIE);
    assert_eq!(echo["request_ref"], probe_id.as_str());

    // A release naming another probe of the inbox: nothing.
    let bob = net.nodes[BOB].id();
    let release = |probe_seq: u64| {
        json!({"kind": "release", "mailbox": A_MAIL, "request_id": probe_id,
               "requester": bob.as_str(), "probe_seq": probe_seq, "via": "mail"})
    };
    deliver(&mut net, &mut gw, ALICE, release(seq + 100));
    assert!(net.nodes[ALICE].agent.state.contacts.is_empty());
    deliver(&mut net, &mut gw, ALICE, release(seq));
    assert_eq!(
        net.nodes[ALICE].agent.state.contacts[&bob].binding,
        Binding::Mailbox
    );
}

#[test]
fn a_syn_ack_is_kept_only_if_its_card_claims_the_probed_address() {
    let (mut net, mut gw) = setup();
    let (probe_id, request) = bob_probes(&mut net, &mut gw);
    let (grant, _) = alice_grants(&mut net, &mut gw, &request);
    let bob = net.nodes[BOB].id();
    let mallory = AgentKey::from_seed(net.nodes[MALLORY].key);
    let now = net.now;
    let forged = |addresses: Vec<rdv_proto::Address>, id: &str| {
        let mut b = CardBuilder::new(now, vec![RELAY.into()]);
        b.addresses = addresses;
        let card = b.sign(&mallory).unwrap();
        GrantBuilder {
            id: id.into(),
            to: bob.clone(),
            reference: GrantRef::Request(probe_id.clone()),
            card,
            tier: "friend".into(),
            scope: default_scope(false, &[], "100/day"),
            expires: None,
            ts: now,
        }
        .sign(&mallory)
        .unwrap()
    };
    // §5.3: Mallory's card does not list alice@a.test: ignored.
    let g = forged(vec![], "0c1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d");
    deliver(&mut net, &mut gw, BOB, syn_ack_item(&g, COOKIE));
    assert!(net.nodes[BOB].events_of("contact_candidate").is_empty());
    assert!(
        net.nodes[BOB].agent.state.outgoing[&probe_id]
            .candidates
            .is_empty()
    );

    // A card that claims the address is a candidate of its own: it
    // displaces nobody, and the owner must pick by fingerprint.
    let a = rdv_proto::Address::parse(A_MAIL).unwrap();
    let g = forged(vec![a], "0d1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d");
    deliver(
        &mut net,
        &mut gw,
        BOB,
        syn_ack_item(&g, "mallorysmallorysmallorysmm"),
    );
    deliver(&mut net, &mut gw, BOB, syn_ack_item(&grant, COOKIE));
    assert_eq!(
        net.nodes[BOB].agent.state.outgoing[&probe_id]
            .candidates
            .len(),
        2
    );
    let e = cmd(
        &mut net,
        &mut gw,
        BOB,
        Command::Confirm {
            request_id: probe_id.clone(),
            grantor: None,
            label: None,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("2 agents answered"), "{e}");
    let alice = net.nodes[ALICE].id();
    cmd(
        &mut net,
        &mut gw,
        BOB,
        Command::Confirm {
            request_id: probe_id.clone(),
            grantor: Some(alice.clone()),
            label: None,
        },
    )
    .unwrap();
    assert!(net.nodes[BOB].agent.state.contacts.contains_key(&alice));
    assert!(
        !net.nodes[BOB]
            .agent
            .state
            .contacts
            .contains_key(&net.nodes[MALLORY].id())
    );
    // The ACK echoed Alice's cookie, not Mallory's.
    assert!(net.nodes[ALICE].agent.state.contacts.contains_key(&bob));
}

#[test]
fn replayed_items_are_ignored() {
    let (mut net, mut gw) = setup();
    let (probe_id, request) = bob_probes(&mut net, &mut gw);
    let (grant, _) = alice_grants(&mut net, &mut gw, &request);

    // The same probe again at a later seq (a replay the gateway let
    // through): no second request for the owner.
    deliver(
        &mut net,
        &mut gw,
        ALICE,
        probe_item(&request, "weak_mailbox_proof"),
    );
    assert_eq!(net.nodes[ALICE].events_of("contact_request").len(), 1);
    assert!(net.nodes[ALICE].agent.state.pending.is_empty());

    // The SYN-ACK twice (later seq), then an old seq again: one candidate.
    let first = deliver(&mut net, &mut gw, BOB, syn_ack_item(&grant, COOKIE));
    deliver(&mut net, &mut gw, BOB, syn_ack_item(&grant, COOKIE));
    let mut old = syn_ack_item(&grant, COOKIE);
    old["seq"] = json!(first);
    old["received"] = json!("2026-12-01T10:00:00Z");
    run(
        &mut net,
        &mut gw,
        BOB,
        Input::Gateway(GatewayInput::Item {
            gateway: GW.into(),
            item: old,
        }),
    )
    .unwrap();
    assert_eq!(net.nodes[BOB].events_of("contact_candidate").len(), 1);
    assert_eq!(
        net.nodes[BOB].agent.state.outgoing[&probe_id]
            .candidates
            .len(),
        1
    );
    assert_eq!(
        net.nodes[BOB].agent.state.mail_out[&probe_id].answers.len(),
        1
    );

    // An item from a gateway where we proved nothing: nothing.
    run(
        &mut net,
        &mut gw,
        ALICE,
        Input::Gateway(GatewayInput::Item {
            gateway: "https://other.test".into(),
            item: json!({"seq": 999, "kind": "probe", "mailbox": A_MAIL,
                         "payload": probe_payload(&request), "cookie": COOKIE}),
        }),
    )
    .unwrap();
    assert!(
        !net.nodes[ALICE]
            .agent
            .state
            .gateway_cursors
            .contains_key("https://other.test")
    );
}

#[test]
fn one_mailbox_probe_per_address_per_30_days_and_the_gateways_refusals() {
    let (mut net, mut gw) = setup();
    bob_probes(&mut net, &mut gw);
    let again = || Command::MailProbe {
        address: "Alice@A.test".into(),
        greeting: String::new(),
        label: None,
        from_mailbox: None,
    };
    let e = cmd(&mut net, &mut gw, BOB, again()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("next mailbox probe is allowed after 2026-12-31T10:00:00Z"),
        "{text}"
    );
    assert!(gw.calls.is_empty(), "refused before the gateway is asked");
    net.advance(30 * 24 * 3600);
    cmd(&mut net, &mut gw, BOB, again()).unwrap();

    // The gateway refuses (its own 30-day limit): the refusal is told, the
    // probe closed, and its retry_after is kept.
    let call = take_call(&mut gw, BOB);
    let id = call.id().to_string();
    answer(
        &mut net,
        &mut gw,
        BOB,
        call,
        CallOutcome::Refused {
            status: 429,
            code: "address_limited".into(),
            message: "later".into(),
            retry_after: Some(3600),
        },
    );
    let told = net.nodes[BOB].events_of("gateway_refused");
    assert_eq!(told.last().unwrap()["refusal"], "address_limited");
    assert!(net.nodes[BOB].agent.state.outgoing[&id].closed);
    assert!(cmd(&mut net, &mut gw, BOB, again()).is_err());
    net.advance(3601);
    cmd(&mut net, &mut gw, BOB, again()).unwrap();

    // An opted-out address: told clearly, nothing pending.
    let call = take_call(&mut gw, BOB);
    let id = call.id().to_string();
    answer(
        &mut net,
        &mut gw,
        BOB,
        call,
        CallOutcome::Refused {
            status: 403,
            code: "opted_out".into(),
            message: "the address opted out".into(),
            retry_after: None,
        },
    );
    let told = net.nodes[BOB].events_of("gateway_refused");
    assert_eq!(told.last().unwrap()["refusal"], "opted_out");
    assert_eq!(told.last().unwrap()["what"], "probe");
    assert!(net.nodes[BOB].agent.state.outgoing[&id].closed);

    // A probe the gateway could not take does not count.
    let mut other = again();
    if let Command::MailProbe { address, .. } = &mut other {
        *address = "carol@c.test".into();
    }
    cmd(&mut net, &mut gw, BOB, other.clone()).unwrap();
    let call = take_call(&mut gw, BOB);
    answer(
        &mut net,
        &mut gw,
        BOB,
        call,
        CallOutcome::Failed {
            reason: "connection refused".into(),
        },
    );
    cmd(&mut net, &mut gw, BOB, other).unwrap();
}

#[test]
fn granting_a_mailbox_probe_needs_the_mailbox_on_the_card() {
    let (mut net, mut gw) = setup();
    let (probe_id, request) = bob_probes(&mut net, &mut gw);
    deliver(
        &mut net,
        &mut gw,
        ALICE,
        probe_item(&request, "needs_cookie"),
    );
    cmd(
        &mut net,
        &mut gw,
        ALICE,
        Command::RemoveAddress {
            address: A_MAIL.into(),
        },
    )
    .unwrap();
    let e = cmd(
        &mut net,
        &mut gw,
        ALICE,
        Command::Grant {
            request_id: probe_id.clone(),
            tier: "friend".into(),
            scope: default_scope(false, &[], "100/day"),
            label: None,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("your card does not list"), "{e}");
    assert!(net.nodes[ALICE].agent.state.pending.contains_key(&probe_id));
    assert!(gw.calls.iter().all(|(n, _)| *n != ALICE));
}

#[test]
fn a_failed_syn_ack_puts_the_request_back() {
    let (mut net, mut gw) = setup();
    let (probe_id, request) = bob_probes(&mut net, &mut gw);
    deliver(
        &mut net,
        &mut gw,
        ALICE,
        probe_item(&request, "needs_cookie"),
    );
    cmd(
        &mut net,
        &mut gw,
        ALICE,
        Command::Grant {
            request_id: probe_id.clone(),
            tier: "friend".into(),
            scope: default_scope(false, &[], "100/day"),
            label: None,
        },
    )
    .unwrap();
    let call = take_call(&mut gw, ALICE);
    answer(
        &mut net,
        &mut gw,
        ALICE,
        call,
        CallOutcome::Refused {
            status: 410,
            code: "expired".into(),
            message: String::new(),
            retry_after: None,
        },
    );
    assert!(net.nodes[ALICE].agent.state.pending.contains_key(&probe_id));
    assert_eq!(
        net.nodes[ALICE]
            .events_of("gateway_refused")
            .last()
            .unwrap()["what"],
        "syn_ack"
    );
}

fn invite(address: &str) -> Command {
    Command::Invite {
        address: address.into(),
        source: "the school parents' list".into(),
        note: Some("Hi Dana, it's Bob.".into()),
        from_mailbox: None,
    }
}

#[test]
fn one_pending_invite_per_address_a_cooldown_and_opt_outs() {
    let (mut net, mut gw) = setup();
    cmd(&mut net, &mut gw, BOB, invite("dana@d.test")).unwrap();
    let call = take_call(&mut gw, BOB);
    let GatewayCall::SendInvite {
        source,
        invite: doc,
        ..
    } = &call
    else {
        panic!("{call:?}")
    };
    // §5.2.2: the gateway is told where the sender got the address.
    assert_eq!(source, "the school parents' list");
    assert_eq!(doc["to_hint"], "dana@d.test");
    let id = call.id().to_string();
    answer(&mut net, &mut gw, BOB, call, CallOutcome::Done);

    // One pending invite per address.
    let e = cmd(&mut net, &mut gw, BOB, invite("Dana@D.test")).unwrap_err();
    assert!(e.to_string().contains("is pending since"), "{e}");
    assert!(gw.calls.is_empty());

    // Declined: a 30-day cooldown.
    cmd(
        &mut net,
        &mut gw,
        BOB,
        Command::InviteAnswer {
            id: id.clone(),
            accepted: false,
        },
    )
    .unwrap();
    let call = take_call(&mut gw, BOB);
    assert!(matches!(
        call,
        GatewayCall::InviteStatus {
            accepted: false,
            ..
        }
    ));
    net.advance(29 * 24 * 3600);
    let e = cmd(&mut net, &mut gw, BOB, invite("dana@d.test")).unwrap_err();
    assert!(e.to_string().contains("30-day cooldown"), "{e}");
    net.advance(24 * 3600 + 1);
    cmd(&mut net, &mut gw, BOB, invite("dana@d.test")).unwrap();

    // The gateway says the address opted out: permanent.
    let call = take_call(&mut gw, BOB);
    answer(
        &mut net,
        &mut gw,
        BOB,
        call,
        CallOutcome::Refused {
            status: 403,
            code: "opted_out".into(),
            message: "the address opted out".into(),
            retry_after: None,
        },
    );
    assert_eq!(
        net.nodes[BOB].events_of("gateway_refused").last().unwrap()["refusal"],
        "opted_out"
    );
    net.advance(365 * 24 * 3600);
    let e = cmd(&mut net, &mut gw, BOB, invite("dana@d.test")).unwrap_err();
    assert!(e.to_string().contains("opted out"), "{e}");

    // The source is required.
    let mut no_source = invite("erin@e.test");
    if let Command::Invite { source, .. } = &mut no_source {
        source.clear();
    }
    assert!(cmd(&mut net, &mut gw, BOB, no_source).is_err());
}

#[test]
fn an_invite_that_reaches_us_is_shown_once() {
    let (mut net, mut gw) = setup();
    let bob_key = AgentKey::from_seed(net.nodes[BOB].key);
    let inv = rdv_proto::mailblock::Invite::build(
        "0e1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        Some(A_MAIL),
        "tokentokentoken",
        net.now,
        &bob_key,
    )
    .unwrap();
    let item = json!({"kind": "invite", "mailbox": A_MAIL, "payload": inv});
    deliver(&mut net, &mut gw, ALICE, item.clone());
    deliver(&mut net, &mut gw, ALICE, item);
    let told = net.nodes[ALICE].events_of("invited");
    assert_eq!(told.len(), 1);
    assert_eq!(told[0]["from"], net.nodes[BOB].id().as_str());
}
