//! The dinner negotiation end to end (SPEC §7.2–§7.4, §5.5; §12 v0.2 "A2A
//! dinner negotiation over a real relay"): two real `rdv` agents, each with
//! its own home and listener, against `rdv-dev-relay` and nostr-rs-relay
//! (`RDV_NOSTR_RS_RELAY`). Bob proposes two evenings; Alice's calendar (an
//! .ics file) is busy on the first, so her agent holds the second and waits
//! for her; she confirms with the code `rdv dinner list` shows her; Bob's
//! agent holds it and waits for him; he confirms; both sides are asserted
//! completed on the same slot. Refused confirmations (a wrong code, a code
//! for a meeting that changed, another agent's code) confirm nothing.
//!
//! The harness (relays, homes, bounded polls) is agents.rs, shared with
//! agent_journeys.rs. Nothing sleeps to assert timing; every wait is a
//! bounded poll.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use serde_json::Value;

mod agents;
use agents::*;

// ---- the dinner --------------------------------------------------------------

/// An instant `days` from now at `hour`:00 UTC, as RFC 3339.
fn evening(days: u64, hour: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let day = now / 86_400 + days;
    let t = rdv_proto::time::from_unix((day * 86_400 + hour * 3600) as i64).unwrap();
    rdv_proto::time::format_time(t)
}

fn ics_stamp(rfc3339: &str) -> String {
    rfc3339.replace(['-', ':'], "")
}

/// The code `rdv dinner list` shows (text mode) for task `id`; each
/// listing issues a new one, so the code shown before stops working.
fn shown_code(a: &Agent, id: &str) -> String {
    let r = a.text(&["dinner", "list"]);
    assert_eq!(r.code, 0, "{}: {}", r.what, r.stderr);
    let marker = format!("rdv dinner confirm {id} --code ");
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains(&marker))
        .unwrap_or_else(|| panic!("{}: no code for {id} in:\n{}", a.name, r.stdout));
    let code = line
        .split(&marker)
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .trim()
        .to_string();
    // A confirm phrase: three words and three digits (§5.5, phrase.rs).
    let parts: Vec<&str> = code.split('-').collect();
    assert_eq!(parts.len(), 4, "{line}");
    assert!(
        parts[3].len() == 3 && parts[3].bytes().all(|b| b.is_ascii_digit()),
        "{line}"
    );
    code
}

fn meeting(a: &Agent, id: &str) -> Value {
    let v = a.ok(&["dinner", "list"]);
    v["meetings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["task_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{}: no meeting {id}: {v}", a.name))
}

/// A confirm that must be refused: exit 1, the refusal as data, and the
/// meeting unchanged.
fn refused_confirm(a: &Agent, id: &str, code: &str, why: &str) {
    let before = meeting(a, id);
    let r = a.rdv(&["dinner", "confirm", id, "--code", code]);
    assert_ne!(r.code, 0, "{} should be refused: {}", r.what, r.stdout);
    let v = r.lines().pop().unwrap();
    assert_eq!(v["confirmed"], false, "{v}");
    assert_eq!(v["refusal"], why, "{v}");
    assert!(r.stderr.contains(why), "{}", r.stderr);
    let after = meeting(a, id);
    assert_eq!(before["state"], after["state"]);
    assert_eq!(before["held"], after["held"]);
    assert_eq!(before["waiting_for_you"], after["waiting_for_you"]);
}

fn dinner_journey(relay: &Relay) {
    let (mut alice, mut bob) = contacts(relay);
    let e1 = (evening(2, 19), evening(2, 21));
    let e2 = (evening(3, 19), evening(3, 21));
    // Alice's calendar: busy on the first evening (a title she never shares).
    let ics = alice.dir.path().join("alice.ics");
    std::fs::write(
        &ics,
        format!(
            "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//e2e//EN\r\nBEGIN:VEVENT\r\nUID:1\r\n\
             SUMMARY:Private appointment\r\nDTSTART:{}\r\nDTEND:{}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
            ics_stamp(&e1.0),
            ics_stamp(&e1.1)
        ),
    )
    .unwrap();
    let c = alice.ok(&["dinner", "calendar", ics.to_str().unwrap()]);
    assert_eq!(c["busy_intervals"], 1, "{c}");

    // Alice cannot propose to Bob: he has not granted her back (§7.4).
    let err = alice.fail(&[
        "dinner",
        "propose",
        "Bob",
        "--slot",
        &format!("{}/{}", e1.0, e1.1),
    ]);
    assert!(
        err.contains("does not let this agent propose meetings"),
        "{err}"
    );

    let p = bob.ok(&[
        "dinner",
        "propose",
        "Alice",
        "--slot",
        &format!("{}/{}", e1.0, e1.1),
        "--slot",
        &format!("{}/{}", e2.0, e2.1),
        "--place",
        "Chez Nous",
    ]);
    let id = p["task_id"].as_str().unwrap().to_string();
    assert_eq!(p["state"], "submitted", "{p}");

    // Alice's agent holds the free evening and waits for her.
    let tid = id.clone();
    alice.wait_event("the dinner waiting for Alice", |e| {
        e["kind"] == "meeting" && e["task_id"] == tid.as_str() && e["step"] == "confirm-needed"
    });
    let m = meeting(&alice, &id);
    assert_eq!(m["held"]["slot"]["start"], e2.0.as_str(), "{m}");
    assert_eq!(m["held"]["kind"], "tentative", "{m}");
    assert_eq!(m["waiting_for_you"]["stage"], "accept", "{m}");
    assert_eq!(m["place"]["untrusted_peer_text"], "Chez Nous", "{m}");
    // The code is for the human's terminal only: never in --json.
    let code = shown_code(&alice, &id);
    let listed = alice.rdv(&["dinner", "list"]);
    assert!(
        !listed.stdout.contains(&code),
        "the code leaked into --json"
    );
    let inbox = alice.inbox();
    assert!(
        !inbox.iter().any(|e| e.to_string().contains(&code)),
        "the code is in an event"
    );
    assert!(
        !inbox
            .iter()
            .any(|e| e.to_string().contains("Private appointment"))
    );

    // A wrong code confirms nothing.
    refused_confirm(&alice, &id, "otter-tiger-eagle-123", "wrong_code");
    // Alice confirms.
    let v = alice.ok(&["dinner", "confirm", &id, "--code", &code]);
    assert_eq!(v["confirmed"], true, "{v}");
    assert_eq!(v["stage"], "accept", "{v}");
    // The same code again: the meeting it was shown for changed (the step
    // was taken), so it confirms nothing.
    refused_confirm(&alice, &id, &code, "meeting_changed");

    // Bob's agent got the accept: it holds the evening and waits for him.
    bob.wait_event("the accept reaching Bob", |e| {
        e["kind"] == "meeting" && e["task_id"] == tid.as_str() && e["step"] == "confirm-needed"
    });
    let m = meeting(&bob, &id);
    assert_eq!(m["waiting_for_you"]["stage"], "confirm", "{m}");
    assert_eq!(m["held"]["slot"]["start"], e2.0.as_str(), "{m}");
    // Nothing confirms before Bob is shown a code; Alice's code is not
    // Bob's (another agent, peer and step).
    refused_confirm(&bob, &id, &code, "no_code");
    let bcode = shown_code(&bob, &id);
    assert_ne!(bcode, code);
    refused_confirm(&bob, &id, &code, "wrong_code");
    let v = bob.ok(&["dinner", "confirm", &id, "--code", &bcode]);
    assert_eq!(v["confirmed"], true, "{v}");

    // Both sides: completed, on the same evening, held as agreed.
    alice.wait_event("the confirm reaching Alice", |e| {
        e["kind"] == "meeting" && e["task_id"] == tid.as_str() && e["step"] == "completed"
    });
    for a in [&alice, &bob] {
        let m = meeting(a, &id);
        assert_eq!(m["state"], "completed", "{}: {m}", a.name);
        assert_eq!(m["agreed"]["start"], e2.0.as_str(), "{}: {m}", a.name);
        assert_eq!(m["agreed"]["end"], e2.1.as_str(), "{}: {m}", a.name);
        assert_eq!(m["held"]["kind"], "agreed", "{}: {m}", a.name);
    }
    alice.stop_listener();
    bob.stop_listener();
}

#[test]
fn a_dinner_negotiation_over_the_dev_relay() {
    dinner_journey(&Relay::dev("dinner"));
}

#[test]
fn a_dinner_negotiation_over_nostr_rs_relay() {
    let Some(relay) = Relay::nostr_rs("a_dinner_negotiation_over_nostr_rs_relay") else {
        return;
    };
    dinner_journey(&relay);
}
