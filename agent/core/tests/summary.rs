//! What `rdv status` counts in the store without loading the state: the
//! fields it counts by are the ones the records hold.
#![allow(clippy::unwrap_used)]

mod common;

use common::Net;
use rdv_agent_core::record::Table;
use rdv_agent_core::state::{CONTACT_STATUS_FIELD, OUTGOING_CLOSED_FIELD};
use rdv_agent_core::{Command, RequestTo};

#[test]
fn contact_status_and_outgoing_closed_are_top_level_record_fields() {
    let mut net = Net::new(2);
    net.init(0, &["alice@example.com"]);
    net.init(1, &[]);
    net.cmd(
        1,
        Command::Request {
            to: RequestTo::Address("alice@example.com".into()),
            greeting: "Hi".into(),
            label: None,
        },
    )
    .unwrap();
    let outgoing: Vec<_> = net.nodes[1]
        .records
        .iter()
        .filter(|((t, _), _)| *t == Table::Outgoing)
        .map(|(_, v)| v.clone())
        .collect();
    assert_eq!(outgoing.len(), 1);
    assert_eq!(outgoing[0][OUTGOING_CLOSED_FIELD], false);
    let alice = net.nodes[0].id();
    let bob_card = net.card(1);
    net.cmd(
        0,
        Command::Request {
            to: RequestTo::Card(bob_card),
            greeting: "Hi Bob".into(),
            label: None,
        },
    )
    .unwrap();
    let req = net.nodes[1]
        .agent
        .state
        .pending
        .keys()
        .next()
        .unwrap()
        .clone();
    net.cmd(
        1,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: rdv_agent_core::agent::default_scope(false, &[], "100/day"),
            label: None,
        },
    )
    .unwrap();
    let c = &net.nodes[1].records[&(Table::Contact, alice.to_string())];
    assert_eq!(c[CONTACT_STATUS_FIELD], "active", "{c}");
}
