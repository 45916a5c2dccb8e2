//! The meeting rules (SPEC §7.2–§7.4, §5.3, §5.5) on a network of in-memory
//! agents, each rebuilt from its records after every input. Each test fails
//! when its rule is broken.
#![allow(clippy::unwrap_used)]

mod common;

use common::Net;
use rdv_agent_core::a2a::TaskState;
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::meeting::{self, HoldKind, MeetingTask, Proposal, Slot, Stage};
use rdv_agent_core::owner::Secret;
use rdv_agent_core::phrase::Phrase;
use rdv_agent_core::task_flow::OwnerCommand;
use rdv_agent_core::{Command, Input, RequestTo};
use rdv_proto::AgentId;
use rdv_proto::consts::{EXT_MEETING_CANCEL, EXT_MEETINGS};
use rdv_proto::time::{Instant, parse_time};
use serde_json::{Value, json};

const ALICE: usize = 0;
const BOB: usize = 1;
const CAROL: usize = 2;

fn t(s: &str) -> Instant {
    parse_time("t", s).unwrap()
}

fn slot(a: &str, b: &str) -> Slot {
    Slot::new(t(a), t(b)).unwrap()
}

/// Three evenings after t0 (2026-12-01T10:00Z).
fn evenings() -> Vec<Slot> {
    vec![
        slot("2026-12-03T19:00:00Z", "2026-12-03T21:00:00Z"),
        slot("2026-12-04T19:00:00Z", "2026-12-04T21:00:00Z"),
        slot("2026-12-05T19:00:00Z", "2026-12-05T21:00:00Z"),
    ]
}

/// Bob probes Alice; Alice's owner grants `scope`; Bob confirms. So Bob
/// may propose meetings to Alice exactly as far as `scope` says, and Alice
/// may propose nothing to Bob (no reverse grant, §7.4).
fn pair_with(n: usize, scope: Value) -> Net {
    let mut net = Net::new(n);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    let r = net
        .cmd(
            BOB,
            Command::Request {
                to: RequestTo::Address("alice@example.com".into()),
                greeting: "Hi".into(),
                label: Some("Alice".into()),
            },
        )
        .unwrap();
    let probe = r["request_id"].as_str().unwrap().to_string();
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
            scope,
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

fn pair() -> Net {
    pair_with(2, default_scope(true, &[], "100/day"))
}

fn busy(net: &mut Net, i: usize, busy: Vec<Slot>) {
    net.cmd(
        i,
        Command::SetCalendar {
            busy,
            sources: vec!["test".into()],
        },
    )
    .unwrap();
}

fn propose(
    net: &mut Net,
    from: usize,
    to: usize,
    slots: Vec<Slot>,
) -> rdv_agent_core::Result<String> {
    let to = net.nodes[to].id();
    let r = net.cmd(
        from,
        Command::ProposeMeeting(Proposal {
            to,
            slots,
            window: None,
            expires: None,
            place: Some("Chez Nous".into()),
            intent: Some("dinner".into()),
        }),
    )?;
    Ok(r["task_id"].as_str().unwrap().to_string())
}

fn task(net: &Net, i: usize, task_id: &str) -> MeetingTask {
    net.nodes[i]
        .agent
        .state
        .meetings
        .tasks
        .values()
        .find(|t| t.task_id == task_id)
        .cloned()
        .unwrap_or_else(|| panic!("node {i} has no task {task_id}"))
}

fn has_task(net: &Net, i: usize, task_id: &str) -> bool {
    net.nodes[i]
        .agent
        .state
        .meetings
        .tasks
        .values()
        .any(|t| t.task_id == task_id)
}

/// What a front-end does to show the human a step: issues a code bound
/// to the step's digest and keeps its record in the core.
fn code(net: &mut Net, i: usize, task_id: &str) -> (Stage, String) {
    let t = task(net, i, task_id);
    let (stage, _, digest) = meeting::current_step(&t).expect("a step waits");
    let (secret, record) = Phrase::generate(
        &meeting::code_terms(stage, &digest),
        net.now,
        &mut rand_core::OsRng,
    )
    .unwrap();
    let r = net
        .cmd(
            i,
            Command::SetMeetingCode {
                task_id: task_id.into(),
                peer: Some(t.peer.clone()),
                digest,
                record,
            },
        )
        .unwrap();
    assert_eq!(r["code_set"], true, "{r}");
    (stage, secret.expose().to_string())
}

fn confirm(net: &mut Net, i: usize, task_id: &str, code: &str) -> Value {
    net.cmd(
        i,
        Command::ConfirmMeeting {
            task_id: task_id.into(),
            peer: None,
            code: Secret::new(code),
        },
    )
    .unwrap()
}

/// The owner cancels `task_id` on node `i` (§7.3), with the code shown
/// and a reason, as `rdv dinner cancel` does.
fn cancel(
    net: &mut Net,
    i: usize,
    task_id: &str,
    code: Option<&str>,
    reason: Option<&str>,
) -> Value {
    net.cmd(
        i,
        Command::CancelMeeting {
            task_id: task_id.into(),
            peer: None,
            code: code.map(Secret::new),
            reason: reason.map(str::to_string),
        },
    )
    .unwrap()
}

/// Bob got a `meeting/decline` for `task_id` (sent after `log`) whose
/// reason is `rate` (§7.4).
fn assert_declined_for_rate(net: &Net, log: usize, task_id: &str) {
    let decline = received(net, BOB, log)
        .into_iter()
        .find(|p| p["message"]["taskId"] == task_id)
        .expect("a decline");
    assert_eq!(data_of(&decline)["rdv"], "meeting/decline");
    assert!(
        data_of(&decline)["reason"]
            .as_str()
            .unwrap()
            .starts_with("rate"),
        "{decline}"
    );
}

/// Every payload node `to` received, opened with its key (what went over
/// the relay since `from_log`).
fn received(net: &Net, to: usize, from_log: usize) -> Vec<Value> {
    let key = rdv_proto::AgentKey::from_seed(net.nodes[to].key);
    let mut out = Vec::new();
    for ev in &net.log[from_log..] {
        let raw = serde_json::to_vec(ev).unwrap();
        let Ok((
            _,
            rdv_proto::nostr_event::Carried::Envelope {
                recipient,
                envelope,
            },
        )) = rdv_proto::nostr_event::parse_event(&raw)
        else {
            continue;
        };
        if &recipient != key.id() {
            continue;
        }
        let raw = rdv_proto::canon::to_vec(&envelope).unwrap();
        let v = rdv_proto::envelope::verify(&raw, net.now).unwrap();
        let o = rdv_proto::envelope::open_verified(v, &key).unwrap();
        out.push(Value::Object(o.payload));
    }
    out
}

fn data_of(p: &Value) -> &Value {
    &p["message"]["parts"][0]["data"]
}

fn uuid(n: u8) -> String {
    format!("00000000-0000-4000-8000-0000000000{n:02x}")
}

/// An a2a/message from Bob to Alice, sealed on Bob's real chain, delivered.
fn bob_says(net: &mut Net, task_id: &str, context_id: &str, message_id: &str, data: Value) {
    let p = json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": message_id,
        "taskId": task_id, "contextId": context_id,
        "extensions": [EXT_MEETINGS], "parts": [{"kind": "data", "data": data}],
    }});
    let ev = net.forge(BOB, ALICE, &p);
    net.inject(ALICE, &ev);
}

fn slot_json(a: &str, b: &str) -> Value {
    json!({"start": a, "end": b})
}

#[test]
fn a_dinner_is_agreed_only_when_both_humans_confirm() {
    let mut net = pair();
    // Alice is busy on the first evening: the reference policy accepts the
    // first free slot (§7.3), the second.
    busy(&mut net, ALICE, vec![evenings()[0]]);
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let a = task(&net, ALICE, &id);
    assert_eq!(a.state, TaskState::Submitted);
    let held = a.hold.unwrap();
    assert_eq!(held.slot, evenings()[1]);
    assert_eq!(held.kind, HoldKind::Tentative);
    // Nothing is accepted until Alice's human confirms (§5.5).
    assert_eq!(a.gate.as_ref().unwrap().stage, Stage::Accept);
    assert!(task(&net, BOB, &id).gate.is_none());
    let (stage, c) = code(&mut net, ALICE, &id);
    assert_eq!(stage, Stage::Accept);
    let r = confirm(&mut net, ALICE, &id, &c);
    assert_eq!(r["confirmed"], true, "{r}");
    // Bob got the accept: holds it, waits for his human.
    let b = task(&net, BOB, &id);
    assert_eq!(b.gate.as_ref().unwrap().stage, Stage::Confirm);
    assert_eq!(b.hold.unwrap().slot, evenings()[1]);
    assert_eq!(
        task(&net, ALICE, &id).state,
        TaskState::Submitted,
        "pending"
    );
    let (stage, c) = code(&mut net, BOB, &id);
    assert_eq!(stage, Stage::Confirm);
    let r = confirm(&mut net, BOB, &id, &c);
    assert_eq!(r["confirmed"], true, "{r}");
    for i in [ALICE, BOB] {
        let x = task(&net, i, &id);
        assert_eq!(x.state, TaskState::Completed, "node {i}");
        assert_eq!(x.agreed, Some(evenings()[1]));
        assert_eq!(x.hold.unwrap().kind, HoldKind::Agreed);
    }
    assert!(!net.nodes[ALICE].events_of("meeting").is_empty());
    // §7.4: slots only, never a title: the proposal's data holds exactly
    // the verb, slots, expires, place and intent.
    let p = received(&net, ALICE, 0)
        .into_iter()
        .find(|p| data_of(p)["rdv"] == "meeting/propose")
        .unwrap();
    let mut keys: Vec<&str> = data_of(&p)
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(keys, ["expires", "intent", "place", "rdv", "slots"]);
    assert_eq!(p["message"]["role"], "agent");
    assert_eq!(p["message"]["extensions"], json!([EXT_MEETINGS]));
}

#[test]
fn slots_are_instants_with_explicit_offsets_of_at_most_12_hours() {
    let mut net = pair();
    let ctx = uuid(1);
    // No offset: dropped, no task.
    bob_says(
        &mut net,
        &uuid(2),
        &ctx,
        &uuid(3),
        json!({"rdv": "meeting/propose",
        "slots": [slot_json("2026-12-03T19:00:00", "2026-12-03T21:00:00")]}),
    );
    assert!(!has_task(&net, ALICE, &uuid(2)));
    // 12 hours and a second: dropped.
    bob_says(
        &mut net,
        &uuid(4),
        &ctx,
        &uuid(5),
        json!({"rdv": "meeting/propose",
        "slots": [slot_json("2026-12-03T08:00:00Z", "2026-12-03T20:00:01Z")]}),
    );
    assert!(!has_task(&net, ALICE, &uuid(4)));
    // Exactly 12 hours, written in +02:00: kept and read as the instant.
    bob_says(
        &mut net,
        &uuid(6),
        &ctx,
        &uuid(7),
        json!({"rdv": "meeting/propose",
        "slots": [slot_json("2026-12-03T10:00:00+02:00", "2026-12-03T22:00:00+02:00")]}),
    );
    let a = task(&net, ALICE, &uuid(6));
    assert_eq!(
        a.offers[0].slots[0],
        slot("2026-12-03T08:00:00Z", "2026-12-03T20:00:00Z")
    );
    // Alice holds that instant: a slot written in another offset that
    // overlaps it is busy for another task.
    assert!(
        !net.nodes[ALICE]
            .agent
            .state
            .meetings
            .is_free(&slot("2026-12-03T19:00:00Z", "2026-12-03T19:30:00Z"), None)
    );
}

#[test]
fn an_accept_may_name_the_slot_in_another_offset() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let a = task(&net, ALICE, &id);
    // Alice's agent accepts in +01:00 instead (forged on Alice's chain).
    let p = json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": uuid(9),
        "taskId": id, "contextId": a.context_id, "extensions": [EXT_MEETINGS],
        "parts": [{"kind": "data", "data": {"rdv": "meeting/accept",
            "slot": slot_json("2026-12-03T20:00:00+01:00", "2026-12-03T22:00:00+01:00")}}]}});
    let ev = net.forge(ALICE, BOB, &p);
    net.inject(BOB, &ev);
    let b = task(&net, BOB, &id);
    assert_eq!(b.gate.unwrap().slot, evenings()[0], "the same instants");
}

#[test]
fn expires_defaults_to_48_hours_and_is_clamped_to_7_days() {
    let mut net = pair();
    let now = net.now;
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(1),
        &uuid(3),
        json!({"rdv": "meeting/propose",
        "slots": [slot_json("2026-12-03T19:00:00Z", "2026-12-03T21:00:00Z")],
        "expires": "2027-01-30T00:00:00Z"}),
    );
    assert_eq!(
        task(&net, ALICE, &uuid(2)).expires,
        now + time::Duration::days(7)
    );
    bob_says(
        &mut net,
        &uuid(4),
        &uuid(5),
        &uuid(6),
        json!({"rdv": "meeting/propose",
        "slots": [slot_json("2026-12-04T19:00:00Z", "2026-12-04T21:00:00Z")]}),
    );
    assert_eq!(
        task(&net, ALICE, &uuid(4)).expires,
        now + time::Duration::hours(48)
    );
}

#[test]
fn a_held_slot_is_busy_for_every_other_task_until_released() {
    let mut net = pair_with(3, default_scope(true, &[], "100/day"));
    // Carol is Alice's contact too, allowed to propose.
    net.init(CAROL, &["carol@example.com"]);
    let r = net
        .cmd(
            CAROL,
            Command::Request {
                to: RequestTo::Address("alice@example.com".into()),
                greeting: "Hi".into(),
                label: None,
            },
        )
        .unwrap();
    let probe = r["request_id"].as_str().unwrap().to_string();
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
            scope: default_scope(true, &[], "100/day"),
            label: None,
        },
    )
    .unwrap();
    net.cmd(
        CAROL,
        Command::Confirm {
            request_id: probe,
            grantor: None,
            label: None,
        },
    )
    .unwrap();
    let one = vec![evenings()[0]];
    let b = propose(&mut net, BOB, ALICE, one.clone()).unwrap();
    assert_eq!(task(&net, ALICE, &b).hold.unwrap().slot, evenings()[0]);
    // Carol asks for the same evening: busy (held for Bob), so Alice counters
    // with other evenings instead of holding it twice.
    let c = propose(&mut net, CAROL, ALICE, one.clone()).unwrap();
    let tc = task(&net, ALICE, &c);
    assert!(tc.hold.is_none());
    assert_eq!(tc.state, TaskState::InputRequired);
    assert!(!tc.offers[1].slots.contains(&evenings()[0]));
    // Bob cancels: the hold is released, and the slot is free again.
    cancel(&mut net, BOB, &b, None, None);
    let tb = task(&net, ALICE, &b);
    assert_eq!(tb.state, TaskState::Canceled);
    assert!(tb.hold.is_none());
    assert!(
        net.nodes[ALICE]
            .agent
            .state
            .meetings
            .is_free(&evenings()[0], None)
    );
    // A decline releases too: Bob proposes again, Alice's human declines by
    // cancelling the negotiation; the hold goes.
    let b2 = propose(&mut net, BOB, ALICE, one.clone()).unwrap();
    assert!(task(&net, ALICE, &b2).hold.is_some());
    cancel(&mut net, ALICE, &b2, None, None);
    assert!(task(&net, ALICE, &b2).hold.is_none());
    // Expiry releases: a proposal held, then 48 hours pass.
    let b3 = propose(&mut net, BOB, ALICE, vec![evenings()[2]]).unwrap();
    assert!(task(&net, ALICE, &b3).hold.is_some());
    net.advance(48 * 3600);
    let now = net.now;
    net.nodes[ALICE].handle(Input::Tick, now).unwrap();
    let t3 = task(&net, ALICE, &b3);
    assert!(t3.hold.is_none());
    assert_eq!(t3.state, TaskState::Canceled);
}

#[test]
fn a_peer_reporting_canceled_releases_a_completed_meeting() {
    let mut net = pair();
    let id = agreed(&mut net);
    let a = task(&net, ALICE, &id);
    let p =
        rdv_agent_core::a2a::status_payload(&id, &a.context_id, TaskState::Canceled, net.now, None);
    let ev = net.forge(BOB, ALICE, &p);
    net.inject(ALICE, &ev);
    let a = task(&net, ALICE, &id);
    assert!(a.hold.is_none(), "released");
    assert_eq!(a.state, TaskState::Canceled);
    assert_eq!(a.agreed, Some(evenings()[0]), "kept as a record");
}

/// Bob proposes, both humans confirm: agreed on the first evening.
fn agreed(net: &mut Net) -> String {
    let id = propose(net, BOB, ALICE, evenings()).unwrap();
    let (_, c) = code(net, ALICE, &id);
    assert_eq!(confirm(net, ALICE, &id, &c)["confirmed"], true);
    let (_, c) = code(net, BOB, &id);
    assert_eq!(confirm(net, BOB, &id, &c)["confirmed"], true);
    id
}

#[test]
fn an_accepter_keeps_its_hold_for_the_grace_period_then_releases_it() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let (_, c) = code(&mut net, ALICE, &id);
    confirm(&mut net, ALICE, &id, &c);
    // Past expires (48 h): Alice sent the accept, so she keeps the hold.
    net.advance(48 * 3600 + 60);
    let now = net.now;
    net.nodes[ALICE].handle(Input::Tick, now).unwrap();
    let a = task(&net, ALICE, &id);
    assert!(a.hold.is_some(), "kept in the grace period");
    assert!(!a.state.is_terminal());
    // 24 hours later, still no confirm: released.
    net.advance(24 * 3600);
    let now = net.now;
    net.nodes[ALICE].handle(Input::Tick, now).unwrap();
    let a = task(&net, ALICE, &id);
    assert!(a.hold.is_none());
    assert_eq!(a.state, TaskState::Canceled);
}

#[test]
fn a_confirm_within_the_grace_period_completes() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let (_, c) = code(&mut net, ALICE, &id);
    confirm(&mut net, ALICE, &id, &c);
    let b = task(&net, BOB, &id);
    // Bob's confirm, written in time, reaches Alice after expires.
    let p = json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": uuid(1),
        "taskId": id, "contextId": b.context_id, "extensions": [EXT_MEETINGS],
        "parts": [{"kind": "data", "data": {"rdv": "meeting/confirm",
            "slot": evenings()[0].to_value()}}]}});
    // (Sealed when it arrives: the envelope's own ttl is not the rule here.)
    net.advance(48 * 3600 + 60);
    let ev = net.forge(BOB, ALICE, &p);
    net.inject(ALICE, &ev);
    let a = task(&net, ALICE, &id);
    assert_eq!(a.state, TaskState::Completed);
    assert_eq!(a.hold.unwrap().kind, HoldKind::Agreed);
}

#[test]
fn a_cancel_before_its_proposal_leaves_a_tombstone_that_refuses_it() {
    let mut net = pair();
    let (task_id, ctx) = (uuid(2), uuid(1));
    let log = net.log.len();
    bob_says(
        &mut net,
        &task_id,
        &ctx,
        &uuid(3),
        json!({"rdv": "rdv/cancel"}),
    );
    let t = task(&net, ALICE, &task_id);
    assert!(t.tombstone);
    bob_says(
        &mut net,
        &task_id,
        &ctx,
        &uuid(4),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    let t = task(&net, ALICE, &task_id);
    assert!(
        t.tombstone && t.hold.is_none() && t.offers.is_empty(),
        "refused"
    );
    // Answered with its real end state.
    let replies = received(&net, BOB, log);
    assert!(replies.iter().any(|p| p["type"] == "a2a/task-update"
        && p["update"]["status"]["state"] == "canceled"
        && p["update"]["taskId"] == task_id.as_str()));
}

#[test]
fn a_tombstone_needs_a_grant_that_allows_meetings() {
    let mut net = pair_with(2, default_scope(false, &[], "100/day"));
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(1),
        &uuid(3),
        json!({"rdv": "rdv/cancel"}),
    );
    assert!(!has_task(&net, ALICE, &uuid(2)));
}

#[test]
fn a_resent_message_is_dropped_by_message_id() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let ctx = task(&net, ALICE, &id).context_id;
    let log = net.log.len();
    // The same rdv/cancel twice, in two envelopes, under one messageId:
    // the first cancels and is acknowledged; the second is dropped (were
    // it read, the finished task would answer it again).
    for _ in 0..2 {
        bob_says(&mut net, &id, &ctx, &uuid(7), json!({"rdv": "rdv/cancel"}));
    }
    let updates: Vec<Value> = received(&net, BOB, log)
        .into_iter()
        .filter(|p| p["type"] == "a2a/task-update")
        .collect();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0]["update"]["status"]["state"], "canceled");
    // Another messageId is read (and answered with the real state).
    bob_says(&mut net, &id, &ctx, &uuid(8), json!({"rdv": "rdv/cancel"}));
    let n = received(&net, BOB, log)
        .iter()
        .filter(|p| p["type"] == "a2a/task-update")
        .count();
    assert_eq!(n, 2);
}

#[test]
fn the_receiver_of_the_third_offer_declines_when_nothing_fits() {
    let mut net = pair();
    // Bob offers Dec 2. Alice is busy Dec 2, 3 and from Dec 7: she counters
    // with Dec 4, 5, 6 (round 2). Bob is busy those days: he counters with
    // Dec 7, 8, 9 (round 3). Nothing of it fits Alice: she declines.
    let day = |d: i64| {
        let s = t("2026-12-01T00:00:00Z") + time::Duration::days(d);
        Slot {
            start: s,
            end: s + time::Duration::hours(24),
        }
    };
    let mut alice_busy = vec![day(1), day(2)];
    alice_busy.extend((6..20).map(day));
    busy(&mut net, ALICE, alice_busy);
    busy(&mut net, BOB, vec![day(3), day(4), day(5)]);
    let first = vec![slot("2026-12-02T19:00:00Z", "2026-12-02T21:00:00Z")];
    let id = propose(&mut net, BOB, ALICE, first).unwrap();
    let a = task(&net, ALICE, &id);
    assert_eq!(a.offers.len(), 3, "{:?}", a.offers);
    assert_eq!(a.state, TaskState::Rejected);
    assert_eq!(task(&net, BOB, &id).state, TaskState::Rejected);
    assert!(a.hold.is_none() && task(&net, BOB, &id).hold.is_none());
}

#[test]
fn an_accept_must_pick_from_the_latest_offer() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, vec![evenings()[0]]).unwrap();
    let a = task(&net, ALICE, &id);
    let p = json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": uuid(9),
        "taskId": id, "contextId": a.context_id, "extensions": [EXT_MEETINGS],
        "parts": [{"kind": "data", "data": {"rdv": "meeting/accept",
            "slot": evenings()[1].to_value()}}]}});
    let ev = net.forge(ALICE, BOB, &p);
    net.inject(BOB, &ev);
    let b = task(&net, BOB, &id);
    assert_eq!(b.state, TaskState::Rejected);
    assert!(b.gate.is_none() && b.hold.is_none());
}

#[test]
fn meetings_need_the_grant_covering_the_direction() {
    // Alice granted Bob: Bob may propose to her; Alice may not propose to
    // Bob until Bob's owner grants back (§7.4 reverse grant rule).
    let mut net = pair();
    let e = propose(&mut net, ALICE, BOB, evenings()).unwrap_err();
    assert!(
        e.to_string()
            .contains("does not let this agent propose meetings"),
        "{e}"
    );
    // A grant without meetings: Bob's proposals create nothing.
    let mut net = pair_with(2, default_scope(false, &[], "100/day"));
    assert!(
        propose(&mut net, BOB, ALICE, evenings()).is_err(),
        "sender checks first"
    );
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(1),
        &uuid(3),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    assert!(!has_task(&net, ALICE, &uuid(2)));
    // may_propose_meetings without invoke is the fallback (§5.3 migration).
    let mut net = pair_with(
        2,
        json!({"may_initiate": true, "may_propose_meetings": true}),
    );
    assert!(propose(&mut net, BOB, ALICE, evenings()).is_ok());
    // Both present and disagreeing: no meetings.
    let mut net = pair_with(
        2,
        json!({"may_initiate": true, "may_propose_meetings": true,
        "invoke": {"https://rendezvous.nesher.co/ext/review/v1": {}}}),
    );
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(1),
        &uuid(3),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    assert!(!has_task(&net, ALICE, &uuid(2)));
}

#[test]
fn a_proposal_over_the_meeting_limits_is_declined_with_reason_rate() {
    let scope = json!({"may_initiate": true, "may_propose_meetings": true,
        "invoke": {EXT_MEETINGS: {"max_frequency": "1/day"}, EXT_MEETING_CANCEL: {}}});
    let mut net = pair_with(2, scope);
    let log = net.log.len();
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(1),
        &uuid(3),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    assert!(has_task(&net, ALICE, &uuid(2)));
    bob_says(
        &mut net,
        &uuid(4),
        &uuid(5),
        &uuid(6),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[1].to_value()]}),
    );
    assert!(
        !has_task(&net, ALICE, &uuid(4)),
        "no state for a refused proposal"
    );
    assert_declined_for_rate(&net, log, &uuid(4));
    assert!(
        !net.nodes[ALICE]
            .events_of("meeting")
            .iter()
            .all(|e| e["step"] != "refused")
    );
    // More than 3× the limit in its window revokes the contact (§5.3 (b)):
    // for 1/day, the 3rd refusal is still a decline, the 4th revokes.
    for n in 0..2u8 {
        bob_says(
            &mut net,
            &uuid(10 + n),
            &uuid(20 + n),
            &uuid(30 + n),
            json!({"rdv": "meeting/propose", "slots": [evenings()[1].to_value()]}),
        );
    }
    assert!(
        net.nodes[ALICE]
            .agent
            .state
            .contact(&net.nodes[BOB].id())
            .is_some()
    );
    bob_says(
        &mut net,
        &uuid(40),
        &uuid(41),
        &uuid(42),
        json!({"rdv": "meeting/propose", "slots": [evenings()[1].to_value()]}),
    );
    assert!(
        net.nodes[ALICE]
            .agent
            .state
            .contact(&net.nodes[BOB].id())
            .is_none(),
        "revoked"
    );
    // Under (b), told apart from (a): the rule kept with the contact.
    let ended = net.nodes[ALICE].agent.state.contacts[&net.nodes[BOB].id()]
        .ended
        .clone()
        .unwrap();
    assert_eq!(ended.by, "task-abuse");
    let why: Value = serde_json::from_str(ended.reason.as_deref().unwrap()).unwrap();
    assert_eq!(
        why,
        json!({"rule": "capability", "capability": EXT_MEETINGS, "rejected": 4, "limit": 1})
    );
    assert_eq!(
        net.nodes[ALICE].events_of("revoked").last().unwrap()["by"],
        "task-abuse"
    );
}

/// Bob's proposal `n` (task uuid(n), context uuid(n + 1), message uuid(n + 2)).
fn bob_proposes(net: &mut Net, n: u8) {
    bob_says(
        net,
        &uuid(n),
        &uuid(n + 1),
        &uuid(n + 2),
        json!({"rdv": "meeting/propose", "slots": [evenings()[0].to_value()]}),
    );
}

/// Alice's limit book for Bob (§5.3: kept with the contact, one per contact
/// for tasks and meeting proposals).
fn book(net: &Net) -> rdv_agent_core::limits::LimitBook {
    net.nodes[ALICE].agent.state.tasks.limits[&net.nodes[BOB].id()].clone()
}

#[test]
fn admitted_proposals_count_in_the_contacts_limit_book_in_a_sliding_window() {
    let scope = json!({"may_initiate": true, "may_propose_meetings": true,
        "invoke": {EXT_MEETINGS: {"max_frequency": "2/day", "max_open": 8},
            EXT_MEETING_CANCEL: {}}});
    let mut net = pair_with(2, scope);
    let grant = net.nodes[ALICE].agent.state.contacts[&net.nodes[BOB].id()]
        .granted_by_us
        .clone()
        .unwrap()
        .id;
    // A proposal refused before admission (already expired) counts nothing.
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(3),
        &uuid(4),
        json!({"rdv": "meeting/propose", "slots": [evenings()[0].to_value()],
            "expires": "2026-11-30T00:00:00Z"}),
    );
    assert!(!has_task(&net, ALICE, &uuid(2)));
    assert!(
        net.nodes[ALICE]
            .agent
            .state
            .tasks
            .limits
            .get(&net.nodes[BOB].id())
            .is_none_or(|b| b
                .caps
                .get(EXT_MEETINGS)
                .is_none_or(|c| c.admitted.is_empty())),
        "only admitted proposals count"
    );
    bob_proposes(&mut net, 10);
    net.advance(3600);
    bob_proposes(&mut net, 20);
    assert!(has_task(&net, ALICE, &uuid(10)) && has_task(&net, ALICE, &uuid(20)));
    // Saved with the contact (each node is rebuilt from its records after
    // every input), under the grant they count for.
    let b = book(&net);
    assert_eq!(b.grant, grant);
    assert_eq!(b.caps[EXT_MEETINGS].admitted.len(), 2);
    // The third in the window is declined for rate, keeps no state, and is
    // counted as a rejection (for the capability and for the day).
    let log = net.log.len();
    bob_proposes(&mut net, 30);
    assert!(!has_task(&net, ALICE, &uuid(30)));
    assert_declined_for_rate(&net, log, &uuid(30));
    let b = book(&net);
    assert_eq!(b.caps[EXT_MEETINGS].admitted.len(), 2);
    assert_eq!(b.caps[EXT_MEETINGS].rejected.len(), 1);
    assert_eq!(b.rejected.len(), 1);
    // The window slides: a day after the first, one more is admitted.
    net.advance(86_400 - 3600 + 1);
    bob_proposes(&mut net, 40);
    assert!(has_task(&net, ALICE, &uuid(40)));
    assert_eq!(book(&net).caps[EXT_MEETINGS].admitted.len(), 2);
}

#[test]
fn meeting_messages_count_towards_the_grant_wide_max_frequency() {
    // §5.3 (a): 3/day for the whole grant; meeting messages count as task
    // and free messages do, whatever their verb.
    let mut net = pair_with(2, default_scope(true, &[], "3/day"));
    let bob = net.nodes[BOB].id();
    bob_proposes(&mut net, 10);
    bob_proposes(&mut net, 20);
    bob_proposes(&mut net, 30);
    assert!(net.nodes[ALICE].agent.state.contact(&bob).is_some());
    assert_eq!(
        net.nodes[ALICE].agent.state.contacts[&bob].received.len(),
        3
    );
    // The fourth, a cancel of a negotiation under way, goes over it.
    bob_says(
        &mut net,
        &uuid(10),
        &uuid(11),
        &uuid(50),
        json!({"rdv": "rdv/cancel"}),
    );
    assert!(
        net.nodes[ALICE].agent.state.contact(&bob).is_none(),
        "revoked"
    );
    let rev = net.nodes[ALICE].events_of("revoked");
    assert_eq!(rev.last().unwrap()["by"], "abuse");
}

#[test]
fn max_open_counts_pending_proposals() {
    let scope = json!({"may_initiate": true, "may_propose_meetings": true,
        "invoke": {EXT_MEETINGS: {"max_open": 1}, EXT_MEETING_CANCEL: {}}});
    let mut net = pair_with(2, scope);
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(1),
        &uuid(3),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    bob_says(
        &mut net,
        &uuid(4),
        &uuid(5),
        &uuid(6),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[1].to_value()]}),
    );
    assert!(!has_task(&net, ALICE, &uuid(4)));
    // Once the first is finished, another is admitted.
    bob_says(
        &mut net,
        &uuid(2),
        &uuid(1),
        &uuid(7),
        json!({"rdv": "rdv/cancel"}),
    );
    bob_says(
        &mut net,
        &uuid(8),
        &uuid(9),
        &uuid(10),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[1].to_value()]}),
    );
    assert!(has_task(&net, ALICE, &uuid(8)));
}

#[test]
fn the_confirm_code_is_bound_to_the_meeting_shown() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    // Before a code is shown, nothing confirms.
    let r = confirm(&mut net, ALICE, &id, "otter-tiger-eagle-123");
    assert_eq!(r["refusal"], "no_code", "{r}");
    let (_, c) = code(&mut net, ALICE, &id);
    // A wrong code confirms nothing and sends nothing.
    let log = net.log.len();
    let r = confirm(&mut net, ALICE, &id, "otter-tiger-eagle-123");
    assert_eq!(r["confirmed"], false);
    assert_eq!(r["refusal"], "wrong_code");
    assert_eq!(r["misses_left"], 4);
    assert_eq!(net.log.len(), log, "nothing left");
    assert!(task(&net, ALICE, &id).gate.is_some());
    // The code is bound to the digest of what was shown: another slot,
    // peer, stage or nonce is another digest.
    let a = task(&net, ALICE, &id);
    let g = a.gate.clone().unwrap();
    let d = meeting::gate_digest(&a, g.stage, &g.slot, &g.nonce);
    assert_eq!(meeting::current_step(&a).unwrap().2, d);
    assert_ne!(
        meeting::gate_digest(&a, g.stage, &evenings()[1], &g.nonce),
        d
    );
    assert_ne!(
        meeting::gate_digest(&a, Stage::Confirm, &g.slot, &g.nonce),
        d
    );
    assert_ne!(meeting::gate_digest(&a, g.stage, &g.slot, "another"), d);
    let mut other = a.clone();
    other.peer = net.nodes[ALICE].id();
    assert_ne!(meeting::gate_digest(&other, g.stage, &g.slot, &g.nonce), d);
    // A code for a digest that is not the step's now is not kept.
    let (_, record) = Phrase::generate(
        &meeting::code_terms(
            g.stage,
            &meeting::gate_digest(&a, g.stage, &evenings()[1], &g.nonce),
        ),
        net.now,
        &mut rand_core::OsRng,
    )
    .unwrap();
    let r = net
        .cmd(
            ALICE,
            Command::SetMeetingCode {
                task_id: id.clone(),
                peer: None,
                digest: meeting::gate_digest(&a, g.stage, &evenings()[1], &g.nonce),
                record,
            },
        )
        .unwrap();
    assert_eq!(r["code_set"], false);
    // The negotiation changes under the same id (Bob cancels): the code
    // shown before confirms nothing, and says so.
    cancel(&mut net, BOB, &id, None, None);
    let r = confirm(&mut net, ALICE, &id, &c);
    assert_eq!(r["confirmed"], false);
    assert_eq!(r["refusal"], "meeting_changed");
    let a = task(&net, ALICE, &id);
    assert_eq!(a.state, TaskState::Canceled);
    assert!(a.accepted.is_none() && a.hold.is_none());
    // A new negotiation under the same id is refused (the task is finished).
    bob_says(
        &mut net,
        &id,
        &a.context_id,
        &uuid(50),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    assert!(task(&net, ALICE, &id).gate.is_none());
    let r = confirm(&mut net, ALICE, &id, &c);
    assert_eq!(r["confirmed"], false);
}

#[test]
fn a_new_negotiation_under_the_same_id_issues_a_new_code() {
    // After eviction a re-proposal under the same id is a new negotiation:
    // its gate has a new nonce, so the old code does not confirm it.
    let mut net = pair();
    let (tid, ctx) = (uuid(2), uuid(1));
    bob_says(
        &mut net,
        &tid,
        &ctx,
        &uuid(3),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    let (_, c1) = code(&mut net, ALICE, &tid);
    let key = meeting::task_key(&net.nodes[BOB].id(), &tid);
    // The store forgets the task (pruned or evicted).
    net.nodes[ALICE]
        .records
        .remove(&(rdv_agent_core::record::Table::Meeting, key));
    net.nodes[ALICE].reload();
    bob_says(
        &mut net,
        &tid,
        &ctx,
        &uuid(4),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    let (_, c2) = code(&mut net, ALICE, &tid);
    assert_ne!(c1, c2);
    let r = confirm(&mut net, ALICE, &tid, &c1);
    assert_eq!(r["confirmed"], false);
    assert!(task(&net, ALICE, &tid).accepted.is_none());
}

#[test]
fn a_finished_task_is_answered_with_its_real_state_at_most_8_times() {
    let mut net = pair();
    let id = agreed(&mut net);
    let ctx = task(&net, ALICE, &id).context_id;
    let log = net.log.len();
    for n in 0..10u8 {
        bob_says(
            &mut net,
            &id,
            &ctx,
            &uuid(100 + n),
            json!({"rdv": "rdv/cancel"}),
        );
    }
    let answers: Vec<Value> = received(&net, BOB, log)
        .into_iter()
        .filter(|p| p["type"] == "a2a/task-update")
        .collect();
    assert_eq!(answers.len(), 8);
    assert!(
        answers
            .iter()
            .all(|p| p["update"]["status"]["state"] == "completed")
    );
    assert_eq!(
        task(&net, ALICE, &id).state,
        TaskState::Completed,
        "rdv/cancel is not honored"
    );
}

#[test]
fn an_agreed_meeting_is_called_off_only_with_its_cancel_code() {
    let mut net = pair();
    let id = agreed(&mut net);
    let r = cancel(&mut net, BOB, &id, None, None);
    assert_eq!(r["canceled"], false);
    assert_eq!(r["refusal"], "code_needed");
    let r = cancel(&mut net, BOB, &id, Some("otter-tiger-eagle-123"), None);
    assert_eq!(r["refusal"], "no_code");
    let (stage, c) = code(&mut net, BOB, &id);
    assert_eq!(stage, Stage::Cancel);
    let r = cancel(&mut net, BOB, &id, Some("otter-tiger-eagle-123"), None);
    assert_eq!(r["refusal"], "wrong_code");
    assert_eq!(task(&net, BOB, &id).state, TaskState::Completed);
    let r = cancel(&mut net, BOB, &id, Some(&c), Some("sorry, I am ill"));
    assert_eq!(r["canceled"], true, "{r}");
    assert_eq!(r["verb"], "meeting/cancel");
    for i in [ALICE, BOB] {
        let x = task(&net, i, &id);
        assert_eq!(x.state, TaskState::Canceled, "node {i}");
        assert!(x.hold.is_none());
        assert_eq!(x.agreed, Some(evenings()[0]));
    }
    // The owner's reason reaches the peer, marked as peer text there.
    let ev = net.nodes[ALICE].events_of("meeting");
    let canceled = ev
        .iter()
        .find(|e| e["step"] == "meeting-canceled")
        .expect("a meeting-canceled event");
    assert_eq!(
        canceled["reason"],
        json!({"untrusted_peer_text": "sorry, I am ill"}),
        "{canceled}"
    );
    assert_eq!(
        task(&net, ALICE, &id).end_reason.as_deref(),
        Some("sorry, I am ill")
    );
    assert_eq!(
        task(&net, BOB, &id).end_reason.as_deref(),
        Some("canceled by you: sorry, I am ill")
    );
}

#[test]
fn a_cancel_reason_is_one_short_line() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    for bad in ["x".repeat(201), "two\nlines".to_string()] {
        let e = net
            .cmd(
                BOB,
                Command::CancelMeeting {
                    task_id: id.clone(),
                    peer: None,
                    code: None,
                    reason: Some(bad),
                },
            )
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("a reason is one line of at most 200 characters"),
            "{e}"
        );
    }
    assert!(
        task(&net, BOB, &id).state != TaskState::Canceled,
        "nothing done"
    );
    // A negotiation still open is called off with the reason sent along.
    let log = net.log.len();
    let r = cancel(&mut net, BOB, &id, None, Some("plans changed"));
    assert_eq!(r["canceled"], true, "{r}");
    let sent = received(&net, ALICE, log);
    assert!(
        sent.iter().any(|p| {
            p["message"]["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|part| part["data"]["reason"] == "plans changed")
        }),
        "{sent:?}"
    );
    assert_eq!(
        task(&net, ALICE, &id).end_reason.as_deref(),
        Some("plans changed")
    );
}

#[test]
fn five_wrong_codes_kill_the_code_and_a_new_one_is_needed() {
    // §5.5 (the grant phrases' rules): a code survives 4 misses; the 5th
    // kills it, so even the right code then confirms nothing; the next
    // code shown works.
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let (_, c) = code(&mut net, ALICE, &id);
    for left in (0..5).rev() {
        let r = confirm(&mut net, ALICE, &id, "otter-tiger-eagle-123");
        assert_eq!(r["confirmed"], false);
        if left > 0 {
            assert_eq!(r["refusal"], "wrong_code", "{r}");
            assert_eq!(r["misses_left"], left);
        } else {
            assert_eq!(r["refusal"], "new_code_needed", "{r}");
        }
    }
    let r = confirm(&mut net, ALICE, &id, &c);
    assert_eq!(r["refusal"], "new_code_needed", "{r}");
    assert!(
        task(&net, ALICE, &id).accepted.is_none(),
        "nothing confirmed"
    );
    // The misses are kept in the record (a restart does not reset them).
    net.nodes[ALICE].reload();
    let r = confirm(&mut net, ALICE, &id, &c);
    assert_eq!(r["refusal"], "new_code_needed", "{r}");
    let (_, c2) = code(&mut net, ALICE, &id);
    let r = confirm(&mut net, ALICE, &id, &c2);
    assert_eq!(r["confirmed"], true, "{r}");
    // Single use: the same code again confirms nothing more.
    let r = confirm(&mut net, ALICE, &id, &c2);
    assert_eq!(r["confirmed"], false, "{r}");
}

#[test]
fn a_meeting_cancel_for_another_slot_is_dropped() {
    let mut net = pair();
    let id = agreed(&mut net);
    let ctx = task(&net, ALICE, &id).context_id;
    bob_says(
        &mut net,
        &id,
        &ctx,
        &uuid(60),
        json!({"rdv": "meeting/cancel",
        "slot": evenings()[1].to_value()}),
    );
    let a = task(&net, ALICE, &id);
    assert_eq!(a.state, TaskState::Completed);
    assert!(a.hold.is_some());
}

#[test]
fn tasks_per_peer_are_capped_evicting_finished_ones_first() {
    let scope = json!({"may_initiate": true, "may_propose_meetings": true,
        "invoke": {EXT_MEETINGS: {"max_open": 100}, EXT_MEETING_CANCEL: {}}});
    let mut net = pair_with(2, scope);
    // 32 tombstones fill Bob's room; a proposal evicts one.
    for n in 0..32u8 {
        bob_says(
            &mut net,
            &uuid(n),
            &uuid(200),
            &uuid(100 + n),
            json!({"rdv": "rdv/cancel"}),
        );
    }
    assert_eq!(net.nodes[ALICE].agent.state.meetings.tasks.len(), 32);
    bob_says(
        &mut net,
        &uuid(40),
        &uuid(201),
        &uuid(41),
        json!({"rdv": "meeting/propose",
        "slots": [evenings()[0].to_value()]}),
    );
    assert!(has_task(&net, ALICE, &uuid(40)));
    assert_eq!(net.nodes[ALICE].agent.state.meetings.tasks.len(), 32);
    assert!(
        !has_task(&net, ALICE, &uuid(0)),
        "the oldest tombstone went"
    );
}

#[test]
fn finished_tasks_are_pruned_after_30_days() {
    let mut net = pair();
    let id = agreed(&mut net);
    net.advance(31 * 24 * 3600);
    let now = net.now;
    net.nodes[ALICE].handle(Input::Tick, now).unwrap();
    assert!(!has_task(&net, ALICE, &id));
}

#[test]
fn meeting_state_survives_a_reload_exactly() {
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let before = task(&net, ALICE, &id);
    net.nodes[ALICE].reload();
    assert_eq!(task(&net, ALICE, &id), before);
    let _ = AgentId::parse(before.peer.as_str()).unwrap();
}

#[test]
fn a_backup_holds_no_meeting_code() {
    // §5.5, §6.4.1: a code shown before a backup confirms nothing after a
    // restore from it (the gate's nonce is not in the bundle).
    let mut net = pair();
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let (_, c) = code(&mut net, ALICE, &id);
    let gate = task(&net, ALICE, &id).gate.unwrap();
    let hash =
        serde_json::to_value(gate.code.as_ref().expect("the code's record")).unwrap()["hash"]
            .as_str()
            .unwrap()
            .to_string();
    let state = rdv_agent_core::restore::backup_state(&net.nodes[ALICE].record_list()).unwrap();
    assert!(!state.to_string().contains(&gate.nonce));
    assert!(
        !state.to_string().contains(&hash),
        "no code record in a backup"
    );
    let recs = rdv_agent_core::restore::restored_records(&state, &net.nodes[ALICE].id()).unwrap();
    let node = common::Node::from_records(net.nodes[ALICE].key, &recs);
    let t = node
        .agent
        .state
        .meetings
        .tasks
        .values()
        .find(|t| t.task_id == id)
        .unwrap();
    assert!(t.hold.is_some(), "the hold is kept");
    assert!(t.gate.as_ref().unwrap().code.is_none());
    let mut node = node;
    let out = node
        .handle(
            Input::Command(Command::ConfirmMeeting {
                task_id: id.clone(),
                peer: None,
                code: Secret::new(c),
            }),
            net.now,
        )
        .unwrap();
    let r = out.reply.unwrap();
    assert_eq!(r["confirmed"], false, "{r}");
    assert_eq!(r["refusal"], "no_code", "{r}");
}

#[test]
fn auto_approve_takes_the_steps_of_a_negotiation_the_contact_started_only() {
    // §5.5.1 (issue #44): auto_approve: all on a contact covers the accept
    // or confirm of a negotiation that contact started, audited; one the
    // owner started still waits for the owner.
    let mut net = pair();
    let owner = |net: &mut Net, c: OwnerCommand| net.cmd(ALICE, Command::Owner(c)).unwrap();
    owner(
        &mut net,
        OwnerCommand::SecretSet {
            passphrase: Secret::new("the owner passphrase 7"),
        },
    );
    let bob = net.nodes[BOB].id();
    let r = owner(
        &mut net,
        OwnerCommand::AutoApproveOn {
            contact: bob,
            until: None,
            passphrase: Secret::new("the owner passphrase 7"),
            via: "terminal".into(),
        },
    );
    assert_eq!(r["auto_approve"], "set", "{r}");
    // Bob proposes: Alice's agent holds the first evening and accepts it
    // without asking her.
    let id = propose(&mut net, BOB, ALICE, evenings()).unwrap();
    let a = task(&net, ALICE, &id);
    assert!(a.gate.is_none(), "no gate waits for Alice");
    assert_eq!(a.accepted, Some(evenings()[0]));
    let steps: Vec<String> = net.nodes[ALICE]
        .events_of("meeting")
        .iter()
        .filter(|e| e["task_id"] == id.as_str())
        .map(|e| e["step"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(steps.contains(&"auto-approved".to_string()), "{steps:?}");
    assert!(steps.contains(&"accept-sent".to_string()), "{steps:?}");
    assert!(!steps.contains(&"confirm-needed".to_string()), "{steps:?}");
    let audit: Vec<_> = net.nodes[ALICE]
        .agent
        .state
        .tasks
        .audit
        .values()
        .filter(|l| l.action == "pass")
        .cloned()
        .collect();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].capability.as_deref(), Some(EXT_MEETINGS));
    assert_eq!(audit[0].gate.as_deref(), Some("accept"));
    assert_eq!(audit[0].task_id.as_deref(), Some(id.as_str()));
    assert!(audit[0].left_sha256.is_some() && audit[0].left_bytes.unwrap() > 0);
    // Bob's own side still waits for Bob (his agent has no such setting).
    assert_eq!(task(&net, BOB, &id).gate.unwrap().stage, Stage::Confirm);
    let (_, c) = code(&mut net, BOB, &id);
    assert_eq!(confirm(&mut net, BOB, &id, &c)["confirmed"], true);
    assert_eq!(task(&net, ALICE, &id).state, TaskState::Completed);
    // Bob proposes an evening Alice is busy on: her agent counters, and
    // Bob's accept of her counter opens her confirm gate, which
    // auto-approve takes too (Bob started the negotiation).
    busy(&mut net, ALICE, vec![evenings()[1], evenings()[2]]);
    let id2 = propose(&mut net, BOB, ALICE, vec![evenings()[1]]).unwrap();
    let (_, c2) = code(&mut net, BOB, &id2);
    assert_eq!(confirm(&mut net, BOB, &id2, &c2)["confirmed"], true);
    let a2 = task(&net, ALICE, &id2);
    assert_eq!(a2.state, TaskState::Completed, "{a2:?}");
    let gates: Vec<String> = net.nodes[ALICE]
        .agent
        .state
        .tasks
        .audit
        .values()
        .filter(|l| l.action == "pass")
        .filter_map(|l| l.gate.clone())
        .collect();
    assert_eq!(gates, ["accept", "confirm"]);
    // A negotiation Alice started (§5.5.1: it still waits for the owner's
    // confirm). The core has no reverse-grant command yet, so the grants
    // both ways are set in memory: Bob's grant to Alice as the one she gave.
    let sixth = slot("2026-12-06T19:00:00Z", "2026-12-06T21:00:00Z");
    busy(&mut net, BOB, vec![sixth]);
    let (alice, bob) = (net.nodes[ALICE].id(), net.nodes[BOB].id());
    let key = |id: &AgentId| (rdv_agent_core::record::Table::Contact, id.to_string());
    let given = net.nodes[ALICE].records[&key(&bob)]["granted_by_us"].clone();
    net.nodes[ALICE].records.get_mut(&key(&bob)).unwrap()["granted_to_us"] = given.clone();
    net.nodes[BOB].records.get_mut(&key(&alice)).unwrap()["granted_by_us"] = given;
    net.nodes[ALICE].reload();
    net.nodes[BOB].reload();
    let id3 = propose(&mut net, ALICE, BOB, vec![sixth]).unwrap();
    assert_eq!(
        task(&net, BOB, &id3).state,
        TaskState::InputRequired,
        "Bob countered"
    );
    let a3 = task(&net, ALICE, &id3);
    assert_eq!(
        a3.gate.map(|g| g.stage),
        Some(Stage::Accept),
        "it waits for Alice"
    );
    assert!(a3.accepted.is_none());
    // Calling off an agreed meeting is never covered: it needs her code.
    let r = cancel(&mut net, ALICE, &id, None, None);
    assert_eq!(r["refusal"], "code_needed", "{r}");
}
