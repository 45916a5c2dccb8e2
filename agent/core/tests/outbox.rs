//! The outbox as it is stored (§7): one record per sent envelope beside a
//! small channel head, the last 64 kept, committed with the send, replayed
//! by `rdv/resend` after a restart, and an old home whose `channel_out`
//! record holds the whole outbox read and converted.
#![allow(clippy::unwrap_used)]

mod common;

use common::Net;
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::record::{Record, Table, Write};
use rdv_agent_core::state::outbox_key;
use rdv_agent_core::{Command, Effect, Input, RequestTo};
use rdv_proto::consts::CHANNEL_OUTBOX;
use serde_json::{Value, json};

const ALICE: usize = 0;
const BOB: usize = 1;

/// Alice and Bob, contacts through a topic probe Alice granted (room for
/// a few hundred messages a day) and Bob confirmed.
fn contacts() -> Net {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    let probe = net
        .cmd(
            BOB,
            Command::Request {
                to: RequestTo::Address("alice@example.com".into()),
                greeting: "Hi, Bob's agent".into(),
                label: Some("Alice".into()),
            },
        )
        .unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let req = net.nodes[ALICE]
        .agent
        .state
        .pending
        .keys()
        .next()
        .unwrap()
        .clone();
    net.cmd(
        ALICE,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope: default_scope(false, &[], "500/day"),
            label: Some("Bob".into()),
        },
    )
    .unwrap();
    net.cmd(
        BOB,
        Command::Confirm {
            request_id: probe,
            grantor: None,
            label: None,
        },
    )
    .unwrap();
    net
}

/// One message from Bob to Alice, carried; its seq, the writes it
/// committed, and the envelope as it left.
fn send(net: &mut Net, text: &str) -> (u64, Vec<Write>, Value) {
    let now = net.now;
    let to = net.nodes[ALICE].id();
    let out = net.nodes[BOB]
        .handle(
            Input::Command(Command::Send {
                to,
                payload: json!({"type": "note/text", "text": text}),
            }),
            now,
        )
        .unwrap();
    let seq = out.reply.as_ref().unwrap()["seq"].as_u64().unwrap();
    let env = envelopes(&out.effects).pop().unwrap();
    let writes = out.writes.clone();
    net.carry(BOB, out.effects);
    (seq, writes, env)
}

/// The envelopes a node's effects publish, in order.
fn envelopes(effects: &[Effect]) -> Vec<Value> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishNostr { event, .. } => serde_json::from_str(&event.content).ok(),
            _ => None,
        })
        .collect()
}

fn outbox_seqs(net: &Net, i: usize) -> Vec<u64> {
    net.nodes[i]
        .records
        .iter()
        .filter(|((t, _), _)| *t == Table::Outbox)
        .map(|(_, v)| v["seq"].as_u64().unwrap())
        .collect()
}

/// Alice asks Bob for `from..=to` on her real chain; what Bob publishes.
fn ask_resend(net: &mut Net, from: u64, to: u64) -> Vec<Value> {
    let ev = net.forge(ALICE, BOB, &rdv_proto::channel::resend_payload(from, to));
    envelopes(&net.inject(BOB, &ev).effects)
}

#[test]
fn a_send_commits_its_outbox_entry_and_the_head_not_the_whole_outbox() {
    let mut net = contacts();
    let alice = net.nodes[ALICE].id();
    let n = CHANNEL_OUTBOX as u64 + 6;
    for i in 1..=n {
        let (seq, writes, env) = send(&mut net, &format!("m{i}"));
        assert_eq!(seq, i);
        let outbox: Vec<&Write> = writes.iter().filter(|w| w.table == Table::Outbox).collect();
        let put: Vec<&str> = outbox
            .iter()
            .filter(|w| w.value.is_some())
            .map(|w| w.key.as_str())
            .collect();
        assert_eq!(put, [outbox_key(&alice, seq)], "the new entry, alone");
        let entry = outbox.iter().find(|w| w.value.is_some()).unwrap();
        assert_eq!(entry.value.as_ref().unwrap()["envelope"], env, "what left");
        let gone: Vec<&str> = outbox
            .iter()
            .filter(|w| w.value.is_none())
            .map(|w| w.key.as_str())
            .collect();
        if seq > CHANNEL_OUTBOX as u64 {
            let pruned = outbox_key(&alice, seq - CHANNEL_OUTBOX as u64);
            assert_eq!(gone, [pruned.as_str()], "§7: 64 kept");
        } else {
            assert!(gone.is_empty());
        }
        let head: Vec<&Value> = writes
            .iter()
            .filter(|w| w.table == Table::ChannelOut)
            .map(|w| w.value.as_ref().unwrap())
            .collect();
        assert_eq!(head.len(), 1);
        assert!(head[0].get("outbox").is_none(), "{}", head[0]);
        assert_eq!(head[0]["next_seq"], seq + 1);
        let bytes: usize = writes
            .iter()
            .filter_map(|w| w.value.as_ref())
            .map(|v| v.to_string().len())
            .sum();
        // One envelope in the outbox entry and once more in the delivery.
        assert!(bytes < 4 * 1024, "a send wrote {bytes} bytes");
    }
    let kept: Vec<u64> = (n - CHANNEL_OUTBOX as u64 + 1..=n).collect();
    assert_eq!(outbox_seqs(&net, BOB), kept);
    assert_eq!(net.nodes[ALICE].events_of("message").len(), n as usize);
}

#[test]
fn resend_replays_the_stored_outbox_after_a_restart() {
    let mut net = contacts();
    let n = CHANNEL_OUTBOX as u64 + 6;
    let mut sent = Vec::new();
    for i in 1..=n {
        sent.push(send(&mut net, &format!("m{i}")).2);
    }
    // Every input already ran on an agent rebuilt from its records alone;
    // once more, to be plain about it.
    net.nodes[BOB].reload();
    let first = n - CHANNEL_OUTBOX as u64 + 1;
    let resent = ask_resend(&mut net, first, n);
    assert_eq!(
        resent,
        sent[first as usize - 1..],
        "byte for byte, in order"
    );
    // Pruned ones are gone: nothing to resend below the 64 kept.
    assert!(ask_resend(&mut net, 1, first - 1).is_empty());
    // Nothing was reused and nothing forked on Alice's side.
    assert_eq!(send(&mut net, "after").0, n + 1);
    assert!(net.nodes[ALICE].events_of("forked").is_empty());
    assert_eq!(net.nodes[ALICE].events_of("message").len(), n as usize + 1);
}

/// A home written before the outbox had its own records: `channel_out`
/// held the whole outbound state (`Outbound`'s serde form).
fn as_old_home(records: &[Record]) -> Vec<Record> {
    let state = rdv_agent_core::state::State::load(records).unwrap();
    let mut old: Vec<Record> = records
        .iter()
        .filter(|r| r.table != Table::Outbox && r.table != Table::ChannelOut)
        .cloned()
        .collect();
    for (id, out) in &state.channels_out {
        old.push(Record {
            table: Table::ChannelOut,
            key: id.to_string(),
            value: serde_json::to_value(out).unwrap(),
        });
    }
    old
}

#[test]
fn an_old_home_with_the_outbox_in_channel_out_keeps_working() {
    let mut net = contacts();
    let n = CHANNEL_OUTBOX as u64 + 2;
    let mut sent = Vec::new();
    for i in 1..=n {
        sent.push(send(&mut net, &format!("m{i}")).2);
    }
    let live = format!("{:?}", net.nodes[BOB].agent.state.channels_out);
    let old = as_old_home(&net.nodes[BOB].record_list());
    assert!(old.iter().all(|r| r.table != Table::Outbox));
    let whole = old.iter().find(|r| r.table == Table::ChannelOut).unwrap();
    assert_eq!(
        whole.value["outbox"].as_array().unwrap().len(),
        CHANNEL_OUTBOX
    );
    let inbox = std::mem::take(&mut net.nodes[BOB].inbox);
    net.nodes[BOB] = common::Node::from_records([BOB as u8 + 1; 32], &old);
    net.nodes[BOB].inbox = inbox;
    assert_eq!(
        format!("{:?}", net.nodes[BOB].agent.state.channels_out),
        live,
        "read exactly as it was"
    );

    // It answers a resend from the old record.
    let first = n - CHANNEL_OUTBOX as u64 + 1;
    assert_eq!(ask_resend(&mut net, first, n), sent[first as usize - 1..]);

    // The next send converts it: the head alone, and every entry its own.
    let (seq, writes, _) = send(&mut net, "converted");
    assert_eq!(seq, n + 1, "§7: no seq reused");
    let puts = writes
        .iter()
        .filter(|w| w.table == Table::Outbox && w.value.is_some())
        .count();
    assert_eq!(puts, CHANNEL_OUTBOX);
    let head = &net.nodes[BOB].records[&(Table::ChannelOut, net.nodes[ALICE].id().to_string())];
    assert!(head.get("outbox").is_none(), "{head}");
    let kept: Vec<u64> = (seq - CHANNEL_OUTBOX as u64 + 1..=seq).collect();
    assert_eq!(outbox_seqs(&net, BOB), kept);
    // And it still answers from the converted records.
    let resent = ask_resend(&mut net, seq - 1, seq - 1);
    assert_eq!(resent, [sent[seq as usize - 2].clone()]);
    assert!(net.nodes[ALICE].events_of("forked").is_empty());
    assert_eq!(net.nodes[ALICE].events_of("message").len(), n as usize + 1);
}
