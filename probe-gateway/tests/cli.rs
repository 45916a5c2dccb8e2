//! The `check` command, as a process.
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn check(file: &str, mailbox: &str) -> (Option<i32>, serde_json::Value) {
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/");
    let out = Command::new(env!("CARGO_BIN_EXE_rdv-probe-gateway"))
        .args(["check", &format!("{corpus}{file}"), "--mailbox", mailbox])
        .args([
            "--authserv-id",
            "mx.trusted.test",
            "--now",
            "2026-10-08T12:00:00Z",
        ])
        .output()
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

#[test]
fn check_admits_and_refuses() {
    let (code, v) = check("trusted-pass.eml", "john@doe.test");
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["binding"], "weak_mailbox_proof");
    assert_eq!(v["auth"]["dmarc"], "pass");
    let (code, v) = check("trusted-pass.eml", "jane@doe.test");
    assert_eq!(code, Some(2));
    assert_eq!(v["refusal"], "to_hint");
}
