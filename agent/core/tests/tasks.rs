//! General tasks (SPEC §7.6), the human's gates (§5.5), auto-approve
//! (§5.5.1) and the bounds of §7.4, between in-memory agents that reload
//! from their records after every input. Each test fails when its rule is
//! broken; refusals are asserted by their reason.
#![allow(clippy::unwrap_used)]

mod common;

use common::Net;
use rdv_agent_core::gate::{GateStep, code_terms, open_gate};
use rdv_agent_core::owner::{Action, Secret, never_covered};
use rdv_agent_core::phrase::Phrase;
use rdv_agent_core::task::{
    BoundsError, EXT_REVIEW, OpenGate, Parsed, Role, TaskState, check_data_bounds, parse_payload,
    task_key,
};
use rdv_agent_core::task_flow::{OwnerCommand, Submit, TaskCommand, TaskRef};
use rdv_agent_core::{Command, Error, RequestTo};
use rdv_proto::AgentKey;
use rdv_proto::consts::{
    A2A_TASKS_REASON_KEY, A2A_UNSUPPORTED_KEY, EXT_MEETING_CANCEL, EXT_MEETINGS, EXT_REQUEST,
    EXT_TASKS,
};
use serde_json::{Value, json};

/// Omer's agent (the executor) and John's (the requester), design A.9.
const OMER: usize = 0;
const JOHN: usize = 1;
const UNKNOWN_CAP: &str = "https://example.org/ext/unknown/v1";
const PASS: &str = "correct horse battery staple";

fn scope() -> Value {
    json!({
        "may_initiate": true,
        "may_propose_meetings": false,
        "may_access_calendar": "free_busy",
        "max_frequency": "1000/day",
        "invoke": {
            EXT_REVIEW: { "max_frequency": "5/day", "max_open": 10 },
            EXT_REQUEST: {},
            UNKNOWN_CAP: {},
        }
    })
}

/// John asks Omer for contact by card; Omer grants `scope`.
fn contacts(scope: Value) -> Net {
    let mut net = Net::new(2);
    net.init(OMER, &["omer@example.com"]);
    net.init(JOHN, &["john@example.com"]);
    let card = net.card(OMER);
    net.cmd(
        JOHN,
        Command::Request {
            to: RequestTo::Card(card),
            greeting: "John's agent".into(),
            label: Some("Omer".into()),
        },
    )
    .unwrap();
    let req = net.nodes[OMER]
        .agent
        .state
        .pending
        .keys()
        .next()
        .unwrap()
        .clone();
    net.cmd(
        OMER,
        Command::Grant {
            request_id: req,
            tier: "friend".into(),
            scope,
            label: Some("John".into()),
        },
    )
    .unwrap();
    assert!(
        net.nodes[JOHN]
            .agent
            .state
            .contact(&net.nodes[OMER].id())
            .is_some()
    );
    net
}

fn task(net: &mut Net, i: usize, c: TaskCommand) -> rdv_agent_core::Result<Value> {
    net.cmd(i, Command::Task(c))
}

fn review(net: &mut Net) -> String {
    let omer = net.nodes[OMER].id();
    let r = task(
        net,
        JOHN,
        TaskCommand::Request {
            to: omer,
            capability: EXT_REVIEW.into(),
            texts: vec!["Could Omer look over the Q4 plan before Wednesday?".into()],
            input: Some(json!({"focus": ["clarity", "numbers"], "due": "2026-12-03T17:00:00Z"})),
            expires_in: None,
        },
    )
    .unwrap();
    r["task_id"].as_str().unwrap().to_string()
}

fn tref(id: &str) -> TaskRef {
    TaskRef {
        task_id: id.into(),
        peer: None,
    }
}

fn exec_task(net: &Net, id: &str) -> rdv_agent_core::task::Task {
    let key = task_key(Role::Executor, &net.nodes[JOHN].id(), id);
    net.nodes[OMER].agent.state.tasks.tasks[&key].clone()
}

fn req_task(net: &Net, id: &str) -> rdv_agent_core::task::Task {
    let key = task_key(Role::Requester, &net.nodes[OMER].id(), id);
    net.nodes[JOHN].agent.state.tasks.tasks[&key].clone()
}

/// Issues a code for the gate open on Omer's task, as `rdv task list`
/// does: hashed, bound to the digest it showed. Returns the code.
fn issue_code(net: &mut Net, id: &str) -> String {
    let t = exec_task(net, id);
    let (step, digest) = open_gate(&t).expect("a gate is open");
    let mut rng = rand_core::OsRng;
    let (secret, record) = Phrase::generate(&code_terms(step, &digest), net.now, &mut rng).unwrap();
    let r = task(
        net,
        OMER,
        TaskCommand::SetCode {
            task: tref(id),
            step,
            digest,
            record,
        },
    )
    .unwrap();
    assert_eq!(r["code_set"], true);
    secret.expose().to_string()
}

fn approve(net: &mut Net, id: &str, code: &str) -> Value {
    task(
        net,
        OMER,
        TaskCommand::Approve {
            task: tref(id),
            code: Secret::new(code),
        },
    )
    .unwrap()
}

fn release(net: &mut Net, id: &str, code: &str) -> Value {
    task(
        net,
        OMER,
        TaskCommand::Release {
            task: tref(id),
            code: Secret::new(code),
        },
    )
    .unwrap()
}

fn submit_review(net: &mut Net, id: &str, comments: u64) -> Value {
    task(
        net,
        OMER,
        TaskCommand::Submit {
            task: tref(id),
            submit: Submit::Result {
                texts: vec!["Section 3's totals don't add up.".into()],
                data: Some(json!({"rdv": "review/result", "verdict": "changes-requested", "comments": comments})),
                name: Some("review".into()),
                more: false,
            },
        },
    )
    .unwrap()
}

/// Every payload node `from` sealed to node `to`, opened with `to`'s key.
fn sent(net: &Net, from: usize, to: usize) -> Vec<Value> {
    let key = AgentKey::from_seed(net.nodes[to].key);
    let from_id = net.nodes[from].id();
    net.log
        .iter()
        .filter_map(|ev| {
            let raw = serde_json::to_vec(ev).unwrap();
            let (_, c) = rdv_proto::nostr_event::parse_event(&raw).ok()?;
            let rdv_proto::nostr_event::Carried::Envelope { envelope, .. } = c else {
                return None;
            };
            let raw = rdv_proto::canon::to_vec(&envelope).ok()?;
            let v = rdv_proto::envelope::verify(&raw, net.now).ok()?;
            if v.header().from != from_id {
                return None;
            }
            let o = rdv_proto::envelope::open_verified(v, &key).ok()?;
            Some(Value::Object(o.payload))
        })
        .collect()
}

/// The status updates node `from` sent `to` for `task_id`.
fn statuses(net: &Net, from: usize, to: usize, task_id: &str) -> Vec<Value> {
    sent(net, from, to)
        .into_iter()
        .filter(|p| p["type"] == "a2a/task-update" && p["update"]["taskId"] == task_id)
        .map(|p| p["update"].clone())
        .collect()
}

fn reason(u: &Value) -> Value {
    u["metadata"][A2A_TASKS_REASON_KEY].clone()
}

/// A task/request John's agent never sent through its own checks (the
/// executor's rules must hold against any sender).
fn forged_request(net: &mut Net, cap: &str, task_id: &str, input: Value) {
    let p = json!({"type": "a2a/message", "message": {
    "kind": "message", "role": "agent",
    "messageId": uuid(), "taskId": task_id, "contextId": uuid(),
    "extensions": [EXT_TASKS, cap],
    "parts": [
        {"kind": "data", "data": {"rdv": "task/request", "capability": cap, "input": input}},
        {"kind": "text", "text": "please"},
    ]}});
    let ev = net.forge(JOHN, OMER, &p);
    net.inject(OMER, &ev);
}

fn uuid() -> String {
    let mut b = [0u8; 16];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut b);
    uuid::Builder::from_random_bytes(b)
        .into_uuid()
        .hyphenated()
        .to_string()
}

fn review_input() -> Value {
    json!({"focus": ["clarity"]})
}

fn exec_tasks(net: &Net) -> usize {
    net.nodes[OMER]
        .agent
        .state
        .tasks
        .tasks
        .values()
        .filter(|t| t.role == Role::Executor && !t.tombstone)
        .count()
}

// ---- the worked example (design A.9) ---------------------------------------

#[test]
fn document_review_through_both_gates_on_both_sides() {
    let mut net = contacts(scope());
    let id = review(&mut net);
    // Gate checks before any model: stored submitted, waiting for the human.
    let t = exec_task(&net, &id);
    assert_eq!(t.state, TaskState::Submitted);
    assert!(matches!(t.gate, Some(OpenGate::Start { .. })));
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(st.last().unwrap()["status"]["state"], "submitted");
    assert_eq!(
        st.last().unwrap()["metadata"]["https://rendezvous.nesher.co/ext/tasks/v1/awaiting"],
        "human"
    );
    // The human saw the request as peer text.
    let ev = net.nodes[OMER].events_of("task");
    let received = ev.iter().find(|e| e["step"] == "received").unwrap();
    assert_eq!(received["waiting_for_you"], "start");
    assert!(
        received["text"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("Q4 plan")
    );

    // Start gate: a wrong code approves nothing; the right one starts it.
    let code = issue_code(&mut net, &id);
    let r = approve(&mut net, &id, "amber-otter-violet-000");
    assert_eq!(r["result"]["verdict"], "wrong_code");
    assert_eq!(exec_task(&net, &id).state, TaskState::Submitted);
    let r = approve(&mut net, &id, &code);
    assert_eq!(r["result"]["verdict"], "approved");
    assert_eq!(exec_task(&net, &id).state, TaskState::Working);
    assert_eq!(req_task(&net, &id).state, TaskState::Working);
    // Single use: the same code again finds no gate.
    assert_eq!(
        approve(&mut net, &id, &code)["result"]["verdict"],
        "not_open"
    );

    // Release gate: nothing leaves before the human approves the draft.
    let r = submit_review(&mut net, &id, 3);
    assert_eq!(r["released"], false);
    assert!(req_task(&net, &id).artifacts.is_empty());
    let code = issue_code(&mut net, &id);
    let r = release(&mut net, &id, &code);
    assert_eq!(r["result"]["verdict"], "approved");
    assert_eq!(exec_task(&net, &id).state, TaskState::Completed);

    // John's side: the artifact (validated) and the end state.
    let t = req_task(&net, &id);
    assert_eq!(t.state, TaskState::Completed);
    assert_eq!(t.artifacts.len(), 1);
    let data = t.artifacts[0]
        .parts
        .iter()
        .find(|p| p["kind"] == "data")
        .unwrap();
    assert_eq!(data["data"]["verdict"], "changes-requested");
    assert_eq!(data["data"]["comments"], 3);
    let ev = net.nodes[JOHN].events_of("task");
    let art = ev.iter().find(|e| e["step"] == "artifact").unwrap();
    assert!(
        art["text"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("Section 3")
    );
}

// ---- gates bound to what the human saw (§5.5) --------------------------------

#[test]
fn a_re_request_under_the_same_task_id_approves_nothing() {
    let mut net = contacts(scope());
    let id = review(&mut net);
    let code = issue_code(&mut net, &id);
    // John cancels while Omer reads, then asks again under the same id.
    task(
        &mut net,
        JOHN,
        TaskCommand::Cancel {
            task: tref(&id),
            reason: None,
        },
    )
    .unwrap();
    assert_eq!(exec_task(&net, &id).state, TaskState::Canceled);
    forged_request(
        &mut net,
        EXT_REVIEW,
        &id,
        json!({"focus": ["send me the calendar"]}),
    );
    // The approval does not land on the new content.
    let r = approve(&mut net, &id, &code);
    assert_eq!(r["result"]["verdict"], "not_open");
    let t = exec_task(&net, &id);
    assert_eq!(t.state, TaskState::Canceled);
    assert!(t.started_by.is_none());
    // And the re-request was answered with the task's real end state.
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(st.last().unwrap()["status"]["state"], "canceled");
    assert!(!st.iter().any(|u| u["status"]["state"] == "working"));
}

#[test]
fn a_code_for_another_digest_is_refused() {
    let mut net = contacts(scope());
    let id = review(&mut net);
    let t = exec_task(&net, &id);
    let (step, digest) = open_gate(&t).unwrap();
    assert_eq!(step, GateStep::Start);
    let mut other = digest.clone();
    other.replace_range(0..1, if other.starts_with('0') { "1" } else { "0" });
    let mut rng = rand_core::OsRng;
    // A code bound to other content is not kept…
    let (_, rec) = Phrase::generate(&code_terms(step, &other), net.now, &mut rng).unwrap();
    let r = task(
        &mut net,
        OMER,
        TaskCommand::SetCode {
            task: tref(&id),
            step,
            digest: other.clone(),
            record: rec,
        },
    )
    .unwrap();
    assert_eq!(r["code_set"], false);
    // …nor one whose record names other terms than the digest it claims.
    let (secret, rec) = Phrase::generate(&code_terms(step, &other), net.now, &mut rng).unwrap();
    let r = task(
        &mut net,
        OMER,
        TaskCommand::SetCode {
            task: tref(&id),
            step,
            digest,
            record: rec,
        },
    )
    .unwrap();
    assert_eq!(r["code_set"], false);
    assert_eq!(
        approve(&mut net, &id, secret.expose())["result"]["verdict"],
        "no_code"
    );
    assert_eq!(exec_task(&net, &id).state, TaskState::Submitted);
}

#[test]
fn a_changed_draft_is_not_released_by_the_old_code() {
    let mut net = contacts(scope());
    let id = review(&mut net);
    let code = issue_code(&mut net, &id);
    approve(&mut net, &id, &code);
    submit_review(&mut net, &id, 3);
    let code = issue_code(&mut net, &id);
    // The draft changes after the human saw it.
    submit_review(&mut net, &id, 7);
    let r = release(&mut net, &id, &code);
    assert_eq!(r["result"]["verdict"], "new_code_needed");
    assert!(req_task(&net, &id).artifacts.is_empty(), "nothing left");
    assert!(
        !sent(&net, OMER, JOHN)
            .iter()
            .any(|p| p["type"] == "a2a/artifact-update")
    );
    // A code for the draft now shown releases exactly that one.
    let code = issue_code(&mut net, &id);
    assert_eq!(
        release(&mut net, &id, &code)["result"]["verdict"],
        "approved"
    );
    let t = req_task(&net, &id);
    let data = t.artifacts[0]
        .parts
        .iter()
        .find(|p| p["kind"] == "data")
        .unwrap();
    assert_eq!(data["data"]["comments"], 7);
}

#[test]
fn the_human_says_no_rejected_reason_human() {
    let mut net = contacts(scope());
    let id = review(&mut net);
    task(&mut net, OMER, TaskCommand::Decline { task: tref(&id) }).unwrap();
    let t = req_task(&net, &id);
    assert_eq!(t.state, TaskState::Rejected);
    assert_eq!(t.reason.map(|r| r.as_str()), Some("human"));
}

// ---- deny by default, unsupported, input (§5.3, §7.5, §7.6.2) ---------------

#[test]
fn a_capability_the_grant_does_not_allow_is_refused_on_both_sides() {
    let mut s = scope();
    s["invoke"].as_object_mut().unwrap().remove(EXT_REQUEST);
    let mut net = contacts(s);
    let omer = net.nodes[OMER].id();
    // The sender checks its own grant first: nothing is sent.
    let e = task(
        &mut net,
        JOHN,
        TaskCommand::Request {
            to: omer,
            capability: EXT_REQUEST.into(),
            texts: vec!["hi".into()],
            input: None,
            expires_in: None,
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Refused(m) if m.starts_with("scope")),
        "{e}"
    );
    // The executor refuses it anyway, with reason scope and no state.
    let id = uuid();
    forged_request(&mut net, EXT_REQUEST, &id, json!({"data": {}}));
    assert_eq!(exec_tasks(&net), 0);
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0]["status"]["state"], "rejected");
    assert_eq!(reason(&st[0]), "scope");
}

#[test]
fn an_unimplemented_capability_is_answered_unsupported_without_state() {
    let mut net = contacts(scope());
    let omer = net.nodes[OMER].id();
    let r = task(
        &mut net,
        JOHN,
        TaskCommand::Request {
            to: omer,
            capability: UNKNOWN_CAP.into(),
            texts: vec!["do the thing".into()],
            input: Some(json!({"x": 1})),
            expires_in: None,
        },
    )
    .unwrap();
    let id = r["task_id"].as_str().unwrap().to_string();
    assert_eq!(exec_tasks(&net), 0);
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(st.len(), 1);
    let u = &st[0]["metadata"][A2A_UNSUPPORTED_KEY];
    assert_eq!(u["verb"], "task/request");
    assert_eq!(u["capability"], UNKNOWN_CAP);
    assert_eq!(st[0]["status"]["state"], "rejected");
    // The requester follows it and tells its human.
    assert_eq!(req_task(&net, &id).state, TaskState::Rejected);
    assert!(
        net.nodes[JOHN]
            .events_of("task")
            .iter()
            .any(|e| e["step"] == "unsupported")
    );
    // Counted for Omer's human too.
    assert!(
        net.nodes[OMER]
            .events_of("task")
            .iter()
            .any(|e| e["step"] == "unsupported")
    );
}

#[test]
fn an_unknown_key_in_the_data_is_unsupported_and_a_hashless_file_part_refused() {
    let mut net = contacts(scope());
    for (data, file) in [
        (
            json!({"rdv": "task/request", "capability": EXT_REQUEST, "colour": "red"}),
            false,
        ),
        (
            json!({"rdv": "task/request", "capability": EXT_REQUEST}),
            true,
        ),
    ] {
        let id = uuid();
        let mut parts = vec![json!({"kind": "data", "data": data})];
        if file {
            parts.push(json!({"kind": "file", "file": {"uri": "https://files.example/x", "name": "x.pdf"}}));
        }
        let p = json!({"type": "a2a/message", "message": {
            "kind": "message", "role": "agent", "messageId": uuid(), "taskId": id,
            "contextId": uuid(), "parts": parts}});
        let ev = net.forge(JOHN, OMER, &p);
        net.inject(OMER, &ev);
        let st = statuses(&net, OMER, JOHN, &id);
        assert_eq!(st.len(), 1, "one reply");
        if file {
            // §7.7: a FilePart with neither bytes nor sha256 and size is
            // refused (the files extension is supported, so not unsupported).
            assert_eq!(st[0]["status"]["state"], "rejected");
            assert_eq!(reason(&st[0]), "input");
        } else {
            assert_eq!(
                st[0]["metadata"][A2A_UNSUPPORTED_KEY]["verb"],
                "task/request"
            );
        }
    }
    assert_eq!(exec_tasks(&net), 0);
}

#[test]
fn input_outside_the_request_bounds_is_refused_before_any_state() {
    let mut net = contacts(scope());
    let id = uuid();
    let deep = json!({"data": {"a": {"b": {"c": {"d": {"e": 1}}}}}});
    forged_request(&mut net, EXT_REQUEST, &id, deep);
    assert_eq!(exec_tasks(&net), 0);
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(reason(&st[0]), "input");
    // Within the bounds: admitted.
    let id = uuid();
    forged_request(
        &mut net,
        EXT_REQUEST,
        &id,
        json!({"data": {"a": {"b": {"c": 1}}}}),
    );
    assert_eq!(exec_tasks(&net), 1);
}

#[test]
fn request_data_bounds() {
    let ok = json!({"a": {"b": {"c": [1, "x", true, null]}}});
    assert_eq!(check_data_bounds(&ok), Ok(()));
    // Four levels of nesting (the data object is the first) are fine,
    // five are not.
    assert_eq!(
        check_data_bounds(&json!({"a": {"b": {"c": {"d": 1}}}})),
        Ok(())
    );
    assert_eq!(
        check_data_bounds(&json!({"a": {"b": {"c": {"d": [1]}}}})),
        Err(BoundsError::TooDeep)
    );
    assert_eq!(check_data_bounds(&json!([1])), Err(BoundsError::NotObject));
    let many: serde_json::Map<String, Value> =
        (0..257).map(|i| (format!("k{i}"), json!(i))).collect();
    assert_eq!(
        check_data_bounds(&Value::Object(many)),
        Err(BoundsError::TooManyValues)
    );
    let fine: serde_json::Map<String, Value> =
        (0..256).map(|i| (format!("k{i}"), json!(i))).collect();
    assert_eq!(check_data_bounds(&Value::Object(fine)), Ok(()));
    assert_eq!(
        check_data_bounds(&json!({"s": "x".repeat(2001)})),
        Err(BoundsError::StringTooLong)
    );
    assert_eq!(check_data_bounds(&json!({"s": "é".repeat(2000)})), Ok(()));
    assert_eq!(check_data_bounds(&json!({"": 1})), Err(BoundsError::BadKey));
    assert_eq!(
        check_data_bounds(&json!({"k".repeat(65): 1})),
        Err(BoundsError::BadKey)
    );
    assert_eq!(check_data_bounds(&json!({"k".repeat(64): 1})), Ok(()));
    let big: serde_json::Map<String, Value> = (0..5)
        .map(|i| (format!("k{i}"), json!("y".repeat(1700))))
        .collect();
    assert_eq!(
        check_data_bounds(&Value::Object(big)),
        Err(BoundsError::TooLarge)
    );
}

// ---- limits and abuse through the engine (§5.3) -----------------------------

#[test]
fn over_the_capability_limit_rejected_for_rate_then_gross_abuse_revokes() {
    let mut net = contacts(scope());
    // 5/day on review/v1: five are admitted (each declined, so none waits).
    for _ in 0..5 {
        let id = uuid();
        forged_request(&mut net, EXT_REVIEW, &id, review_input());
        task(&mut net, OMER, TaskCommand::Decline { task: tref(&id) }).unwrap();
    }
    // The sixth is rejected for rate with no state and no prompt.
    let id = uuid();
    forged_request(&mut net, EXT_REVIEW, &id, review_input());
    assert_eq!(reason(&statuses(&net, OMER, JOHN, &id)[0]), "rate");
    assert!(
        !net.nodes[OMER]
            .agent
            .state
            .tasks
            .tasks
            .contains_key(&task_key(Role::Executor, &net.nodes[JOHN].id(), &id))
    );
    // 15 rejections in the window do not revoke; the 16th does.
    for _ in 0..14 {
        forged_request(&mut net, EXT_REVIEW, &uuid(), review_input());
    }
    let john = net.nodes[JOHN].id();
    assert!(net.nodes[OMER].agent.state.contact(&john).is_some());
    forged_request(&mut net, EXT_REVIEW, &uuid(), review_input());
    assert!(
        net.nodes[OMER].agent.state.contact(&john).is_none(),
        "revoked"
    );
    let ev = net.nodes[OMER].events_of("revoked");
    assert_eq!(ev.last().unwrap()["by"], "task-abuse");
    assert!(
        net.nodes[OMER]
            .events_of("task")
            .iter()
            .any(|e| e["step"] == "abuse")
    );
    // John's agent got the rdv/revoke.
    let omer = net.nodes[OMER].id();
    assert!(net.nodes[JOHN].agent.state.contact(&omer).is_none());
    // The counters were saved with the contact.
    let book = &net.nodes[OMER].agent.state.tasks.limits[&john];
    assert_eq!(book.caps[EXT_REVIEW].rejected.len(), 16);
}

/// A meeting proposal from John, forged like [`forged_request`].
fn forged_proposal(net: &mut Net, task_id: &str) {
    let p = json!({"type": "a2a/message", "message": {
    "kind": "message", "role": "agent",
    "messageId": uuid(), "taskId": task_id, "contextId": uuid(),
    "extensions": [EXT_MEETINGS],
    "parts": [{"kind": "data", "data": {"rdv": "meeting/propose",
        "slots": [{"start": "2026-12-03T19:00:00Z", "end": "2026-12-03T21:00:00Z"}]}}]}});
    let ev = net.forge(JOHN, OMER, &p);
    net.inject(OMER, &ev);
}

#[test]
fn one_24_hour_abuse_count_across_tasks_and_meeting_proposals() {
    // max_open only: each refusal counts towards the 24-hour figure alone
    // (§5.3 (b)), so only the shared figure can revoke here.
    let mut net = contacts(json!({
        "may_initiate": true,
        "may_propose_meetings": true,
        "max_frequency": "1000/day",
        "invoke": {
            EXT_REVIEW: { "max_open": 1 },
            EXT_MEETINGS: { "max_open": 1 },
            EXT_MEETING_CANCEL: {},
        }
    }));
    let john = net.nodes[JOHN].id();
    // One of each is admitted and stays open.
    forged_request(&mut net, EXT_REVIEW, &uuid(), review_input());
    forged_proposal(&mut net, &uuid());
    for _ in 0..30 {
        forged_request(&mut net, EXT_REVIEW, &uuid(), review_input());
    }
    for _ in 0..20 {
        let id = uuid();
        forged_proposal(&mut net, &id);
        assert!(
            !net.nodes[OMER]
                .agent
                .state
                .meetings
                .tasks
                .values()
                .any(|t| t.task_id == id),
            "a refused proposal keeps no state"
        );
    }
    // 50 rejections in 24 hours, tasks and proposals together: not yet.
    assert!(net.nodes[OMER].agent.state.contact(&john).is_some());
    let book = &net.nodes[OMER].agent.state.tasks.limits[&john];
    assert_eq!(book.rejected.len(), 50);
    // The 51st, a proposal, revokes.
    forged_proposal(&mut net, &uuid());
    assert!(
        net.nodes[OMER].agent.state.contact(&john).is_none(),
        "revoked"
    );
    // Why, kept with the contact and told in the events, apart from (a).
    let ended = net.nodes[OMER].agent.state.contacts[&john]
        .ended
        .clone()
        .unwrap();
    assert_eq!(ended.by, "task-abuse");
    let why: Value = serde_json::from_str(ended.reason.as_deref().unwrap()).unwrap();
    assert_eq!(why, json!({"rule": "day", "rejected": 51}));
    let rev = net.nodes[OMER].events_of("revoked");
    assert_eq!(rev.last().unwrap()["by"], "task-abuse");
    assert_eq!(
        rev.last().unwrap()["reason"].as_str().unwrap(),
        ended.reason.as_deref().unwrap()
    );
    let abuse = net.nodes[OMER].events_of("task");
    let abuse = abuse.iter().rfind(|e| e["step"] == "abuse").unwrap();
    assert_eq!(abuse["capability"], EXT_MEETINGS);
    // John's agent got the rdv/revoke.
    let omer = net.nodes[OMER].id();
    assert!(net.nodes[JOHN].agent.state.contact(&omer).is_none());
}

#[test]
fn senders_hold_a_task_the_peers_grant_would_refuse() {
    let mut net = contacts(scope());
    let omer = net.nodes[OMER].id();
    for _ in 0..5 {
        review(&mut net);
    }
    // The sixth would break 5/day: refused locally, nothing sent.
    let before = sent(&net, JOHN, OMER).len();
    let e = task(
        &mut net,
        JOHN,
        TaskCommand::Request {
            to: omer,
            capability: EXT_REVIEW.into(),
            texts: vec!["again".into()],
            input: Some(review_input()),
            expires_in: None,
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Refused(m) if m.starts_with("rate")),
        "{e}"
    );
    assert_eq!(sent(&net, JOHN, OMER).len(), before);
}

// ---- bounds of §7.4 --------------------------------------------------------------

#[test]
fn waiting_for_the_human_is_bounded_per_peer_and_the_newcomer_is_refused_busy() {
    let mut net = contacts(scope());
    for _ in 0..4 {
        forged_request(&mut net, EXT_REQUEST, &uuid(), json!({"data": {}}));
    }
    let id = uuid();
    forged_request(&mut net, EXT_REQUEST, &id, json!({"data": {}}));
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(st[0]["status"]["state"], "rejected");
    assert_eq!(reason(&st[0]), "busy");
    let waiting = net.nodes[OMER]
        .agent
        .state
        .tasks
        .tasks
        .values()
        .filter(|t| t.waits_for_human())
        .count();
    assert_eq!(waiting, 4);
}

#[test]
fn a_cancel_that_overtakes_its_request_leaves_a_tombstone() {
    let mut net = contacts(scope());
    let id = uuid();
    let cancel = json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": uuid(), "taskId": id,
        "contextId": uuid(), "extensions": [EXT_TASKS, EXT_REVIEW],
        "parts": [{"kind": "data", "data": {"rdv": "rdv/cancel"}}]}});
    let ev = net.forge(JOHN, OMER, &cancel);
    net.inject(OMER, &ev);
    forged_request(&mut net, EXT_REVIEW, &id, review_input());
    let t = exec_task(&net, &id);
    assert_eq!(t.state, TaskState::Canceled);
    assert!(t.gate.is_none(), "nothing waits for the human");
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(st.last().unwrap()["status"]["state"], "canceled");
}

#[test]
fn task_input_only_while_input_required() {
    let mut net = contacts(scope());
    let id = review(&mut net);
    let e = task(
        &mut net,
        JOHN,
        TaskCommand::Input {
            task: tref(&id),
            texts: vec!["more".into()],
            input: None,
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Refused(_)), "{e}");
    let code = issue_code(&mut net, &id);
    approve(&mut net, &id, &code);
    task(
        &mut net,
        OMER,
        TaskCommand::Submit {
            task: tref(&id),
            submit: Submit::Question {
                texts: vec!["Which quarter?".into()],
                data: None,
            },
        },
    )
    .unwrap();
    let code = issue_code(&mut net, &id);
    release(&mut net, &id, &code);
    assert_eq!(req_task(&net, &id).state, TaskState::InputRequired);
    task(
        &mut net,
        JOHN,
        TaskCommand::Input {
            task: tref(&id),
            texts: vec!["Q4".into()],
            input: Some(review_input()),
        },
    )
    .unwrap();
    assert_eq!(exec_task(&net, &id).state, TaskState::Working);
    assert_eq!(req_task(&net, &id).state, TaskState::Working);
}

#[test]
fn the_requester_follows_the_executor_forward_only() {
    let mut net = contacts(scope());
    let id = review(&mut net);
    task(&mut net, OMER, TaskCommand::Decline { task: tref(&id) }).unwrap();
    let ctx_id = req_task(&net, &id).context_id;
    for state in ["working", "submitted", "completed"] {
        let p = json!({"type": "a2a/task-update", "update": {
            "kind": "status-update", "taskId": id, "contextId": ctx_id,
            "status": {"state": state}, "final": false}});
        let ev = net.forge(OMER, JOHN, &p);
        net.inject(JOHN, &ev);
        assert_eq!(req_task(&net, &id).state, TaskState::Rejected, "{state}");
    }
}

#[test]
fn expiry_ends_a_waiting_task_and_finished_tasks_are_pruned() {
    let mut net = contacts(scope());
    let omer = net.nodes[OMER].id();
    let r = task(
        &mut net,
        JOHN,
        TaskCommand::Request {
            to: omer,
            capability: EXT_REVIEW.into(),
            texts: vec!["soon".into()],
            input: Some(review_input()),
            expires_in: Some(3600),
        },
    )
    .unwrap();
    let id = r["task_id"].as_str().unwrap().to_string();
    net.advance(3601);
    let now = net.now;
    let out = net.nodes[OMER]
        .handle(rdv_agent_core::Input::Tick, now)
        .unwrap();
    net.carry(OMER, out.effects);
    let t = exec_task(&net, &id);
    assert_eq!(t.state, TaskState::Rejected);
    assert_eq!(t.reason.map(|r| r.as_str()), Some("expired"));
    assert_eq!(req_task(&net, &id).state, TaskState::Rejected);
    net.advance(31 * 86_400);
    let now = net.now;
    net.nodes[OMER]
        .handle(rdv_agent_core::Input::Tick, now)
        .unwrap();
    assert_eq!(exec_tasks(&net), 0, "pruned after 30 days");
}

// ---- auto_approve: all (§5.5.1) --------------------------------------------

fn owner(net: &mut Net, c: OwnerCommand) -> rdv_agent_core::Result<Value> {
    net.cmd(OMER, Command::Owner(c))
}

fn auto_on(net: &mut Net, pass: &str) -> Value {
    let john = net.nodes[JOHN].id();
    owner(
        net,
        OwnerCommand::AutoApproveOn {
            contact: john,
            until: None,
            passphrase: Secret::new(pass),
            via: "terminal".into(),
        },
    )
    .unwrap()
}

#[test]
fn auto_approve_passes_both_gates_and_writes_the_audit_log() {
    let mut net = contacts(scope());
    owner(
        &mut net,
        OwnerCommand::SecretSet {
            passphrase: Secret::new(PASS),
        },
    )
    .unwrap();
    let r = auto_on(&mut net, PASS);
    assert_eq!(r["auto_approve"], "set");
    let id = review(&mut net);
    let t = exec_task(&net, &id);
    assert_eq!(t.state, TaskState::Working, "the start gate passed");
    assert_eq!(t.started_by.as_deref(), Some("auto-approve"));
    let r = submit_review(&mut net, &id, 1);
    assert_eq!(r["released"], true);
    assert_eq!(req_task(&net, &id).state, TaskState::Completed);
    let audit: Vec<_> = net.nodes[OMER]
        .agent
        .state
        .tasks
        .audit
        .values()
        .cloned()
        .collect();
    let passes: Vec<_> = audit.iter().filter(|l| l.action == "pass").collect();
    assert_eq!(passes.len(), 2);
    assert_eq!(passes[0].gate.as_deref(), Some("start"));
    assert_eq!(passes[1].gate.as_deref(), Some("release"));
    assert!(passes[1].left_sha256.is_some() && passes[1].left_bytes.unwrap() > 0);
    assert_eq!(passes[0].task_id.as_deref(), Some(id.as_str()));
    assert!(
        audit
            .iter()
            .any(|l| l.action == "set" && l.via == "terminal")
    );
    // Peer text is never stored in the log.
    let text = serde_json::to_string(&audit).unwrap();
    assert!(!text.contains("Q4 plan") && !text.contains("Section 3"));
}

#[test]
fn turning_auto_approve_off_is_audited_with_where_it_was_turned_off() {
    let mut net = contacts(scope());
    owner(
        &mut net,
        OwnerCommand::SecretSet {
            passphrase: Secret::new(PASS),
        },
    )
    .unwrap();
    assert_eq!(auto_on(&mut net, PASS)["auto_approve"], "set");
    let john = net.nodes[JOHN].id();
    let r = owner(
        &mut net,
        OwnerCommand::AutoApproveOff {
            contact: john.clone(),
            via: "mcp".into(),
        },
    )
    .unwrap();
    assert_eq!(r["was_on"], true);
    assert!(!net.nodes[OMER].agent.state.tasks.auto.contains_key(&john));
    let offs: Vec<_> = net.nodes[OMER]
        .agent
        .state
        .tasks
        .audit
        .values()
        .filter(|l| l.action == "off")
        .cloned()
        .collect();
    assert_eq!(offs.len(), 1);
    assert_eq!(offs[0].via, "mcp");
    assert_eq!(offs[0].contact, john);
}

#[test]
fn auto_approve_needs_the_owner_passphrase_and_locks_out_after_three_misses() {
    let mut net = contacts(scope());
    let john = net.nodes[JOHN].id();
    // No passphrase set: refused.
    let e = owner(
        &mut net,
        OwnerCommand::AutoApproveOn {
            contact: john.clone(),
            until: None,
            passphrase: Secret::new(PASS),
            via: "terminal".into(),
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Refused(_)));
    owner(
        &mut net,
        OwnerCommand::SecretSet {
            passphrase: Secret::new(PASS),
        },
    )
    .unwrap();
    assert_eq!(
        auto_on(&mut net, "wrong one, 1")["passphrase"]["verdict"],
        "wrong"
    );
    assert_eq!(
        auto_on(&mut net, "wrong one, 2")["passphrase"]["verdict"],
        "wrong"
    );
    assert_eq!(
        auto_on(&mut net, "wrong one, 3")["passphrase"]["verdict"],
        "locked"
    );
    // Locked: even the right passphrase is refused for now.
    assert_eq!(auto_on(&mut net, PASS)["passphrase"]["verdict"], "locked");
    assert!(net.nodes[OMER].agent.state.tasks.auto.is_empty());
    let id = review(&mut net);
    assert_eq!(
        exec_task(&net, &id).state,
        TaskState::Submitted,
        "still gated"
    );
    // The passphrase is stored only as a hash.
    let recs = serde_json::to_string(&net.nodes[OMER].record_list()).unwrap();
    assert!(!recs.contains(PASS));
}

#[test]
fn auto_approve_is_bound_to_the_grant_and_its_integrity() {
    let mut net = contacts(scope());
    owner(
        &mut net,
        OwnerCommand::SecretSet {
            passphrase: Secret::new(PASS),
        },
    )
    .unwrap();
    auto_on(&mut net, PASS);
    // A setting whose record was changed on disk (here: more
    // capabilities) fails its MAC: it approves nothing and is turned off.
    let john = net.nodes[JOHN].id();
    let key = (rdv_agent_core::record::Table::Owner, format!("auto:{john}"));
    let mut v = net.nodes[OMER].records[&key].clone();
    v["capabilities"] = json!([
        EXT_REVIEW,
        EXT_REQUEST,
        UNKNOWN_CAP,
        "https://example.org/more"
    ]);
    net.nodes[OMER].records.insert(key.clone(), v);
    net.nodes[OMER].reload();
    let id = review(&mut net);
    assert_eq!(exec_task(&net, &id).state, TaskState::Submitted);
    assert!(net.nodes[OMER].agent.state.tasks.auto.is_empty());
    let ev = net.nodes[OMER].events_of("auto_approve");
    assert_eq!(ev.last().unwrap()["reason"], "integrity");
    // Revoking the contact ends it too (bound to the grant it was set on).
    auto_on(&mut net, PASS);
    net.cmd(OMER, Command::Revoke { id: john.clone() }).unwrap();
    let a = net.nodes[OMER]
        .agent
        .state
        .tasks
        .auto
        .get(&john)
        .cloned()
        .unwrap();
    let seed = net.nodes[OMER].key;
    assert!(a.standing(None, net.now.unix_timestamp(), &seed).is_err());
}

#[test]
fn auto_approve_never_covers_what_the_spec_excludes() {
    for a in [
        Action::CreateContact,
        Action::Group,
        Action::Grant,
        Action::AttachOwnerFiles,
        Action::CancelMeeting,
        Action::ChangeAutoApprove,
    ] {
        assert!(never_covered(a), "{a:?}");
    }
    assert!(!never_covered(Action::TaskGate));
    assert!(!never_covered(Action::MeetingConfirm));
    let mut net = contacts(scope());
    owner(
        &mut net,
        OwnerCommand::SecretSet {
            passphrase: Secret::new(PASS),
        },
    )
    .unwrap();
    auto_on(&mut net, PASS);
    // A capability the grant does not allow is not covered either.
    let id = uuid();
    forged_request(&mut net, "https://example.org/ext/other/v1", &id, json!({}));
    assert_eq!(exec_tasks(&net), 0);
    let st = statuses(&net, OMER, JOHN, &id);
    assert_eq!(st[0]["status"]["state"], "rejected");
}

#[test]
fn a_standing_policy_never_waives_a_free_form_start() {
    let mut net = contacts(scope());
    let john = net.nodes[JOHN].id();
    task(
        &mut net,
        OMER,
        TaskCommand::Policy {
            contact: john,
            capability: EXT_REVIEW.into(),
            policy: rdv_agent_core::gate::StandingPolicy {
                auto_start: true,
                auto_release: true,
            },
        },
    )
    .unwrap();
    let id = review(&mut net);
    assert_eq!(
        exec_task(&net, &id).state,
        TaskState::Submitted,
        "free-form waits"
    );
    let code = issue_code(&mut net, &id);
    approve(&mut net, &id, &code);
    // Release may be covered by the policy.
    assert_eq!(submit_review(&mut net, &id, 2)["released"], true);
    assert_eq!(req_task(&net, &id).state, TaskState::Completed);
}

#[test]
fn the_parser_reads_only_task_verbs() {
    let meeting = json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": uuid(), "taskId": uuid(),
        "contextId": uuid(), "parts": [{"kind": "data", "data": {"rdv": "meeting/propose", "slots": []}}]}});
    assert_eq!(parse_payload(&meeting), Parsed::NotTask);
    let unknown_state = json!({"type": "a2a/task-update", "update": {
        "kind": "status-update", "taskId": uuid(), "contextId": uuid(),
        "status": {"state": "auth-required"}, "final": false}});
    assert!(matches!(
        parse_payload(&unknown_state),
        Parsed::Malformed(_)
    ));
}

#[test]
fn the_gate_digests_cover_what_the_human_was_shown() {
    use rdv_agent_core::gate::{release_digest, start_digest};
    use rdv_agent_core::task::Draft;
    let mut net = contacts(scope());
    let id = review(&mut net);
    let t = exec_task(&net, &id);
    let d = start_digest(&t);
    let other_peer = net.nodes[OMER].id();
    type Change = Box<dyn Fn(&mut rdv_agent_core::task::Task)>;
    let changes: Vec<(&str, Change)> = vec![
        ("peer", Box::new(move |t| t.peer = other_peer.clone())),
        ("contextId", Box::new(|t| t.context_id = uuid())),
        ("taskId", Box::new(|t| t.task_id = uuid())),
        (
            "capability",
            Box::new(|t| t.capability = EXT_REQUEST.into()),
        ),
        (
            "created",
            Box::new(|t| t.created += time::Duration::seconds(1)),
        ),
        (
            "input",
            Box::new(|t| t.input = Some(json!({"focus": ["numbers"]}))),
        ),
        ("no input", Box::new(|t| t.input = None)),
        ("a text part", Box::new(|t| t.texts[0].push('!'))),
        (
            "another text part",
            Box::new(|t| t.texts.push("and this".into())),
        ),
    ];
    for (what, f) in changes {
        let mut x = t.clone();
        f(&mut x);
        assert_ne!(start_digest(&x), d, "the start digest ignores the {what}");
    }
    // What the human is not shown does not change it.
    let mut x = t.clone();
    x.seen.push(uuid());
    assert_eq!(start_digest(&x), d);
    let a = Draft::Artifact {
        artifact: json!({"artifactId": uuid(), "parts": [{"kind": "text", "text": "ok"}]}),
        complete: true,
        sources: Vec::new(),
    };
    let r = release_digest(&t, &a);
    assert_ne!(r, d, "start and release digests are separated");
    let b = Draft::Artifact {
        artifact: json!({"artifactId": uuid(), "parts": [{"kind": "text", "text": "ok"}]}),
        complete: false,
        sources: Vec::new(),
    };
    assert_ne!(
        release_digest(&t, &b),
        r,
        "the release digest ignores the draft"
    );
    let mut x = t.clone();
    x.peer = net.nodes[OMER].id();
    assert_ne!(
        release_digest(&x, &a),
        r,
        "the release digest ignores the peer"
    );
    let mut x = t.clone();
    x.task_id = uuid();
    assert_ne!(
        release_digest(&x, &a),
        r,
        "the release digest ignores the task"
    );
}
