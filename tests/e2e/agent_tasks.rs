//! The document review of the design's worked example (A.9) end to end
//! (SPEC §7.6, §5.5, §5.3): two real `rdv` agents, each with its own home
//! and listener, against `rdv-dev-relay` and nostr-rs-relay
//! (`RDV_NOSTR_RS_RELAY`). Alice granted Bob review/v1; Bob asks Alice's
//! agent for a review; her agent stores it submitted and waits for her
//! (the start gate); she approves with the code `rdv task list` shows her
//! (a wrong code approves nothing); she drafts the review and releases it
//! with the code shown for that draft (the release gate); Bob's agent
//! shows the artifact, validated, and the task completed. Asserted on both
//! sides. Auto-approve is refused without an interactive terminal. Files
//! in tasks (§7.7) are agent_files.rs's journey; this request carries the
//! text and the input only.
//!
//! The harness (relays, homes, bounded polls) is agents.rs, shared with
//! agent_journeys.rs. Nothing sleeps to assert timing; every wait is a
//! bounded poll.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use serde_json::Value;

mod agents;
use agents::*;

// ---- the review ------------------------------------------------------------

const REVIEW: &str = "https://rendezvous.nesher.co/ext/review/v1";

/// The code `rdv task list` shows (text mode) for the gate `verb` of task `id`.
fn shown_code(a: &Agent, verb: &str, id: &str) -> String {
    let r = a.text(&["task", "list"]);
    assert_eq!(r.code, 0, "{}: {}", r.what, r.stderr);
    let marker = format!("rdv task {verb} {id} --code ");
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains(&marker))
        .unwrap_or_else(|| panic!("{}: no {verb} code for {id} in:\n{}", a.name, r.stdout));
    line.split(&marker).nth(1).unwrap().trim().to_string()
}

fn task_of(a: &Agent, id: &str) -> Value {
    let v = a.ok(&["task", "list", "--all"]);
    v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{}: no task {id}: {v}", a.name))
}

fn review_journey(relay: &Relay) {
    let (mut alice, mut bob) = contacts_with(relay, &["--invoke", REVIEW]);

    // 1. Bob's agent asks Alice's for a review (deny by default: only
    // because her grant lists review/v1).
    let r = bob.ok(&[
        "task",
        "request",
        "Alice",
        "review",
        "--text",
        "Could Alice look over the Q4 plan before Wednesday? https://evil.example/x",
        "--input",
        r#"{"focus":["clarity","numbers"],"due":"2030-10-28T17:00:00Z"}"#,
    ]);
    let id = r["task_id"].as_str().unwrap().to_string();
    assert_eq!(r["state"], "submitted", "{r}");
    // A capability her grant does not list is refused before it leaves.
    let err = bob.fail(&["task", "request", "Alice", "request", "--text", "anything"]);
    assert!(err.contains("scope"), "{err}");

    // 2. Gate checks on Alice's agent: stored submitted, waiting for her.
    let tid = id.clone();
    let e = alice.wait_event("the review request", |e| {
        e["kind"] == "task" && e["task_id"] == tid.as_str() && e["step"] == "received"
    });
    assert_eq!(e["waiting_for_you"], "start", "{e}");
    assert_eq!(e["capability"], REVIEW, "{e}");
    // Peer text is marked, and a link in it is only shown.
    assert!(
        e["text"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("Q4 plan"),
        "{e}"
    );
    assert_eq!(task_of(&bob, &id)["state"], "submitted");

    // 3. Start gate: a wrong code approves nothing; the code shown does.
    let code = shown_code(&alice, "approve", &id);
    let listed = alice.rdv(&["task", "list"]);
    assert!(
        !listed.stdout.contains(&code),
        "the code leaked into --json"
    );
    assert!(
        !alice.inbox().iter().any(|e| e.to_string().contains(&code)),
        "the code is in an event"
    );
    let v = alice.ok(&["task", "approve", &id, "--code", "otter-otter-otter-000"]);
    assert_eq!(v["result"]["verdict"], "wrong_code", "{v}");
    assert_eq!(task_of(&alice, &id)["state"], "submitted");
    // The code was replaced by a new one each time she looked: the newest.
    let code = shown_code(&alice, "approve", &id);
    let v = alice.ok(&["task", "approve", &id, "--code", &code]);
    assert_eq!(v["result"]["verdict"], "approved", "{v}");
    assert_eq!(v["state"], "working", "{v}");
    // Single use.
    let v = alice.ok(&["task", "approve", &id, "--code", &code]);
    assert_eq!(v["result"]["verdict"], "not_open", "{v}");
    bob.wait_event("working", |e| {
        e["kind"] == "task" && e["task_id"] == tid.as_str() && e["state"] == "working"
    });

    // 4–5. Work, then the release gate: nothing leaves before she releases.
    let v = alice.ok(&[
        "task",
        "submit",
        &id,
        "--text",
        "Section 3's totals don't add up.",
        "--data",
        r#"{"rdv":"review/result","verdict":"changes-requested","comments":3}"#,
        "--name",
        "review",
    ]);
    assert_eq!(v["released"], false, "{v}");
    assert_eq!(v["waiting_for_you"], "release", "{v}");
    let rcode = shown_code(&alice, "release", &id);
    let v = alice.ok(&["task", "release", &id, "--code", &rcode]);
    assert_eq!(v["result"]["verdict"], "approved", "{v}");
    assert_eq!(v["state"], "completed", "{v}");

    // 6–7. Bob's side: the artifact (its data validated) and the end.
    let art = bob.wait_event("the review", |e| {
        e["kind"] == "task" && e["task_id"] == tid.as_str() && e["step"] == "artifact"
    });
    assert!(
        art["text"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("Section 3"),
        "{art}"
    );
    assert!(
        art["data"]["untrusted_peer_text"]
            .as_str()
            .unwrap()
            .contains("changes-requested"),
        "{art}"
    );
    bob.wait_event("completed", |e| {
        e["kind"] == "task" && e["task_id"] == tid.as_str() && e["state"] == "completed"
    });
    let t = task_of(&bob, &id);
    assert_eq!(t["state"], "completed", "{t}");
    assert_eq!(t["role"], "requester", "{t}");
    assert_eq!(t["artifacts"], 1, "{t}");
    let read = bob.ok(&["task", "read", &id]);
    let parts = read["artifacts"][0]["parts"].as_array().unwrap();
    assert!(parts.iter().any(|p| {
        p["data"]["untrusted_peer_text"]
            .as_str()
            .is_some_and(|s| s.contains("\"comments\":3"))
    }));
    // Alice's side: completed, started by her code.
    let t = task_of(&alice, &id);
    assert_eq!(t["state"], "completed", "{t}");
    assert_eq!(t["started_by"], "code", "{t}");
    assert_eq!(t["role"], "executor", "{t}");

    // Auto-approve needs the owner at an interactive terminal (§5.5.1).
    let err = alice.fail(&["contact", "auto-approve", "Bob", "all", "--until", "7d"]);
    assert!(err.contains("interactive terminal"), "{err}");
    let err = alice.fail(&["owner-secret", "set"]);
    assert!(err.contains("interactive terminal"), "{err}");
    // Nothing was passed without asking.
    let audit = alice.rdv(&["audit"]);
    assert_eq!(audit.code, 0, "{}", audit.stderr);
    assert!(audit.lines().is_empty(), "{}", audit.stdout);

    alice.stop_listener();
    bob.stop_listener();
}

#[test]
fn a_document_review_over_the_dev_relay() {
    review_journey(&Relay::dev("review"));
}

#[test]
fn a_document_review_over_nostr_rs_relay() {
    let Some(relay) = Relay::nostr_rs("a_document_review_over_nostr_rs_relay") else {
        return;
    };
    review_journey(&relay);
}
