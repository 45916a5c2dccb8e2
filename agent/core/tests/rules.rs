//! The agent's consent and channel rules (SPEC §4–§7), each against a
//! network of in-memory agents. Each test fails when its rule is broken.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Net, RELAY, grant_scope};
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::state::{Binding, ContactStatus};
use rdv_agent_core::{Command, Input, RequestTo};
use rdv_proto::doc::grant::{GrantBuilder, GrantRef};
use rdv_proto::{AgentId, AgentKey};
use serde_json::json;

const ALICE: usize = 0;
const BOB: usize = 1;

/// Alice and Bob, contacts through a topic probe Alice granted and Bob
/// confirmed.
fn contacts_by_probe() -> Net {
    let mut net = Net::new(3);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    net.befriend(BOB, ALICE, "alice@example.com");
    net
}

#[test]
fn probe_grant_confirm_then_messages_both_ways() {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    let probe_id = net.probe(BOB, "alice@example.com", Some("Alice"));

    // §4.4: the probe reaches Alice as a pending request, binding claimed.
    let reqs = net.nodes[ALICE].events_of("contact_request");
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0]["via"], "topic");
    assert_eq!(reqs[0]["binding"], "claimed");
    assert_eq!(reqs[0]["address"], "alice@example.com");
    assert_eq!(
        reqs[0]["greeting"]["untrusted_peer_text"],
        "Hi, Bob's agent"
    );
    assert!(
        net.nodes[ALICE].agent.state.contacts.is_empty(),
        "no contact before the human grants"
    );

    let req = net.pending_id(ALICE);
    net.cmd(
        ALICE,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: grant_scope(),
            label: Some("Bob".into()),
        },
    )
    .unwrap();

    // §5.3: a probe answer is a candidate, never a contact until confirmed.
    assert!(net.nodes[BOB].agent.state.contacts.is_empty());
    let cands = net.nodes[BOB].events_of("contact_candidate");
    assert_eq!(cands.len(), 1);
    assert_eq!(cands[0]["grantor"], net.nodes[ALICE].id().as_str());

    net.cmd(
        BOB,
        Command::Confirm {
            request_id: probe_id,
            grantor: None,
            label: None,
        },
    )
    .unwrap();
    let c = &net.nodes[BOB].agent.state.contacts[&net.nodes[ALICE].id()];
    assert_eq!(
        c.binding,
        Binding::Claimed,
        "a confirmed probe answer is claimed"
    );
    assert_eq!(
        c.tier, "stranger",
        "§5.3: the requester's own tier starts at stranger"
    );
    assert_eq!(c.label.as_deref(), Some("Alice"));

    net.send_text(BOB, ALICE, "dinner next week?");
    net.send_text(ALICE, BOB, "yes");
    net.send_text(BOB, ALICE, "great");
    let at_alice = net.nodes[ALICE].events_of("message");
    let at_bob = net.nodes[BOB].events_of("message");
    assert_eq!(at_alice.len(), 2);
    assert_eq!(at_bob.len(), 1);
    assert_eq!(at_alice[0]["payload_type"], "note/text");
    assert!(
        at_alice[0]["payload"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("dinner next week?")
    );
    assert_eq!(at_alice[1]["seq"], 2);
}

#[test]
fn request_by_card_is_answered_only_by_that_cards_agent() {
    let mut net = Net::new(3);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.init(2, &[]);
    let alice_card = net.card(ALICE);
    let r = net
        .cmd(
            BOB,
            Command::Request {
                to: RequestTo::Card(alice_card),
                greeting: "hello".into(),
                label: None,
            },
        )
        .unwrap();
    let request_id = r["request_id"].as_str().unwrap().to_string();
    let p = &net.nodes[ALICE].events_of("contact_request")[0];
    assert_eq!(p["via"], "envelope");

    // Mallory (node 2) answers Bob's request to Alice's card: refused
    // before any state changes (§5.3).
    let mallory = AgentKey::from_seed([3; 32]);
    let forged = GrantBuilder {
        id: "0b1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d".into(),
        to: net.nodes[BOB].id(),
        reference: GrantRef::Request(request_id.clone()),
        card: net.card(2),
        tier: "friend".into(),
        scope: grant_scope(),
        expires: None,
        ts: net.now,
    }
    .sign(&mallory)
    .unwrap();
    let bob = net.nodes[BOB].id();
    net.cmd(
        2,
        Command::KeepCard {
            card: net.card(BOB),
            binding: Binding::Card,
        },
    )
    .unwrap();
    // Mallory seals the forged grant to Bob in an envelope of its own.
    let mallory_node = &mut net.nodes[2];
    let _ = mallory_node;
    let env = {
        let p = rdv_proto::envelope::SealParams::new(
            &mallory,
            &bob,
            1,
            None,
            net.now,
            &mut rand_core::OsRng,
        );
        rdv_proto::envelope::seal(&forged, &p).unwrap()
    };
    let ev = rdv_proto::nostr_event::envelope_event(
        &env,
        &mallory.nostr_keys().unwrap(),
        net.now.unix_timestamp() as u64,
        [7; 32],
    )
    .unwrap();
    net.inject(BOB, &serde_json::to_value(&ev).unwrap());
    assert!(
        net.nodes[BOB].agent.state.contacts.is_empty(),
        "a grant from another agent than the card's makes no contact"
    );
    assert!(!net.nodes[BOB].agent.state.outgoing[&request_id].closed);

    // Alice's own grant does.
    let req = net.pending_id(ALICE);
    net.cmd(
        ALICE,
        Command::Grant {
            request_id: req,
            tier: "colleague".into(),
            scope: grant_scope(),
            label: None,
        },
    )
    .unwrap();
    let c = &net.nodes[BOB].agent.state.contacts[&net.nodes[ALICE].id()];
    assert_eq!(c.status, ContactStatus::Active);
    assert_eq!(
        c.granted_to_us.as_ref().unwrap().tier,
        "colleague",
        "the grant sets what Bob may do towards Alice"
    );
    assert!(
        c.granted_by_us.is_none(),
        "§5.3: a received grant never sets the grantor's rights"
    );
}

#[test]
fn probe_answer_whose_card_does_not_list_the_address_is_ignored() {
    let mut net = Net::new(3);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    // Node 2 listens on alice@example.com too but its card... lists it as well;
    // give it a card without the address instead.
    net.init(2, &["alice@example.com"]);
    let _probe = net.probe(BOB, "alice@example.com", Some("Alice"));
    // Node 2 removes the address from its card before answering.
    net.cmd(
        2,
        Command::RemoveAddress {
            address: "alice@example.com".into(),
        },
    )
    .unwrap();
    let req = net.pending_id(2);
    net.cmd(
        2,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: grant_scope(),
            label: None,
        },
    )
    .unwrap();
    assert!(
        net.nodes[BOB].events_of("contact_candidate").is_empty(),
        "§5.3: an answer whose card does not claim the probed address is ignored"
    );
    // Alice's answer, whose card lists it, is a candidate.
    let req = net.pending_id(ALICE);
    net.cmd(
        ALICE,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: grant_scope(),
            label: None,
        },
    )
    .unwrap();
    assert_eq!(net.nodes[BOB].events_of("contact_candidate").len(), 1);
}

#[test]
fn candidates_are_capped_per_probe_and_never_evict_another_probe() {
    let n = 20;
    let mut net = Net::new(n);
    net.init(BOB, &[]);
    for i in 2..n {
        net.init(i, &["alice@example.com", "carol@example.com"]);
    }
    let first = net.probe(BOB, "alice@example.com", Some("Alice"));
    let second = net
        .cmd(
            BOB,
            Command::Request {
                to: RequestTo::Address("carol@example.com".into()),
                greeting: String::new(),
                label: None,
            },
        )
        .unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    // One answer to the second probe first.
    let carol_req = net.nodes[2]
        .agent
        .state
        .pending
        .values()
        .find(|p| p.request["to_hint"] == "carol@example.com")
        .unwrap()
        .request_id
        .clone();
    net.cmd(
        2,
        Command::Grant {
            request_id: carol_req,
            tier: "friend".into(),
            scope: grant_scope(),
            label: None,
        },
    )
    .unwrap();
    // Then 18 answers to the first.
    for i in 2..n {
        let req = net.nodes[i]
            .agent
            .state
            .pending
            .values()
            .find(|p| p.request["to_hint"] == "alice@example.com")
            .unwrap()
            .request_id
            .clone();
        net.cmd(
            i,
            Command::Grant {
                request_id: req,
                tier: "friend".into(),
                scope: grant_scope(),
                label: None,
            },
        )
        .unwrap();
    }
    let st = &net.nodes[BOB].agent.state;
    assert_eq!(
        st.outgoing[&first].candidates.len(),
        16,
        "at most 16 per probe"
    );
    assert_eq!(
        st.outgoing[&first].dropped, 2,
        "answers over the cap are counted"
    );
    assert_eq!(
        st.outgoing[&second].candidates.len(),
        1,
        "another probe's candidate stays"
    );
    assert_eq!(net.nodes[BOB].events_of("candidates_dropped").len(), 1);
}

#[test]
fn a_replayed_request_is_ignored() {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.probe(BOB, "alice@example.com", Some("Alice"));
    let probe_event = net
        .log
        .iter()
        .find(|e| e["tags"].as_array().unwrap().iter().any(|t| t[0] == "t"))
        .cloned()
        .unwrap();
    let req = net.pending_id(ALICE);
    net.cmd(
        ALICE,
        Command::Decline {
            request_id: req,
            block: false,
        },
    )
    .unwrap();
    net.inject(ALICE, &probe_event);
    assert!(
        net.nodes[ALICE].agent.state.pending.is_empty(),
        "§5.4: a seen request id is ignored"
    );
    assert_eq!(net.nodes[ALICE].events_of("contact_request").len(), 1);
}

#[test]
fn blocked_keys_and_the_block_policy_get_silence() {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.cmd(
        ALICE,
        Command::Block {
            id: net.nodes[BOB].id(),
        },
    )
    .unwrap();
    net.probe(BOB, "alice@example.com", Some("Alice"));
    assert!(
        net.nodes[ALICE].agent.state.pending.is_empty(),
        "a blocked key is not surfaced"
    );

    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.cmd(
        ALICE,
        Command::SetPolicy {
            inbound: "block".into(),
        },
    )
    .unwrap();
    let sent_before = net.log.len();
    net.probe(BOB, "alice@example.com", Some("Alice"));
    assert!(net.nodes[ALICE].agent.state.pending.is_empty());
    assert_eq!(
        net.log.len(),
        sent_before + 1,
        "only the probe itself: no answer leaves"
    );
}

#[test]
fn messages_from_a_stranger_are_dropped_and_keep_no_state() {
    let mut net = Net::new(2);
    net.init(ALICE, &[]);
    net.init(BOB, &[]);
    let stranger = AgentKey::from_seed([2; 32]);
    let alice = net.nodes[ALICE].id();
    for seq in [1u64, 7, 9] {
        let env = rdv_proto::envelope::seal(
            &json!({"type": "note/text", "text": "buy now"}),
            &rdv_proto::envelope::SealParams::new(
                &stranger,
                &alice,
                seq,
                (seq > 1).then_some("00".repeat(32)).as_deref(),
                net.now,
                &mut rand_core::OsRng,
            ),
        )
        .unwrap();
        let ev = rdv_proto::nostr_event::envelope_event(
            &env,
            &stranger.nostr_keys().unwrap(),
            net.now.unix_timestamp() as u64,
            [1; 32],
        )
        .unwrap();
        net.inject(ALICE, &serde_json::to_value(&ev).unwrap());
    }
    assert!(net.nodes[ALICE].events_of("message").is_empty());
    assert!(
        net.nodes[ALICE]
            .agent
            .state
            .channels_in
            .get(&net.nodes[BOB].id())
            .is_none(),
        "§6.4: no channel state for a sender that is not admitted"
    );
}

#[test]
fn a_forked_chain_is_refused_and_shown_until_the_human_resyncs() {
    let mut net = contacts_by_probe();
    net.send_text(BOB, ALICE, "one");
    // Bob's home is copied; the copy and the original both go on.
    let copy_records = net.nodes[BOB].records.clone();
    net.send_text(BOB, ALICE, "two");
    let original = std::mem::replace(&mut net.nodes[BOB].records, copy_records);
    net.nodes[BOB].reload();
    net.send_text(BOB, ALICE, "two from the copy");
    let forks = net.nodes[ALICE].events_of("forked");
    assert_eq!(
        forks.len(),
        1,
        "§6.4: the fork is shown, not dropped silently"
    );
    assert_eq!(forks[0]["id"], net.nodes[BOB].id().as_str());
    let msgs = net.nodes[ALICE].events_of("message").len();

    // Refused until the human re-syncs: even the original's next message.
    net.nodes[BOB].records = original;
    net.nodes[BOB].reload();
    net.advance(10);
    net.send_text(BOB, ALICE, "three");
    assert_eq!(
        net.nodes[ALICE].events_of("message").len(),
        msgs,
        "refused until resync"
    );

    net.cmd(
        ALICE,
        Command::Resync {
            id: net.nodes[BOB].id(),
        },
    )
    .unwrap();
    net.advance(10);
    net.send_text(BOB, ALICE, "four");
    let all = net.nodes[ALICE].events_of("message");
    assert_eq!(
        all.len(),
        msgs + 1,
        "after the resync the next newer envelope is taken"
    );
    assert!(
        all.last().unwrap()["payload"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("four")
    );
}

/// The same journey with no clock tick at all, as when a person re-syncs
/// within a second of the fork: `created` is written in whole seconds, so
/// the sender's next envelope must still be newer than everything the
/// receiver accepted (§6.4), or the re-sync drops it as a replay.
#[test]
fn after_a_resync_in_the_same_second_the_next_message_is_taken() {
    let mut net = contacts_by_probe();
    net.send_text(BOB, ALICE, "one");
    let copy_records = net.nodes[BOB].records.clone();
    net.send_text(BOB, ALICE, "two");
    let original = std::mem::replace(&mut net.nodes[BOB].records, copy_records);
    net.nodes[BOB].reload();
    net.send_text(BOB, ALICE, "two from the copy");
    assert_eq!(net.nodes[ALICE].events_of("forked").len(), 1);
    net.nodes[BOB].records = original;
    net.nodes[BOB].reload();
    net.send_text(BOB, ALICE, "three, while refused");
    let bob = net.nodes[BOB].id();
    net.cmd(ALICE, Command::Resync { id: bob }).unwrap();
    net.send_text(BOB, ALICE, "four");
    net.send_text(BOB, ALICE, "five");
    let texts: Vec<String> = net.nodes[ALICE]
        .events_of("message")
        .iter()
        .filter_map(|e| {
            e["payload"]["untrusted_peer_text"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert!(texts[texts.len() - 2].contains("four"), "{texts:?}");
    assert!(texts[texts.len() - 1].contains("five"), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.contains("three")),
        "the refused envelope stays refused: {texts:?}"
    );
}

#[test]
fn no_seq_is_reused_after_a_restart() {
    let mut net = contacts_by_probe();
    net.send_text(BOB, ALICE, "one");
    net.nodes[BOB].reload();
    net.send_text(BOB, ALICE, "two");
    net.nodes[BOB].reload();
    let r = net.send_text(BOB, ALICE, "three");
    assert_eq!(r["seq"], 3, "§7: the seq was committed with the outbox");
    assert_eq!(net.nodes[ALICE].events_of("message").len(), 3);
    assert!(net.nodes[ALICE].events_of("forked").is_empty());
}

#[test]
fn over_the_grants_max_frequency_the_contact_is_revoked() {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    let probe_id = net.probe(BOB, "alice@example.com", Some("Alice"));
    let req = net.pending_id(ALICE);
    net.cmd(
        ALICE,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: default_scope(false, &[], "3/hour"),
            label: None,
        },
    )
    .unwrap();
    net.cmd(
        BOB,
        Command::Confirm {
            request_id: probe_id,
            grantor: None,
            label: None,
        },
    )
    .unwrap();
    for i in 0..4 {
        net.send_text(BOB, ALICE, &format!("m{i}"));
    }
    assert_eq!(net.nodes[ALICE].events_of("message").len(), 3);
    let rev = net.nodes[ALICE].events_of("revoked");
    assert_eq!(rev.len(), 1);
    assert_eq!(rev[0]["by"], "abuse");
    // Bob is told: the revoke reached him.
    assert_eq!(net.nodes[BOB].events_of("revoked")[0]["by"], "peer");
    assert!(
        net.nodes[BOB]
            .agent
            .state
            .contact(&net.nodes[ALICE].id())
            .is_none()
    );
}

#[test]
fn a_card_change_reaches_contacts_and_changes_nothing_else() {
    let mut net = contacts_by_probe();
    net.cmd(
        ALICE,
        Command::AddRelay {
            url: "wss://relay2.test".into(),
        },
    )
    .unwrap();
    let at_bob = &net.nodes[BOB].agent.state.contacts[&net.nodes[ALICE].id()];
    let card = rdv_proto::doc::card::Card::parse_signed(&at_bob.card, false).unwrap();
    assert!(card.relays.contains(&"wss://relay2.test".to_string()));
    assert_eq!(at_bob.tier, "stranger", "tier unchanged by a card update");
    assert_eq!(net.nodes[BOB].events_of("card_updated").len(), 1);
    // The same card again is ignored.
    assert!(net.nodes[BOB].events_of("card_update_refused").is_empty());
    // Relays now route Bob's messages to the new relay too.
    let r = net.send_text(BOB, ALICE, "hi");
    assert_eq!(r["seq"], 1);
    assert_eq!(net.nodes[ALICE].events_of("message").len(), 1);
}

#[test]
fn a_probe_per_address_per_30_days() {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.probe(BOB, "alice@example.com", Some("Alice"));
    let again = net.cmd(
        BOB,
        Command::Request {
            to: RequestTo::Address("Alice@Example.com".into()),
            greeting: String::new(),
            label: None,
        },
    );
    let e = again.unwrap_err().to_string();
    assert!(e.contains("less than 30 days"), "{e}");
    net.advance(31 * 24 * 3600);
    net.probe(BOB, "alice@example.com", Some("Alice"));
}

#[test]
fn delivery_heals_to_the_next_carrier_when_relays_fail() {
    let mut net = contacts_by_probe();
    // Alice lists an ntfy fallback; Bob gets her new card.
    net.cmd(
        ALICE,
        Command::SetFallbacks {
            ntfy: Some("https://ntfy.test".into()),
            mqtt: None,
        },
    )
    .unwrap();
    net.down = true;
    let alice = net.nodes[ALICE].id();
    let now = net.now;
    let out = net.nodes[BOB]
        .handle(
            Input::Command(Command::Send {
                to: alice,
                payload: json!({"type": "note/text", "text": "are you there"}),
            }),
            now,
        )
        .unwrap();
    let mut effects = out.effects;
    let mut ntfy = None;
    for _ in 0..10 {
        let mut next = Vec::new();
        for e in effects {
            match e {
                rdv_agent_core::Effect::PublishNostr {
                    delivery, relays, ..
                } => {
                    let outcomes = relays
                        .iter()
                        .map(|r| {
                            (
                                r.clone(),
                                rdv_agent_core::PublishOutcome::Unreachable {
                                    reason: "down".into(),
                                },
                            )
                        })
                        .collect();
                    let o = net.nodes[BOB]
                        .handle(Input::Published { delivery, outcomes }, now)
                        .unwrap();
                    next.extend(o.effects);
                }
                rdv_agent_core::Effect::PublishNtfy { server, topic, .. } => {
                    ntfy = Some((server, topic))
                }
                _ => {}
            }
        }
        if next.is_empty() {
            // Retries wait for the tick.
            net.advance(600);
            let o = net.nodes[BOB].handle(Input::Tick, net.now).unwrap();
            next.extend(o.effects);
        }
        effects = next;
        if ntfy.is_some() {
            break;
        }
    }
    let (server, topic) = ntfy.expect("the delivery moved to the card's ntfy entry");
    assert_eq!(server, "https://ntfy.test");
    assert!(topic.starts_with("rdv-"));
    assert_eq!(
        net.nodes[BOB].agent.state.relay_health[RELAY]
            .last_error_kind
            .as_deref(),
        Some("unreachable")
    );
}

#[test]
fn the_restored_state_decides_like_the_live_one() {
    let mut net = contacts_by_probe();
    net.send_text(BOB, ALICE, "one");
    // Rebuild Alice from her records mid-conversation: every later decision
    // is the same as the live agent's.
    let live_contacts = format!("{:?}", net.nodes[ALICE].agent.state.contacts);
    net.nodes[ALICE].reload();
    assert_eq!(
        live_contacts,
        format!("{:?}", net.nodes[ALICE].agent.state.contacts)
    );
    net.send_text(BOB, ALICE, "two");
    assert_eq!(net.nodes[ALICE].events_of("message").len(), 2);
    assert!(net.nodes[ALICE].events_of("forked").is_empty());
}

#[test]
fn sending_needs_a_current_contact_and_a_plain_payload_type() {
    let mut net = contacts_by_probe();
    let alice = net.nodes[ALICE].id();
    let stranger = AgentId::parse(AgentKey::from_seed([9; 32]).id().as_str()).unwrap();
    let e = net
        .cmd(
            BOB,
            Command::Send {
                to: stranger,
                payload: json!({"type": "note/text"}),
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("not a current contact"), "{e}");
    for (p, why) in [
        (json!({"type": "rdv/revoke"}), "protocol's own"),
        (json!({"type": "Bad Type"}), "type must match"),
        (json!({"text": "no type"}), "\"type\""),
    ] {
        let e = net
            .cmd(
                BOB,
                Command::Send {
                    to: alice.clone(),
                    payload: p,
                },
            )
            .unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[test]
fn a_confirm_phrase_grants_only_the_terms_it_was_shown_with() {
    use rdv_agent_core::consent::GateVerdict;
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.probe(BOB, "alice@example.com", Some("Alice"));
    let req = net.pending_id(ALICE);
    let scope = grant_scope();
    let mut rng = rand_core::OsRng;
    let now = net.now;
    let mut ctx = rdv_agent_core::Ctx { now, rng: &mut rng };
    let a = &mut net.nodes[ALICE].agent;
    // §5.5: never for family or spouse.
    let e = a
        .issue_grant_phrase(&req, "family", &scope, None, &mut ctx)
        .err()
        .unwrap();
    assert!(e.to_string().contains("cannot grant tier family"), "{e}");
    let secret = a
        .issue_grant_phrase(&req, "friend", &scope, None, &mut ctx)
        .unwrap();
    let phrase = secret.expose().to_string();
    let stored = format!("{:?}", a.state.pending[&req]);
    assert!(!stored.contains(&phrase), "the store keeps only a hash");
    // A wrong phrase is a counted miss, and grants nothing.
    let v = a
        .grant_with_phrase(
            &req,
            "friend",
            scope.clone(),
            None,
            "wrong-words-here-000",
            &mut ctx,
        )
        .unwrap();
    assert_eq!(v, GateVerdict::WrongPhrase { misses_left: 4 });
    // The right phrase for another tier approves nothing.
    let v = a
        .grant_with_phrase(&req, "colleague", scope.clone(), None, &phrase, &mut ctx)
        .unwrap();
    assert!(matches!(v, GateVerdict::NewPhraseNeeded { .. }), "{v:?}");
    assert!(a.state.contacts.is_empty());
    // A new phrase for these terms, then the grant.
    let secret = a
        .issue_grant_phrase(&req, "friend", &scope, Some("Bob"), &mut ctx)
        .unwrap();
    let v = a
        .grant_with_phrase(
            &req,
            "friend",
            scope.clone(),
            Some("Bob".into()),
            secret.expose(),
            &mut ctx,
        )
        .unwrap();
    assert_eq!(v, GateVerdict::Approved);
    assert_eq!(a.state.contacts.len(), 1);
    let out = a.take_output().unwrap();
    assert!(
        !format!("{:?}{:?}", out.events, out.writes).contains(secret.expose()),
        "no event or write holds the phrase"
    );
}
