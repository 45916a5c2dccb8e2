//! The binary's start: bound addresses on stdout, and a clean log (no
//! ERROR line: the embedded broker's readiness check must not provoke one).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

#[test]
fn serve_starts_without_error_lines_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let any = "127.0.0.1:0";
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdv-relay-bridge"))
        .args([
            "serve",
            "--http-listen",
            any,
            "--mqtt-listen",
            any,
            "--mqtt-v5-listen",
            any,
            "--ws-listen",
            any,
            "--data-dir",
        ])
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let bound: serde_json::Value = serde_json::from_str(&line).unwrap();
    let (code, _) = common::curl(&[&format!(
        "http://{}/healthz",
        bound["http"].as_str().unwrap()
    )]);
    assert_eq!(code, 200);
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = child.wait().unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "exit {status}: {log}");
    assert!(log.contains("listening"), "the start is logged: {log}");
    assert!(
        !log.lines().any(|l| l.contains("ERROR")),
        "ERROR lines at start:\n{log}"
    );
}
