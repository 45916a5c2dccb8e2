//! Files in tasks end to end (SPEC §7.7, §5.5): two real `rdv` agents over
//! `rdv-dev-relay`. Bob prepares a note of his (inline, so nothing needs a
//! file store) and asks Alice's agent with it: the request is held until
//! Bob releases it with the code `rdv task list` shows him. Alice's agent
//! shows the file at her start gate and will not fetch it before she
//! approves; then `rdv file fetch` saves it in her quarantine (mode 600,
//! a derived name), its text marked as peer-written. Her result carries a
//! file of hers, which waits for her release; Bob fetches it from the
//! result. A path inside a home is refused, and the direct-transfer
//! setting is off and needs the terminal.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;

use serde_json::Value;

mod agents;
use agents::*;

const REQUEST: &str = "https://rendezvous.nesher.co/ext/request/v1";

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

fn prepare_inline(a: &Agent, name: &str, text: &str) -> String {
    let path = a.dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let p = a.ok(&[
        "file",
        "prepare",
        path.to_str().unwrap(),
        "--inline",
        "--type",
        "text/plain",
    ]);
    assert_eq!(p["inline"], true, "{p}");
    p["sha256"].as_str().unwrap().to_string()
}

fn fetched(v: &Value) -> (std::path::PathBuf, Value) {
    let f = v["fetched"][0].clone();
    (std::path::PathBuf::from(f["saved"].as_str().unwrap()), f)
}

#[test]
fn files_in_a_task_over_the_dev_relay() {
    let relay = Relay::dev("files");
    let (mut alice, mut bob) = contacts_with(&relay, &["--invoke", REQUEST]);

    // Paths inside a home never leave; direct transfer is off, terminal only.
    let key = bob.home.join("agent.key");
    let err = bob.fail(&["file", "prepare", key.to_str().unwrap(), "--inline"]);
    assert!(err.contains("inside a Rendezvous home"), "{err}");
    let err = alice.fail(&["file", "direct-transfer", "on"]);
    assert!(err.contains("interactive terminal"), "{err}");
    assert_eq!(
        alice.ok(&["file", "direct-transfer", "status"])["direct_transfer"],
        false
    );

    // 1. Bob's request with his note is held for his release.
    let sha = prepare_inline(&bob, "note.txt", "Totals are in section 3.");
    let r = bob.ok(&[
        "task",
        "request",
        "Alice",
        "request",
        "--text",
        "Please check my note",
        "--file",
        &sha,
    ]);
    assert_eq!(r["sent"], false, "{r}");
    assert_eq!(r["waiting_for_you"], "release", "{r}");
    let id = r["task_id"].as_str().unwrap().to_string();
    let listed = bob.text(&["task", "list"]);
    assert!(
        listed
            .stdout
            .contains(&format!("your file leaves: note.txt size 24 sha256 {sha}")),
        "{}",
        listed.stdout
    );
    assert!(listed.stdout.contains("/note.txt to "), "{}", listed.stdout);
    let code = shown_code(&bob, "release", &id);
    let v = bob.ok(&["task", "release", &id, "--code", &code]);
    assert_eq!(v["result"]["verdict"], "approved", "{v}");

    // 2. Alice's start gate shows the file; nothing is fetched before it.
    let tid = id.clone();
    let e = alice.wait_event("the request with a file", |e| {
        e["kind"] == "task" && e["task_id"] == tid.as_str() && e["step"] == "received"
    });
    assert_eq!(e["files"][0]["sha256"], sha.as_str(), "{e}");
    assert_eq!(e["files"][0]["inline"], true, "{e}");
    let err = alice.fail(&["file", "fetch", &id]);
    assert!(err.contains("approve its start first"), "{err}");
    assert!(!alice.home.join("files/incoming").exists());
    let code = shown_code(&alice, "approve", &id);
    let v = alice.ok(&["task", "approve", &id, "--code", &code]);
    assert_eq!(v["result"]["verdict"], "approved", "{v}");

    // 3. Fetched into her quarantine, mode 600, a derived name.
    let v = alice.ok(&["file", "fetch", &id]);
    let (path, f) = fetched(&v);
    assert!(path.starts_with(alice.home.join("files/incoming").join(&id)));
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        format!("{}.txt", &sha[..16])
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "Totals are in section 3."
    );
    assert_eq!(
        f["text"]["untrusted_peer_text"], "Totals are in section 3.",
        "{f}"
    );

    // 4. Her result with a file of hers waits for her release.
    let hers = prepare_inline(&alice, "answer.sh", "echo checked");
    let v = alice.ok(&["task", "submit", &id, "--text", "Checked", "--file", &hers]);
    assert_eq!(v["released"], false, "{v}");
    let code = shown_code(&alice, "release", &id);
    let v = alice.ok(&["task", "release", &id, "--code", &code]);
    assert_eq!(v["result"]["verdict"], "approved", "{v}");

    // 5. Bob's side: the artifact lists it; he fetches it from the result.
    let art = bob.wait_event("the result with a file", |e| {
        e["kind"] == "task" && e["task_id"] == tid.as_str() && e["step"] == "artifact"
    });
    assert_eq!(art["files"][0]["sha256"], hers.as_str(), "{art}");
    let v = bob.ok(&["file", "fetch", &id]);
    let (path, _) = fetched(&v);
    // An active extension is defused.
    assert!(
        path.to_str().unwrap().ends_with(".sh.quarantine"),
        "{}",
        path.display()
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "echo checked");
    let listed = bob.ok(&["file", "list"]);
    assert!(listed.to_string().contains(&hers), "{listed}");

    alice.stop_listener();
    bob.stop_listener();
}
