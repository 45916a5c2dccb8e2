//! The A2A mapping's strict validation (SPEC §7.1, §7.5 rule 4): what is
//! malformed (dropped), what is unsupported (answered with the rule 5
//! reply, bounded) and what is ignored. Each test fails when its rule is
//! broken.
#![allow(clippy::unwrap_used)]

mod common;

use common::Net;
use rdv_agent_core::a2a::{self, Inbound, TaskState};
use rdv_agent_core::agent::default_scope;
use rdv_agent_core::{Command, RequestTo};
use rdv_proto::consts::{A2A_UNSUPPORTED_KEY, EXT_MEETINGS};
use serde_json::{Value, json};

const ALICE: usize = 0;
const BOB: usize = 1;

fn uuid(n: u8) -> String {
    format!("00000000-0000-4000-8000-0000000000{n:02x}")
}

fn message(data: Value) -> Value {
    json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": uuid(1),
        "taskId": uuid(2), "contextId": uuid(3), "extensions": [EXT_MEETINGS],
        "parts": [{"kind": "data", "data": data}],
    }})
}

fn propose() -> Value {
    message(json!({"rdv": "meeting/propose", "slots": [
        {"start": "2026-12-03T19:00:00Z", "end": "2026-12-03T21:00:00Z"}]}))
}

fn with(mut v: Value, f: impl FnOnce(&mut Value)) -> Value {
    f(&mut v);
    v
}

fn malformed(v: &Value) -> bool {
    matches!(a2a::classify(v), Inbound::Malformed(_))
}

#[test]
fn a_valid_message_names_its_verb_and_data() {
    match a2a::classify(&propose()) {
        Inbound::Message {
            verb,
            task_id,
            context_id,
            data,
            ..
        } => {
            assert_eq!(verb, "meeting/propose");
            assert_eq!((task_id, context_id), (uuid(2), uuid(3)));
            assert!(data.contains_key("slots"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_keys_in_a2a_objects_are_malformed() {
    let cases = [
        with(propose(), |v| v["message"]["color"] = json!("red")),
        with(propose(), |v| v["message"]["parts"][0]["extra"] = json!(1)),
        with(propose(), |v| v["extra"] = json!(1)),
        // role is always agent (§7.1).
        with(propose(), |v| v["message"]["role"] = json!("user")),
        // IDs are UUIDs.
        with(propose(), |v| v["message"]["taskId"] = json!("task-1")),
        with(propose(), |v| v["message"]["messageId"] = json!(7)),
        // One data part exactly.
        with(propose(), |v| {
            v["message"]["parts"] = json!([{"kind": "text", "text": "hi"}])
        }),
        with(propose(), |v| {
            let p = v["message"]["parts"][0].clone();
            v["message"]["parts"] = json!([p.clone(), p]);
        }),
        // A file with an unknown key is A2A's own object.
        with(propose(), |v| {
            v["message"]["parts"]
                .as_array_mut()
                .unwrap()
                .push(json!({"kind": "file", "file": {"uri": "https://x.example/a", "size": 3}}))
        }),
    ];
    for (i, c) in cases.iter().enumerate() {
        assert!(malformed(c), "case {i}: {:?}", a2a::classify(c));
    }
}

fn status(state: &str) -> Value {
    json!({"type": "a2a/task-update", "update": {
        "kind": "status-update", "taskId": uuid(2), "contextId": uuid(3),
        "status": {"state": state, "timestamp": "2026-12-01T10:00:00Z"}, "final": true}})
}

#[test]
fn unknown_task_states_are_malformed_and_known_ones_read() {
    assert!(malformed(&status("postponed")));
    assert!(malformed(&with(
        status("completed"),
        |v| v["update"]["status"]["mood"] = json!(1)
    )));
    for s in TaskState::ALL {
        match a2a::classify(&status(s.as_str())) {
            Inbound::TaskUpdate(u) => assert_eq!(u.state, s),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn metadata_and_unknown_extension_uris_are_ignored() {
    let v = with(propose(), |v| {
        v["message"]["metadata"] = json!({"https://other.example/x": {"anything": [1, 2]}});
        v["message"]["parts"][0]["metadata"] = json!({"k": "v"});
        v["message"]["extensions"] = json!(["https://unknown.example/ext/v9"]);
    });
    assert!(matches!(a2a::classify(&v), Inbound::Message { .. }));
    let s = with(status("working"), |v| {
        v["update"]["metadata"] = json!({"x": {"y": 1}})
    });
    assert!(matches!(a2a::classify(&s), Inbound::TaskUpdate(_)));
}

#[test]
fn an_unknown_part_kind_is_unsupported_and_names_the_verb() {
    let v = with(propose(), |v| {
        v["message"]["parts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"kind": "hologram", "hologram": {}}))
    });
    match a2a::classify(&v) {
        Inbound::Unsupported(u) => {
            assert_eq!(u.message_id, uuid(1));
            assert_eq!(u.verb.as_deref(), Some("meeting/propose"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_unsupported_reply_is_the_one_of_rule_5() {
    let u = a2a::Unsupported {
        task_id: uuid(2),
        context_id: uuid(3),
        message_id: uuid(1),
        verb: Some("meeting/cancel".into()),
        why: String::new(),
    };
    let now = rdv_proto::time::parse_time("t", "2026-12-01T10:00:00Z").unwrap();
    let r = a2a::unsupported_reply(&u, Some(TaskState::Completed), now);
    assert_eq!(
        r,
        json!({"type": "a2a/task-update", "update": {
            "kind": "status-update", "taskId": uuid(2), "contextId": uuid(3),
            "status": {"state": "completed", "timestamp": "2026-12-01T10:00:00Z"},
            "final": true,
            "metadata": {A2A_UNSUPPORTED_KEY: {"messageId": uuid(1), "verb": "meeting/cancel"}}}})
    );
    // No task: rejected. And a rev-3 parser accepts it (metadata is free).
    let r = a2a::unsupported_reply(&u, None, now);
    assert_eq!(r["update"]["status"]["state"], "rejected");
    match a2a::classify(&r) {
        Inbound::TaskUpdate(s) => {
            assert_eq!(
                s.unsupported(),
                Some((uuid(1), Some("meeting/cancel".into())))
            );
        }
        other => panic!("{other:?}"),
    }
}

// ---- on the wire, between two agents ---------------------------------------

/// Alice granted Bob with meetings.
fn pair() -> Net {
    let mut net = Net::new(2);
    net.init(ALICE, &["alice@example.com"]);
    net.init(BOB, &["bob@example.com"]);
    let r = net
        .cmd(
            BOB,
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

/// What Bob received since `from_log`, opened.
fn to_bob(net: &Net, from_log: usize) -> Vec<Value> {
    let key = rdv_proto::AgentKey::from_seed(net.nodes[BOB].key);
    net.log[from_log..]
        .iter()
        .filter_map(|ev| {
            let raw = serde_json::to_vec(ev).unwrap();
            let (_, c) = rdv_proto::nostr_event::parse_event(&raw).ok()?;
            let rdv_proto::nostr_event::Carried::Envelope {
                recipient,
                envelope,
            } = c
            else {
                return None;
            };
            if &recipient != key.id() {
                return None;
            }
            let raw = rdv_proto::canon::to_vec(&envelope).unwrap();
            let v = rdv_proto::envelope::verify(&raw, net.now).unwrap();
            Some(Value::Object(
                rdv_proto::envelope::open_verified(v, &key).unwrap().payload,
            ))
        })
        .collect()
}

fn bob_sends(net: &mut Net, p: &Value) {
    let ev = net.forge(BOB, ALICE, p);
    net.inject(ALICE, &ev);
}

#[test]
fn an_unknown_verb_is_answered_with_the_exact_reply() {
    let mut net = pair();
    let log = net.log.len();
    bob_sends(
        &mut net,
        &message(json!({"rdv": "meeting/teleport", "to": "mars"})),
    );
    let got = to_bob(&net, log);
    assert_eq!(got.len(), 1, "{got:?}");
    let u = &got[0]["update"];
    assert_eq!(got[0]["type"], "a2a/task-update");
    assert_eq!(u["taskId"], uuid(2).as_str());
    assert_eq!(u["contextId"], uuid(3).as_str());
    // No such task at Alice: rejected.
    assert_eq!(u["status"]["state"], "rejected");
    assert_eq!(u["final"], true);
    assert_eq!(
        u["metadata"][A2A_UNSUPPORTED_KEY],
        json!({"messageId": uuid(1), "verb": "meeting/teleport"})
    );
    assert!(
        net.nodes[ALICE].agent.state.meetings.tasks.is_empty(),
        "no state"
    );
}

#[test]
fn an_unknown_key_inside_data_is_unsupported_and_a_malformed_one_is_silent() {
    let mut net = pair();
    let log = net.log.len();
    // An unknown key inside a slot: unsupported (§7.5 rule 4: slots too).
    bob_sends(
        &mut net,
        &message(json!({"rdv": "meeting/propose", "slots": [
        {"start": "2026-12-03T19:00:00Z", "end": "2026-12-03T21:00:00Z", "tz": "x"}]})),
    );
    let got = to_bob(&net, log);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0]["update"]["metadata"][A2A_UNSUPPORTED_KEY]["verb"],
        "meeting/propose"
    );
    assert!(net.nodes[ALICE].agent.state.meetings.tasks.is_empty());
    // Malformed (an unknown key in A2A's own message): dropped, no answer.
    let log = net.log.len();
    bob_sends(
        &mut net,
        &with(propose(), |v| v["message"]["color"] = json!(1)),
    );
    assert!(to_bob(&net, log).is_empty());
    assert!(net.nodes[ALICE].agent.state.meetings.tasks.is_empty());
}

#[test]
fn unsupported_replies_are_bounded_per_task() {
    let mut net = pair();
    // A task Alice keeps (Bob's proposal), then ten unknown verbs for it.
    bob_sends(&mut net, &propose());
    assert_eq!(net.nodes[ALICE].agent.state.meetings.tasks.len(), 1);
    let log = net.log.len();
    for n in 0..10u8 {
        let v = with(message(json!({"rdv": "meeting/teleport"})), |v| {
            v["message"]["messageId"] = json!(uuid(100 + n))
        });
        bob_sends(&mut net, &v);
    }
    let got = to_bob(&net, log);
    assert_eq!(got.len(), 8);
    // Each carries the task's real state (submitted), not rejected.
    assert!(
        got.iter()
            .all(|p| p["update"]["status"]["state"] == "submitted")
    );
}

#[test]
fn a_status_update_is_never_answered_as_unsupported() {
    let mut net = pair();
    let log = net.log.len();
    bob_sends(&mut net, &status("postponed"));
    bob_sends(&mut net, &status("completed"));
    assert!(to_bob(&net, log).is_empty());
}

#[test]
fn our_messages_pass_our_own_strict_parser() {
    let m = a2a::Message::agent(
        uuid(1),
        &uuid(2),
        &uuid(3),
        EXT_MEETINGS,
        json!({"rdv": "meeting/accept", "slot": {"start": "2026-12-03T19:00:00Z",
            "end": "2026-12-03T21:00:00Z"}})
        .as_object()
        .unwrap()
        .clone(),
    );
    let p = a2a::message_payload(&m);
    assert!(matches!(a2a::classify(&p), Inbound::Message { .. }));
    let s = a2a::status_payload(&uuid(2), &uuid(3), TaskState::Working, common::t0(), None);
    assert!(matches!(a2a::classify(&s), Inbound::TaskUpdate(u) if !u.final_));
}
