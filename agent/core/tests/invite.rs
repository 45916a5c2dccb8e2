//! The invite's token back to the inviter (SPEC §5.2.2), and discovery
//! over the ntfy and MQTT hint servers (§4.4 item 1, §6.3), against
//! in-memory agents. The probe gateway is played by the test (it takes the
//! core's gateway calls); ntfy and MQTT are played by feeding the core the
//! bytes a server would hand it. Each test fails when its rule is broken.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Net, RELAY, setup};
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::invite::accept_payload;
use rdv_agent_core::mailbox::{CallOutcome, GatewayCall, GatewayInput};
use rdv_agent_core::state::{Binding, InviteStatus, Via};
use rdv_agent_core::{Command, Effect, Input, Output, PublishOutcome, RequestTo};
use rdv_proto::doc::request::RequestBuilder;
use rdv_proto::envelope::{SealParams, seal};
use rdv_proto::{Address, AgentKey, idtopic};
use serde_json::{Value, json};

const BOB: usize = 0;
const DANA: usize = 1;
const MALLORY: usize = 2;
const GW: &str = "https://gw.test";
const B_MAIL: &str = "bob@b.test";
const D_MAIL: &str = "dana@d.test";
const NTFY: &str = "https://ntfy.test";
const MQTT: &str = "mqtt://mqtt.test:1883";

/// Runs an input on node `i`, carries its Nostr effects to quiescence and
/// returns the reply and every gateway call made on the way.
fn run(net: &mut Net, i: usize, input: Input) -> rdv_agent_core::Result<(Value, Vec<GatewayCall>)> {
    let now = net.now;
    let out = net.nodes[i].handle(input, now)?;
    let reply = out.reply.clone().unwrap_or(Value::Null);
    let mut calls = Vec::new();
    let mut queue: Vec<(usize, Effect)> = out.effects.into_iter().map(|e| (i, e)).collect();
    while let Some((src, e)) = queue.pop() {
        match e {
            Effect::Gateway(call) => calls.push(call),
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
    Ok((reply, calls))
}

fn cmd(net: &mut Net, i: usize, c: Command) -> rdv_agent_core::Result<(Value, Vec<GatewayCall>)> {
    run(net, i, Input::Command(c))
}

/// Bob (bob@b.test, a proved mailbox), Dana (dana@d.test, no mailbox) and
/// Mallory; Bob has invited Dana and the gateway mailed it. Returns the
/// signed invite (what Dana's mail carries) and its id.
fn invited() -> (Net, Value, String) {
    let mut net = Net::new(3);
    net.init(BOB, &[B_MAIL]);
    net.init(DANA, &[D_MAIL]);
    net.init(MALLORY, &[]);
    cmd(
        &mut net,
        BOB,
        Command::MailboxAdd {
            address: B_MAIL.into(),
            gateway: GW.into(),
            on_card: false,
        },
    )
    .unwrap();
    cmd(
        &mut net,
        BOB,
        Command::MailboxVerified {
            address: B_MAIL.into(),
            gateway_address: Some("rdv+bob@gw.test".into()),
        },
    )
    .unwrap();
    let (r, mut calls) = cmd(
        &mut net,
        BOB,
        Command::Invite {
            address: D_MAIL.into(),
            source: "the school parents' list".into(),
            note: None,
            from_mailbox: None,
        },
    )
    .unwrap();
    let call = calls.pop().unwrap();
    let GatewayCall::SendInvite { invite, .. } = &call else {
        panic!("{call:?}")
    };
    let invite = invite.clone();
    run(
        &mut net,
        BOB,
        Input::Gateway(GatewayInput::Answered {
            call,
            outcome: CallOutcome::Done,
        }),
    )
    .unwrap();
    let id = r["invite_id"].as_str().unwrap().to_string();
    assert!(matches!(
        net.nodes[BOB].agent.state.invites[&id].status,
        InviteStatus::Pending
    ));
    (net, invite, id)
}

fn accept(
    net: &mut Net,
    who: usize,
    invite: &Value,
) -> rdv_agent_core::Result<(Value, Vec<GatewayCall>)> {
    let card = net.card(BOB);
    cmd(
        net,
        who,
        Command::AcceptInvite {
            invite: invite.clone(),
            card,
            greeting: "Hi Bob, it's Dana".into(),
            label: Some("Bob".into()),
        },
    )
}

/// `from` sends Bob an `rdv/invite-accept` it built itself (what a peer
/// that holds a token, right or wrong, can send), as the first envelope
/// of its channel, over a fallback carrier.
fn forged_accept(net: &mut Net, from: usize, invite_id: &str, token: &str) -> String {
    let key = AgentKey::from_seed(net.nodes[from].key);
    let bob = net.nodes[BOB].id();
    let id = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d".to_string();
    let request = RequestBuilder {
        id: id.clone(),
        to_hint: None,
        card: net.card(from),
        greeting: "hello".into(),
        capabilities_offered: vec!["rdv/v1".into()],
        ts: net.now,
    }
    .sign(&key)
    .unwrap();
    let payload = accept_payload(invite_id, token, &request);
    let mut rng = rand_core::OsRng;
    let env = seal(
        &payload,
        &SealParams::new(&key, &bob, 1, None, net.now, &mut rng),
    )
    .unwrap();
    let bytes = rdv_proto::canon::to_vec(&env).unwrap();
    run(
        net,
        BOB,
        Input::Envelope {
            carrier: "ntfy".into(),
            bytes,
        },
    )
    .unwrap();
    id
}

// ---- §5.2.2: the token maps the introduction to the handshake ----------------

#[test]
fn the_invitees_request_with_the_token_is_the_answer_to_the_invite() {
    let (mut net, invite, invite_id) = invited();
    let (r, _) = accept(&mut net, DANA, &invite).unwrap();
    assert_eq!(r["kind"], "invite");
    assert_eq!(r["invite_id"], invite_id.as_str());
    let request_id = r["request_id"].as_str().unwrap().to_string();

    // Bob's side: the request is pending as the answer to his invite to
    // that address, binding mailbox (only the invited mailbox had the
    // token), and the owner still decides.
    let bob = &net.nodes[BOB];
    let p = &bob.agent.state.pending[&request_id];
    assert_eq!(p.from, net.nodes[DANA].id());
    assert_eq!(
        p.via,
        Via::Invite {
            address: D_MAIL.into(),
            invite_id: invite_id.clone()
        }
    );
    assert_eq!(p.binding, Binding::Mailbox);
    let asked = bob.events_of("contact_request");
    assert_eq!(asked.last().unwrap()["via"], "invite");
    assert_eq!(asked.last().unwrap()["address"], D_MAIL);
    let answered = bob.events_of("invite_answered");
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["invite_id"], invite_id.as_str());
    assert_eq!(answered[0]["request_id"], request_id.as_str());
    assert_eq!(answered[0]["address"], D_MAIL);
    // Single use: the invite is answered.
    let inv = &bob.agent.state.invites[&invite_id];
    assert!(matches!(inv.status, InviteStatus::Accepted), "{inv:?}");
    assert!(inv.ended.is_some());
    assert!(bob.agent.state.contact(&net.nodes[DANA].id()).is_none());

    // Bob grants; both sides have the contact, Bob's bound to the mailbox.
    cmd(
        &mut net,
        BOB,
        Command::Grant {
            request_id,
            tier: "friend".into(),
            scope: default_scope(false, &[], "100/day"),
            label: Some("Dana".into()),
        },
    )
    .unwrap();
    let dana_id = net.nodes[DANA].id();
    let bob_id = net.nodes[BOB].id();
    let c = net.nodes[BOB].agent.state.contact(&dana_id).unwrap();
    assert_eq!(c.binding, Binding::Mailbox);
    assert_eq!(c.tier, "friend");
    let c = net.nodes[DANA].agent.state.contact(&bob_id).unwrap();
    assert_eq!(c.label.as_deref(), Some("Bob"));
}

#[test]
fn the_gateway_is_told_the_invite_was_accepted() {
    let (mut net, invite, invite_id) = invited();
    // Dana's request reaches Bob while the test carries the network: the
    // gateway calls are Bob's, made on the way.
    let now = net.now;
    let card = net.card(BOB);
    let out: Output = net.nodes[DANA]
        .handle(
            Input::Command(Command::AcceptInvite {
                invite,
                card,
                greeting: String::new(),
                label: None,
            }),
            now,
        )
        .unwrap();
    let Some(Effect::PublishNostr { event, .. }) = out
        .effects
        .iter()
        .find(|e| matches!(e, Effect::PublishNostr { .. }))
        .cloned()
    else {
        panic!("no envelope to Bob")
    };
    let raw = serde_json::to_vec(&serde_json::to_value(&*event).unwrap()).unwrap();
    let (_, calls) = run(
        &mut net,
        BOB,
        Input::Nostr {
            relay: RELAY.into(),
            json: raw,
        },
    )
    .unwrap();
    assert!(
        calls.iter().any(|c| matches!(
            c,
            GatewayCall::InviteStatus { invite_id: i, accepted: true, gateway } if i == &invite_id && gateway == GW
        )),
        "{calls:?}"
    );
}

#[test]
fn a_wrong_token_maps_nothing_and_the_request_is_a_plain_one() {
    let (mut net, _invite, invite_id) = invited();
    let rid = forged_accept(&mut net, MALLORY, &invite_id, "notthetoken");
    let bob = &net.nodes[BOB];
    // Gated as any request: pending, via envelope, binding card.
    let p = &bob.agent.state.pending[&rid];
    assert_eq!(p.via, Via::Envelope);
    assert_eq!(p.binding, Binding::Card);
    assert!(bob.events_of("invite_answered").is_empty());
    assert!(matches!(
        bob.agent.state.invites[&invite_id].status,
        InviteStatus::Pending
    ));
}

#[test]
fn the_token_is_single_use() {
    let (mut net, invite, invite_id) = invited();
    accept(&mut net, DANA, &invite).unwrap();
    // Someone else who learned the token (it was in the mail) tries again.
    let token = invite["token"].as_str().unwrap().to_string();
    let rid = forged_accept(&mut net, MALLORY, &invite_id, &token);
    let bob = &net.nodes[BOB];
    assert_eq!(bob.agent.state.pending[&rid].via, Via::Envelope);
    assert_eq!(bob.events_of("invite_answered").len(), 1);
}

#[test]
fn the_token_counts_only_for_the_invite_it_came_with() {
    let (mut net, invite, _invite_id) = invited();
    let token = invite["token"].as_str().unwrap().to_string();
    // The right token under another invite id.
    let rid = forged_accept(
        &mut net,
        MALLORY,
        "0f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        &token,
    );
    let bob = &net.nodes[BOB];
    assert_eq!(bob.agent.state.pending[&rid].via, Via::Envelope);
    assert!(bob.events_of("invite_answered").is_empty());
}

#[test]
fn a_blocked_invitee_gets_silence_and_the_token_stays_unused() {
    let (mut net, invite, invite_id) = invited();
    let mallory = net.nodes[MALLORY].id();
    cmd(&mut net, BOB, Command::Block { id: mallory }).unwrap();
    let token = invite["token"].as_str().unwrap().to_string();
    let rid = forged_accept(&mut net, MALLORY, &invite_id, &token);
    let bob = &net.nodes[BOB];
    assert!(!bob.agent.state.pending.contains_key(&rid));
    assert!(bob.events_of("invite_answered").is_empty());
    assert!(matches!(
        bob.agent.state.invites[&invite_id].status,
        InviteStatus::Pending
    ));
}

#[test]
fn an_answer_of_the_wrong_shape_is_dropped() {
    let (mut net, invite, invite_id) = invited();
    let token = invite["token"].as_str().unwrap().to_string();
    let key = AgentKey::from_seed(net.nodes[MALLORY].key);
    let bob = net.nodes[BOB].id();
    let request = RequestBuilder {
        id: "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d".into(),
        to_hint: None,
        card: net.card(MALLORY),
        greeting: String::new(),
        capabilities_offered: vec![],
        ts: net.now,
    }
    .sign(&key)
    .unwrap();
    let mut payload = accept_payload(&invite_id, &token, &request);
    payload["extra"] = json!(true);
    let mut rng = rand_core::OsRng;
    let env = seal(
        &payload,
        &SealParams::new(&key, &bob, 1, None, net.now, &mut rng),
    )
    .unwrap();
    run(
        &mut net,
        BOB,
        Input::Envelope {
            carrier: "ntfy".into(),
            bytes: rdv_proto::canon::to_vec(&env).unwrap(),
        },
    )
    .unwrap();
    let bob = &net.nodes[BOB];
    assert!(bob.agent.state.pending.is_empty());
    assert!(matches!(
        bob.agent.state.invites[&invite_id].status,
        InviteStatus::Pending
    ));
}

#[test]
fn accepting_needs_the_inviters_own_card_and_a_signed_invite() {
    let (mut net, invite, _) = invited();
    // Mallory's card is not the inviter's.
    let card = net.card(MALLORY);
    let e = cmd(
        &mut net,
        DANA,
        Command::AcceptInvite {
            invite: invite.clone(),
            card,
            greeting: String::new(),
            label: None,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("the invite is from"), "{e}");
    // A changed token breaks the inviter's signature.
    let mut forged = invite.clone();
    forged["token"] = json!("mine");
    let e = accept(&mut net, DANA, &forged).unwrap_err();
    assert!(e.to_string().contains("not a signed invite"), "{e}");
    assert!(net.nodes[DANA].agent.state.outgoing.is_empty());
    assert!(net.nodes[BOB].agent.state.pending.is_empty());
}

// ---- §4.4 item 1: ntfy and MQTT as discovery carriers -------------------------

fn with_hints(addresses: &[&str], pointer: bool) -> rdv_agent_core::Setup {
    let mut s = setup(addresses);
    s.public_pointer = pointer;
    s.other_rendezvous = vec![
        json!({"type": "ntfy", "server": NTFY, "topic": "rdv-x", "pref": 2}),
        json!({"type": "mqtt", "url": MQTT, "topic": "rdv-x", "pref": 3}),
    ];
    s
}

/// (server, topic, body, retain) of every ntfy and MQTT publish.
fn hint_publishes(effects: &[Effect]) -> Vec<(String, String, Value, bool)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishNtfy {
                server,
                topic,
                body,
                ..
            } => Some((
                server.clone(),
                topic.clone(),
                serde_json::from_str(body).unwrap(),
                false,
            )),
            Effect::PublishMqtt {
                url,
                topic,
                body,
                retain,
                ..
            } => Some((
                url.clone(),
                topic.clone(),
                serde_json::from_str(body).unwrap(),
                *retain,
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn the_public_pointer_goes_on_the_hint_servers_address_and_id_topics() {
    let mut net = Net::new(1);
    let now = net.now;
    let out = net.nodes[0]
        .handle(
            Input::Command(Command::Init(with_hints(&["ann@a.test"], true))),
            now,
        )
        .unwrap();
    let id = net.nodes[0].id();
    let card = net.card(0);
    let dtopic = Address::parse("ann@a.test").unwrap().dtopic();
    let got = hint_publishes(&out.effects);
    for (server, retain) in [(NTFY, false), (MQTT, true)] {
        for topic in [dtopic.clone(), idtopic(&id)] {
            assert!(
                got.iter()
                    .any(|(s, t, b, r)| s == server && t == &topic && b == &card && *r == retain),
                "{server} {topic}: {got:?}"
            );
        }
    }
    // A removed address's topic gets the new card too (§4.4).
    let out = net.nodes[0]
        .handle(
            Input::Command(Command::RemoveAddress {
                address: "ann@a.test".into(),
            }),
            now,
        )
        .unwrap();
    let card = net.card(0);
    let got = hint_publishes(&out.effects);
    assert!(
        got.iter()
            .any(|(s, t, b, _)| s == NTFY && t == &dtopic && b == &card),
        "{got:?}"
    );
}

#[test]
fn without_the_pointer_nothing_goes_on_a_guessable_topic() {
    // §4.4, §9: the card is on no topic (address or ID) unless the owner
    // opted in; envelopes keep to the agent's own fallback topic.
    let mut net = Net::new(1);
    let now = net.now;
    let out = net.nodes[0]
        .handle(
            Input::Command(Command::Init(with_hints(&["ann@a.test"], false))),
            now,
        )
        .unwrap();
    assert!(hint_publishes(&out.effects).is_empty());
}

#[test]
fn a_topic_probe_goes_on_the_hint_servers_too() {
    let mut net = Net::new(1);
    let now = net.now;
    net.nodes[0]
        .handle(Input::Command(Command::Init(with_hints(&[], false))), now)
        .unwrap();
    let out = net.nodes[0]
        .handle(
            Input::Command(Command::Request {
                to: RequestTo::Address("Carl@C.test".into()),
                greeting: "hi".into(),
                label: None,
            }),
            now,
        )
        .unwrap();
    let dtopic = Address::parse("carl@c.test").unwrap().dtopic();
    let got = hint_publishes(&out.effects);
    for server in [NTFY, MQTT] {
        let (_, _, body, retain) = got
            .iter()
            .find(|(s, t, _, _)| s == server && t == &dtopic)
            .unwrap_or_else(|| panic!("{server}: {got:?}"));
        assert_eq!(body["type"], "rdv/contact-request");
        assert_eq!(body["to_hint"], "carl@c.test");
        assert!(!retain, "a probe is not retained");
    }
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::PublishNostr { .. })),
        "and on the relays"
    );
}

/// A topic probe from node `from` to `address`, as bytes on a topic.
fn probe_bytes(net: &Net, from: usize, address: &str, id: &str) -> Vec<u8> {
    let key = AgentKey::from_seed(net.nodes[from].key);
    let req = RequestBuilder {
        id: id.into(),
        to_hint: Some(address.into()),
        card: net.card(from),
        greeting: "hi".into(),
        capabilities_offered: vec![],
        ts: net.now,
    }
    .sign(&key)
    .unwrap();
    rdv_proto::canon::to_vec(&req).unwrap()
}

#[test]
fn a_probe_on_an_ntfy_or_mqtt_topic_is_gated_like_one_from_a_relay() {
    let mut net = Net::new(2);
    let now = net.now;
    net.nodes[0]
        .handle(
            Input::Command(Command::Init(with_hints(&["ann@a.test"], false))),
            now,
        )
        .unwrap();
    net.init(1, &[]);
    let dtopic = Address::parse("ann@a.test").unwrap().dtopic();
    let topic = |t: &str, bytes: Vec<u8>| Input::Topic {
        carrier: format!("ntfy:{NTFY}"),
        topic: t.to_string(),
        bytes,
    };

    // Not our topic; a probe naming another address; oversized: nothing.
    let other = Address::parse("zed@z.test").unwrap().dtopic();
    let b = probe_bytes(
        &net,
        1,
        "ann@a.test",
        "1a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    );
    net.nodes[0].handle(topic(&other, b), now).unwrap();
    let b = probe_bytes(
        &net,
        1,
        "zed@z.test",
        "2a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    );
    net.nodes[0].handle(topic(&dtopic, b), now).unwrap();
    let mut big = probe_bytes(
        &net,
        1,
        "ann@a.test",
        "3a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    );
    big.extend(std::iter::repeat_n(
        b' ',
        rdv_proto::consts::ENVELOPE_MAX_BYTES,
    ));
    net.nodes[0].handle(topic(&dtopic, big), now).unwrap();
    // Our own card on the topic (a retained pointer) is not a request.
    let card = rdv_proto::canon::to_vec(&net.card(0)).unwrap();
    net.nodes[0].handle(topic(&dtopic, card), now).unwrap();
    assert!(net.nodes[0].agent.state.pending.is_empty());
    assert!(net.nodes[0].events_of("contact_request").is_empty());

    // The probe on our topic: pending, via topic, binding claimed; the same
    // probe again over MQTT (the bridge carries it on both) is a replay.
    let id = "4a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    let b = probe_bytes(&net, 1, "ann@a.test", id);
    net.nodes[0].handle(topic(&dtopic, b.clone()), now).unwrap();
    net.nodes[0]
        .handle(
            Input::Topic {
                carrier: format!("mqtt:{MQTT}"),
                topic: dtopic.clone(),
                bytes: b,
            },
            now,
        )
        .unwrap();
    let p = &net.nodes[0].agent.state.pending[id];
    assert_eq!(
        p.via,
        Via::Topic {
            address: "ann@a.test".into()
        }
    );
    assert_eq!(p.binding, Binding::Claimed);
    assert_eq!(net.nodes[0].events_of("contact_request").len(), 1);
}
