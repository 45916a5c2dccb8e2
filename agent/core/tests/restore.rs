//! Restoring from a backup (SPEC §6.4.1), on the in-memory network: the
//! restored side's notices, the peer's re-base, ack and resend, and every
//! refusal. A restore is a fresh node with the same key whose records are
//! the backup's; each test fails when its rule is broken.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Net, Node, grant_scope};
use rdv_agent_core::record::{Record, Table};
use rdv_agent_core::restore::{backup_state, restored_records};
use rdv_agent_core::{Command, RequestTo};
use rdv_proto::AgentId;
use rdv_proto::channel::NO_ENVELOPE;
use rdv_proto::doc::restored::RestoredAck;
use rdv_proto::time::Instant;
use serde_json::{Value, json};

const ALICE: usize = 0;
const BOB: usize = 1;
const CAROL: usize = 2;

/// Alice and Bob, contacts: Bob probed alice@example.com, Alice granted
/// (her grant is her seq 1 to Bob), Bob confirmed (he has sent nothing).
fn contacts() -> Net {
    let mut net = Net::new(3);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    net.init(CAROL, &[]);
    net.befriend(BOB, ALICE, "alice@example.com");
    net
}

/// The texts of the messages node `i` was told of.
fn texts(net: &Net, i: usize) -> Vec<String> {
    net.nodes[i]
        .events_of("message")
        .iter()
        .map(|m| {
            let p: Value =
                serde_json::from_str(m["payload"]["untrusted_peer_text"].as_str().unwrap())
                    .unwrap();
            p["text"].as_str().unwrap().to_string()
        })
        .collect()
}

/// What a backup made now holds (the bundle's `state`), and when.
fn backup(net: &Net, i: usize) -> (Value, Instant) {
    (backup_state(&net.nodes[i].record_list()).unwrap(), net.now)
}

/// Node `i` is lost and restored from `state`: a fresh node with the same
/// key and the backup's records, which runs the `Restored` command; the
/// relays carry its notices a second later.
fn restore(net: &mut Net, i: usize, state: &Value, created: Instant) -> Value {
    let id = net.nodes[i].id();
    let records = restored_records(state, &id).unwrap();
    net.nodes[i] = Node::from_records(net.nodes[i].key, &records);
    net.cmd_then(
        i,
        Command::Restored {
            backup_created: Some(created),
        },
        1,
    )
    .unwrap()
}

fn head(net: &Net, at: usize, from: usize) -> Option<(u64, String)> {
    net.nodes[at]
        .agent
        .state
        .channels_in
        .get(&net.nodes[from].id())
        .and_then(|c| c.head())
        .map(|(s, h)| (s, h.to_string()))
}

fn pending_notice(net: &Net, at: usize, to: usize) -> Option<String> {
    net.nodes[at].agent.state.channels_out[&net.nodes[to].id()]
        .pending_notice()
        .map(str::to_string)
}

fn ms(t: Instant) -> u64 {
    (t.unix_timestamp_nanos() / 1_000_000) as u64
}

#[test]
fn a_restored_agent_is_rebased_acked_and_resent_and_both_chains_go_on() {
    let mut net = contacts();
    net.send_text(ALICE, BOB, "one");
    net.send_text(BOB, ALICE, "b-one");
    let (state, created) = backup(&net, ALICE);
    let old_prev = net.nodes[ALICE].agent.state.channels_out[&net.nodes[BOB].id()]
        .next()
        .1
        .unwrap()
        .to_string();
    // What the copy that is about to be lost did after its backup.
    net.advance(60);
    net.send_text(ALICE, BOB, "two");
    net.send_text(ALICE, BOB, "three");
    net.send_text(BOB, ALICE, "b-two");
    net.send_text(BOB, ALICE, "b-three");

    net.advance(3600);
    let restore_time = net.now;
    let r = restore(&mut net, ALICE, &state, created);
    assert_eq!(r["contacts"], 1);
    let notice = &r["notices"][0];
    assert_eq!(notice["to"], net.nodes[BOB].id().as_str());
    assert_eq!(notice["in_seq"], 1, "the last seq held from Bob: b-one");
    let seq = notice["seq"].as_u64().unwrap();
    assert!(seq >= ms(restore_time), "§6.4.1: the epoch jumps to ms");
    // The notice is the first envelope of the epoch, straight after the
    // last one the backup holds.
    let out = &net.nodes[ALICE].agent.state.channels_out[&net.nodes[BOB].id()];
    let env = out.resend(seq, seq)[0].clone();
    assert_eq!(env["prev"], old_prev.as_str());
    assert_eq!(out.resend(2, seq - 1).len(), 1, "only 'one' before it");

    // Bob: re-based, told, no fork.
    let told = net.nodes[BOB].events_of("restored");
    assert_eq!(told.len(), 1, "§6.4.1: MUST tell its human");
    assert_eq!(told[0]["id"], net.nodes[ALICE].id().as_str());
    assert!(net.nodes[BOB].events_of("forked").is_empty());
    assert!(head(&net, BOB, ALICE).unwrap().0 >= seq, "re-based on it");
    // Alice: the ack taken, and what Bob sent after the backup resent.
    assert_eq!(pending_notice(&net, ALICE, BOB), None, "the ack was taken");
    assert_eq!(texts(&net, ALICE), ["b-two", "b-three"]);

    // Both chains go on.
    net.advance(5);
    net.send_text(ALICE, BOB, "four");
    net.send_text(BOB, ALICE, "b-four");
    assert_eq!(texts(&net, BOB), ["one", "two", "three", "four"]);
    assert_eq!(texts(&net, ALICE), ["b-two", "b-three", "b-four"]);
    assert!(net.nodes[BOB].events_of("forked").is_empty());
    assert!(net.nodes[ALICE].events_of("forked").is_empty());
    assert!(head(&net, BOB, ALICE).unwrap().0 > seq);
}

#[test]
fn without_the_notice_the_restored_chain_is_a_fork() {
    // The same story with the old state simply started again: what the
    // notice prevents (§6.4: a reused seq is a fork).
    let mut net = contacts();
    net.send_text(ALICE, BOB, "one");
    let (state, _) = backup(&net, ALICE);
    net.send_text(ALICE, BOB, "two");
    let records = restored_records(&state, &net.nodes[ALICE].id()).unwrap();
    net.nodes[ALICE] = Node::from_records(net.nodes[ALICE].key, &records);
    net.advance(60);
    net.send_text(ALICE, BOB, "two again");
    assert_eq!(net.nodes[BOB].events_of("forked").len(), 1);
}

#[test]
fn a_contact_without_a_chain_in_the_backup_still_gets_a_notice() {
    // Bob confirmed a probe answer: his backup holds no chain to Alice,
    // but the copy that was lost opened one after it.
    let mut net = contacts();
    assert!(
        !net.nodes[BOB]
            .agent
            .state
            .channels_out
            .contains_key(&net.nodes[ALICE].id())
    );
    let (state, created) = backup(&net, BOB);
    net.send_text(BOB, ALICE, "x1");
    net.send_text(BOB, ALICE, "x2");
    net.advance(600);
    let r = restore(&mut net, BOB, &state, created);
    let seq = r["notices"][0]["seq"].as_u64().unwrap();
    let out = &net.nodes[BOB].agent.state.channels_out[&net.nodes[ALICE].id()];
    assert_eq!(out.resend(seq, seq)[0]["prev"], NO_ENVELOPE);
    assert_eq!(net.nodes[ALICE].events_of("restored").len(), 1);
    net.advance(5);
    net.send_text(BOB, ALICE, "y");
    assert_eq!(texts(&net, ALICE), ["x1", "x2", "y"]);
    assert!(net.nodes[ALICE].events_of("forked").is_empty());
}

#[test]
fn a_replayed_notice_is_ignored() {
    let mut net = contacts();
    net.send_text(ALICE, BOB, "one");
    let (state, created) = backup(&net, ALICE);
    net.advance(60);
    let r = restore(&mut net, ALICE, &state, created);
    let seq = r["notices"][0]["seq"].as_u64().unwrap();
    let env =
        net.nodes[ALICE].agent.state.channels_out[&net.nodes[BOB].id()].resend(seq, seq)[0].clone();
    net.advance(5);
    net.send_text(ALICE, BOB, "after");
    let bob_out = net.nodes[BOB].agent.state.channels_out[&net.nodes[ALICE].id()].next();
    let bob_out = (bob_out.0, bob_out.1.map(str::to_string));
    let before = head(&net, BOB, ALICE);

    // A relay replays the notice (a new Nostr event around it, too).
    net.advance(60);
    let ev = net.wrap(ALICE, &env);
    net.inject(BOB, &ev);
    assert_eq!(net.nodes[BOB].events_of("restored").len(), 1, "not again");
    assert!(net.nodes[BOB].events_of("restore_refused").is_empty());
    assert_eq!(head(&net, BOB, ALICE), before, "the chain is not re-based");
    let now_out = net.nodes[BOB].agent.state.channels_out[&net.nodes[ALICE].id()].next();
    assert_eq!(
        (now_out.0, now_out.1.map(str::to_string)),
        bob_out,
        "no second ack"
    );
    net.send_text(ALICE, BOB, "still on");
    assert_eq!(texts(&net, BOB), ["one", "after", "still on"]);
}

#[test]
fn more_than_three_restores_a_day_are_refused_and_shown() {
    let mut net = contacts();
    net.send_text(ALICE, BOB, "one");
    let (state, created) = backup(&net, ALICE);
    for _ in 0..3 {
        net.advance(600);
        restore(&mut net, ALICE, &state, created);
    }
    assert_eq!(net.nodes[BOB].events_of("restored").len(), 3);
    let head3 = head(&net, BOB, ALICE);
    net.advance(600);
    restore(&mut net, ALICE, &state, created);
    assert_eq!(net.nodes[BOB].events_of("restored").len(), 3);
    let refused = net.nodes[BOB].events_of("restore_refused");
    assert_eq!(refused.len(), 1, "shown to the human");
    assert_eq!(refused[0]["id"], net.nodes[ALICE].id().as_str());
    assert_eq!(refused[0]["refusal"], "rate-limited");
    assert_eq!(head(&net, BOB, ALICE), head3, "not re-based");
    assert!(
        pending_notice(&net, ALICE, BOB).is_some(),
        "no ack for a refused notice"
    );
    // A day later a restore is taken again.
    net.advance(86_400);
    restore(&mut net, ALICE, &state, created);
    assert_eq!(net.nodes[BOB].events_of("restored").len(), 4);
}

#[test]
fn a_forked_chain_is_not_rebased_by_a_notice() {
    let mut net = contacts();
    net.send_text(ALICE, BOB, "one");
    let (state, created) = backup(&net, ALICE);
    net.send_text(ALICE, BOB, "two");
    // The old state started without a restore: Bob sees a fork.
    let records = restored_records(&state, &net.nodes[ALICE].id()).unwrap();
    net.nodes[ALICE] = Node::from_records(net.nodes[ALICE].key, &records);
    net.advance(60);
    net.send_text(ALICE, BOB, "two from the copy");
    assert_eq!(net.nodes[BOB].events_of("forked").len(), 1);

    // Then the copy sends a notice: it never lifts the refusal.
    net.advance(60);
    restore(&mut net, ALICE, &state, created);
    assert!(net.nodes[BOB].events_of("restored").is_empty());
    let refused = net.nodes[BOB].events_of("restore_refused");
    assert_eq!(refused.len(), 1, "the human is told");
    assert_eq!(refused[0]["refusal"], "forked");
    let ch = net.nodes[BOB]
        .agent
        .state
        .channels_in
        .get(&net.nodes[ALICE].id())
        .unwrap();
    assert!(ch.is_refused(), "still refused");
    net.advance(5);
    net.send_text(ALICE, BOB, "after the notice");
    assert_eq!(texts(&net, BOB), ["one", "two"], "refused until resync");

    // Only the human's re-sync does.
    net.cmd(
        BOB,
        Command::Resync {
            id: net.nodes[ALICE].id(),
        },
    )
    .unwrap();
    net.advance(5);
    net.send_text(ALICE, BOB, "after the resync");
    assert_eq!(texts(&net, BOB), ["one", "two", "after the resync"]);
}

#[test]
fn a_notice_from_anyone_but_a_contact_is_ignored() {
    let mut net = contacts();
    let notice = json!({"type": "rdv/restored", "v": 1, "in_seq": 0, "backup_created": null});
    let ev = net.forge(CAROL, BOB, &notice);
    let told = net.nodes[BOB].inbox.len();
    let out = net.inject(BOB, &ev);
    assert!(out.effects.is_empty(), "no ack");
    assert_eq!(net.nodes[BOB].inbox.len(), told, "no event");
    let carol = net.nodes[CAROL].id();
    assert!(net.nodes[BOB].agent.state.channels_in.get(&carol).is_none());
    assert!(!net.nodes[BOB].agent.state.channels_out.contains_key(&carol));
}

/// Bob's ack to Alice's pending notice, forged on Bob's real chain.
fn ack(net: &mut Net, notice: &str, from_seq: u64, prev: Option<String>, floor: Instant) -> Value {
    let a = RestoredAck {
        notice: notice.to_string(),
        from_seq,
        prev,
        floor,
    }
    .to_value();
    net.forge(BOB, ALICE, &a)
}

fn bob_next(net: &Net) -> (u64, Option<String>) {
    let (s, p) = net.nodes[BOB].agent.state.channels_out[&net.nodes[ALICE].id()].next();
    (s, p.map(str::to_string))
}

#[test]
fn the_restored_side_takes_only_a_sound_ack_of_its_last_notice_once() {
    let mut net = contacts();
    net.send_text(ALICE, BOB, "one");
    net.send_text(BOB, ALICE, "b-one");
    let (state, created) = backup(&net, ALICE);
    net.send_text(BOB, ALICE, "b-two");
    net.send_text(BOB, ALICE, "b-three");
    net.advance(600);
    // The notice does not reach Bob: the acks below are forged by hand.
    net.down = true;
    restore(&mut net, ALICE, &state, created);
    let notice = pending_notice(&net, ALICE, BOB).unwrap();
    let start = head(&net, ALICE, BOB);
    assert_eq!(start.as_ref().unwrap().0, 1);
    let floor = net.now - time::Duration::seconds(1);
    let unchanged = |net: &Net, why: &str| {
        assert_eq!(head(net, ALICE, BOB), start, "{why}: head moved");
        assert_eq!(
            pending_notice(net, ALICE, BOB).as_deref(),
            Some(notice.as_str()),
            "{why}: taken"
        );
    };

    // For another notice: ignored.
    let (s, p) = bob_next(&net);
    let ev = ack(&mut net, &"e".repeat(64), s, p, floor);
    net.inject(ALICE, &ev);
    unchanged(&net, "another notice");

    // prev null past seq 1 names no head: refused, not a head of none.
    let (s, _) = bob_next(&net);
    let ev = ack(&mut net, &notice, s, None, floor);
    net.inject(ALICE, &ev);
    unchanged(&net, "null prev");
    let dropped = net.nodes[ALICE].events_of("dropped");
    assert!(
        dropped
            .iter()
            .any(|d| d["reason"] == "a restore ack that does not parse"),
        "{dropped:?}"
    );

    // An ack whose chain goes on past its own envelope, or whose floor is
    // not before it, contradicts itself.
    let (s, p) = bob_next(&net);
    let ev = ack(&mut net, &notice, s + 1, p, floor);
    net.inject(ALICE, &ev);
    unchanged(&net, "from_seq past its envelope");
    let (s, p) = bob_next(&net);
    let later = net.now + time::Duration::hours(1);
    let ev = ack(&mut net, &notice, s, p, later);
    net.inject(ALICE, &ev);
    unchanged(&net, "floor after its envelope");

    // The sound one is taken: the head jumps to just before it.
    let (s, p) = bob_next(&net);
    let ev = ack(&mut net, &notice, s, p, floor);
    net.inject(ALICE, &ev);
    assert_eq!(pending_notice(&net, ALICE, BOB), None);
    assert_eq!(head(&net, ALICE, BOB).unwrap().0, s, "moved to it and past");

    // Once: a second ack that would jump a gap is not taken.
    let (gap, _) = bob_next(&net);
    let _withheld = net.forge(BOB, ALICE, &json!({"type": "note/text", "text": "lost"}));
    let (s, p) = bob_next(&net);
    let ev = ack(&mut net, &notice, s, p, floor);
    net.inject(ALICE, &ev);
    assert_eq!(
        head(&net, ALICE, BOB).unwrap().0,
        gap - 1,
        "not taken twice: the gap stays"
    );
}

#[test]
fn a_backup_holds_every_record_but_confirm_phrases() {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.cmd(
        BOB,
        Command::Request {
            to: RequestTo::Address("alice@example.com".into()),
            greeting: "hi".into(),
            label: None,
        },
    )
    .unwrap();
    let req = net.pending_id(ALICE);
    let mut rng = rand_core::OsRng;
    let now = net.now;
    let mut ctx = rdv_agent_core::Ctx { now, rng: &mut rng };
    let scope = grant_scope();
    net.nodes[ALICE]
        .agent
        .issue_grant_phrase(&req, "friend", &scope, None, &mut ctx)
        .unwrap();
    let out = net.nodes[ALICE].agent.take_output().unwrap();
    net.nodes[ALICE].keep(&out);
    let records = net.nodes[ALICE].record_list();
    let held = |t: Table| records.iter().filter(|r| r.table == t).count();
    assert!(!net.nodes[ALICE].records[&(Table::Pending, req.clone())]["phrase"].is_null());
    assert!(held(Table::Profile) == 1 && held(Table::Seen) > 0);

    let state = backup_state(&records).unwrap();
    let id = net.nodes[ALICE].id();
    let back = restored_records(&state, &id).unwrap();
    assert_eq!(back.len(), records.len(), "every record");
    for (a, b) in records.iter().zip(&back) {
        assert_eq!((a.table, &a.key), (b.table, &b.key));
        if a.table == Table::Pending {
            assert!(b.value["phrase"].is_null(), "§6.4.1: no confirm phrase");
            let mut a = a.value.clone();
            a["phrase"] = Value::Null;
            assert_eq!(a, b.value, "the request itself is kept");
        } else {
            assert_eq!(a.value, b.value);
        }
    }
    let text = serde_json::to_string(&state).unwrap();
    assert!(
        !text.contains(&hex::encode(net.nodes[ALICE].key)),
        "no seed"
    );

    // Restore refuses a state that is not sound.
    let refuse = |s: &Value, who: &AgentId| restored_records(s, who).unwrap_err().to_string();
    let mut with_phrase = state.clone();
    for r in with_phrase["records"].as_array_mut().unwrap() {
        if r["table"] == "pending" {
            r["value"]["phrase"] =
                net.nodes[ALICE].records[&(Table::Pending, req.clone())]["phrase"].clone();
        }
    }
    assert!(refuse(&with_phrase, &id).contains("confirm phrase"));
    assert!(refuse(&state, &net.nodes[BOB].id()).contains("another agent"));
    let mut twice = state.clone();
    let first = twice["records"][0].clone();
    twice["records"].as_array_mut().unwrap().push(first);
    assert!(refuse(&twice, &id).contains("twice"));
    let mut unknown = state.clone();
    unknown["records"][0]["table"] = json!("approvals");
    assert!(refuse(&unknown, &id).contains("unknown table"));
    let no_profile: Vec<Record> = records
        .iter()
        .filter(|r| r.table != Table::Profile)
        .cloned()
        .collect();
    assert!(refuse(&backup_state(&no_profile).unwrap(), &id).contains("no profile"));
}

#[test]
fn old_chain_envelopes_still_queued_are_dropped_at_restore() {
    let mut net = contacts();
    net.down = true;
    net.send_text(ALICE, BOB, "queued when the backup was made");
    let (state, created) = backup(&net, ALICE);
    net.down = false;
    net.advance(600);
    let r = restore(&mut net, ALICE, &state, created);
    assert_eq!(r["dropped_deliveries"], 1);
    // The command ran a second before now: nothing goes out in its second.
    assert_eq!(r["send_after"], rdv_proto::time::format_time(net.now));
    // Only the notice was carried, and Bob took it.
    assert!(net.nodes[ALICE].agent.state.deliveries.is_empty());
    assert_eq!(net.nodes[BOB].events_of("restored").len(), 1);
}

#[test]
fn a_mailbox_probe_in_a_backup_keeps_no_confirm_phrase() {
    // §6.4.1: the request a mailbox probe holds is a pending request too.
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &[]);
    net.cmd(
        BOB,
        Command::Request {
            to: RequestTo::Address("alice@example.com".into()),
            greeting: "hi".into(),
            label: None,
        },
    )
    .unwrap();
    let req = net.pending_id(ALICE);
    let mut rng = rand_core::OsRng;
    let now = net.now;
    let mut ctx = rdv_agent_core::Ctx { now, rng: &mut rng };
    let scope = grant_scope();
    net.nodes[ALICE]
        .agent
        .issue_grant_phrase(&req, "friend", &scope, None, &mut ctx)
        .unwrap();
    let pending = net.nodes[ALICE].agent.state.pending[&req].clone();
    assert!(pending.phrase.is_some());
    let probe = rdv_agent_core::state::MailProbeIn {
        request_id: req.clone(),
        requester: net.nodes[BOB].id(),
        gateway: "https://gateway.example".into(),
        mailbox: "alice@example.com".into(),
        seq: 1,
        cookie: "c".repeat(32),
        sender: None,
        weak_proof: true,
        pending,
        granted: None,
        acked: false,
    };
    let mut records = net.nodes[ALICE].record_list();
    records.push(Record {
        table: Table::MailProbeIn,
        key: req.clone(),
        value: serde_json::to_value(&probe).unwrap(),
    });
    let state = backup_state(&records).unwrap();
    let id = net.nodes[ALICE].id();
    let back = restored_records(&state, &id).unwrap();
    let kept = back.iter().find(|r| r.table == Table::MailProbeIn).unwrap();
    assert!(
        kept.value["pending"]["phrase"].is_null(),
        "no confirm phrase"
    );
    assert_eq!(kept.value["cookie"], probe.cookie.as_str(), "the rest kept");
    let mut with_phrase = state.clone();
    for r in with_phrase["records"].as_array_mut().unwrap() {
        if r["table"] == "mail_probe_in" {
            r["value"] = serde_json::to_value(&probe).unwrap();
        }
    }
    let e = restored_records(&with_phrase, &id).unwrap_err().to_string();
    assert!(e.contains("confirm phrase"), "{e}");
}
