//! A contact's binding (SPEC §4.4) is recorded when it is made and follows
//! the key after: a later discovery that shows more of the same key (a DNS
//! TXT record, a directory listing, the owner's in-person exchange) upgrades
//! what the relationship records keep. It never downgrades, and a find of
//! another key never touches the contact. Discovery feeds every card it
//! finds to the core as `KeepCard` with its binding; that is the input here.
#![allow(clippy::unwrap_used)]

mod common;

use common::Net;
use rdv_agent_core::state::Binding;
use rdv_agent_core::{Command, RequestTo};
use serde_json::Value;

const ALICE: usize = 0;
const BOB: usize = 1;
const DAVE: usize = 2;

/// Bob holds Alice as a contact found by a topic probe (binding claimed).
fn contacts() -> Net {
    let mut net = Net::new(3);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    net.init(DAVE, &["dave@example.com"]);
    net.befriend(BOB, ALICE, "alice@example.com");
    net
}

fn keep(net: &mut Net, at: usize, card: Value, binding: Binding) -> Value {
    net.cmd(at, Command::KeepCard { card, binding }).unwrap()
}

/// Node `at` keeps node `of`'s current card with `binding`.
fn keep_of(net: &mut Net, at: usize, of: usize, binding: Binding) -> Value {
    let card = net.card(of);
    keep(net, at, card, binding)
}

fn contact_binding(net: &Net, at: usize, of: usize) -> Binding {
    net.nodes[at].agent.state.contacts[&net.nodes[of].id()].binding
}

#[test]
fn a_later_dns_find_upgrades_a_claimed_contact_and_nothing_downgrades_it() {
    let mut net = contacts();
    let alice = net.nodes[ALICE].id();
    assert_eq!(contact_binding(&net, BOB, ALICE), Binding::Claimed);
    let card = net.card(ALICE);
    let held_card = net.nodes[BOB].agent.state.contacts[&alice].card.clone();

    let r = keep(&mut net, BOB, card.clone(), Binding::Dns);
    assert_eq!(contact_binding(&net, BOB, ALICE), Binding::Dns);
    assert_eq!(r["upgraded"][0]["contact"], alice.as_str());
    assert_eq!(r["upgraded"][0]["from"], "claimed");
    assert_eq!(r["upgraded"][0]["to"], "dns");

    // Weaker or equal finds leave it as it is.
    for b in [
        Binding::Claimed,
        Binding::Card,
        Binding::Directory,
        Binding::Mailbox,
    ] {
        let r = keep(&mut net, BOB, card.clone(), b);
        assert_eq!(contact_binding(&net, BOB, ALICE), Binding::Dns, "{b:?}");
        assert!(r["upgraded"].as_array().unwrap().is_empty(), "{b:?}: {r}");
    }
    // The owner's in-person exchange is the strongest.
    keep(&mut net, BOB, card.clone(), Binding::InPerson);
    assert_eq!(contact_binding(&net, BOB, ALICE), Binding::InPerson);
    keep(&mut net, BOB, card, Binding::Dns);
    assert_eq!(contact_binding(&net, BOB, ALICE), Binding::InPerson);

    // Only the binding: the contact's card, tier and grants are as they were.
    let c = &net.nodes[BOB].agent.state.contacts[&alice];
    assert_eq!(c.card, held_card);
    assert_eq!(c.id, alice);
}

#[test]
fn a_directory_find_upgrades_claimed_and_another_keys_find_changes_nothing() {
    let mut net = contacts();
    let bob = net.nodes[BOB].id();
    // Alice granted Bob's probe: her contact is claimed too.
    assert_eq!(contact_binding(&net, ALICE, BOB), Binding::Claimed);
    let before = net.nodes[ALICE].agent.state.contacts[&bob].clone();

    // Dave's card found by DNS: Dave's kept card, never Bob's contact.
    let r = keep_of(&mut net, ALICE, DAVE, Binding::Dns);
    assert!(r["upgraded"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!(net.nodes[ALICE].agent.state.contacts[&bob], before);
    assert_eq!(
        net.nodes[ALICE].agent.state.known_cards[&net.nodes[DAVE].id()].binding,
        Binding::Dns
    );

    keep_of(&mut net, ALICE, BOB, Binding::Directory);
    assert_eq!(contact_binding(&net, ALICE, BOB), Binding::Directory);
    let mut expected = before;
    expected.binding = Binding::Directory;
    assert_eq!(net.nodes[ALICE].agent.state.contacts[&bob], expected);
}

#[test]
fn a_kept_cards_binding_is_upgraded_and_carried_into_the_request() {
    let mut net = contacts();
    let dave = net.nodes[DAVE].id();
    let card = net.card(DAVE);
    // First found as a public pointer, then the domain's record names it.
    keep(&mut net, BOB, card.clone(), Binding::Claimed);
    let r = keep(&mut net, BOB, card.clone(), Binding::Dns);
    assert_eq!(r["kept"], false, "the same card is not kept twice: {r}");
    assert_eq!(
        net.nodes[BOB].agent.state.known_cards[&dave].binding,
        Binding::Dns
    );
    // A newer card of the key, found on a topic, keeps what the key has.
    net.advance(5);
    net.cmd(
        DAVE,
        Command::AddRelay {
            url: "wss://relay2.test".into(),
        },
    )
    .unwrap();
    let r = keep_of(&mut net, BOB, DAVE, Binding::Claimed);
    assert_eq!(r["kept"], true, "{r}");
    assert_eq!(r["binding"], "dns");
    assert_eq!(
        net.nodes[BOB].agent.state.known_cards[&dave].card,
        net.card(DAVE)
    );
    assert_eq!(
        net.nodes[BOB].agent.state.known_cards[&dave].binding,
        Binding::Dns
    );

    // The request goes with the binding the key has; so does the contact.
    let r = net
        .cmd(
            BOB,
            Command::Request {
                to: RequestTo::Card(net.card(DAVE)),
                greeting: String::new(),
                label: Some("Dave".into()),
            },
        )
        .unwrap();
    let rid = r["request_id"].as_str().unwrap();
    assert_eq!(
        net.nodes[BOB].agent.state.outgoing[rid].binding,
        Binding::Dns
    );
}

#[test]
fn a_pending_requests_binding_is_upgraded_before_the_owner_decides() {
    let mut net = contacts();
    net.probe(DAVE, "alice@example.com", None);
    let req = net.pending_id(ALICE);
    assert_eq!(
        net.nodes[ALICE].agent.state.pending[&req].binding,
        Binding::Claimed
    );
    let r = keep_of(&mut net, ALICE, DAVE, Binding::Dns);
    assert_eq!(r["upgraded"][0]["pending"], req.as_str());
    assert_eq!(
        net.nodes[ALICE].agent.state.pending[&req].binding,
        Binding::Dns
    );
    // Granted, the contact keeps it.
    net.cmd(
        ALICE,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: common::grant_scope(),
            label: None,
        },
    )
    .unwrap();
    assert_eq!(contact_binding(&net, ALICE, DAVE), Binding::Dns);
    let told = net.nodes[ALICE].events_of("contact");
    assert_eq!(told.last().unwrap()["binding"], "dns");
}

#[test]
fn our_own_card_is_refused_and_upgrades_nothing() {
    let mut net = contacts();
    let before = net.nodes[BOB].snapshot();
    let r = net.cmd(
        BOB,
        Command::KeepCard {
            card: net.card(BOB),
            binding: Binding::InPerson,
        },
    );
    assert!(r.is_err());
    assert_eq!(net.nodes[BOB].snapshot(), before);
}
