//! The README's first command as a new user runs it (issue #17): `rdv-suite`
//! on a clean data directory and free ports starts the directory, the probe
//! gateway, the relay bridge and a Nostr relay; `rdv demo` then walks two
//! agents through list → blinded lookup → topic probe → grant → confirm →
//! messages both ways, and each step is checked afterwards on both homes.
//! Ctrl-C (SIGINT) stops the suite cleanly.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdv_e2e::{TempDir, bin, run};
use serde_json::Value;

fn rdv_json(home: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let o = run(
        Command::new(bin("rdv"))
            .args(&all)
            .env("RDV_HOME", home)
            .env("RDV_DNS_SERVER", "off"),
        b"",
    );
    assert!(
        o.status.success(),
        "rdv {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_suite_runs_the_demo_and_stops_on_ctrl_c() {
    let dir = TempDir::new("suite");
    let data = dir.path().join("data");
    let log = std::fs::File::create(dir.path().join("suite.log")).unwrap();
    let mut suite = Command::new(bin("rdv-suite"))
        .args([
            "--data-dir",
            data.to_str().unwrap(),
            "--ephemeral-ports",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(suite.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the suite printed its URLs").unwrap();
    let urls: Value = serde_json::from_str(&first).unwrap();
    for key in [
        "directory",
        "gateway",
        "gateway_smtp",
        "ntfy",
        "mqtt",
        "nostr",
    ] {
        assert!(
            urls[key].as_str().is_some_and(|u| u.contains("127.0.0.1:")),
            "{key}: {urls}"
        );
    }
    // One data directory, and the directory's key made on its first start.
    assert!(data.join("directory").join("oprf-keys.json").is_file());
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("suite.json")).unwrap()).unwrap();
    assert_eq!(file, urls);

    let work = dir.path().join("demo");
    let o = run(
        Command::new(bin("rdv")).args([
            "demo",
            "--suite",
            data.join("suite.json").to_str().unwrap(),
            "--workdir",
            work.to_str().unwrap(),
        ]),
        b"",
    );
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "demo failed:\n{shown}\n{}\nsuite log:\n{}",
        String::from_utf8_lossy(&o.stderr),
        std::fs::read_to_string(dir.path().join("suite.log")).unwrap_or_default()
    );
    // It showed each step as the command a person types.
    for cmd in [
        "bob$ rdv directory list-me",
        "alice$ rdv discover bob@example.com",
        "alice$ rdv contact request bob@example.com",
        "bob$ rdv contact grant",
        "alice$ rdv contact confirm",
        "alice$ rdv send Bob",
        "bob$ rdv send Alice",
    ] {
        assert!(shown.contains(cmd), "no {cmd:?} in:\n{shown}");
    }

    // Both sides, afterwards: the lookup went through the directory, each
    // is the other's contact, and each got the other's message.
    let (alice, bob) = (work.join("alice"), work.join("bob"));
    let found = &rdv_json(&alice, &["discover", "bob@example.com"])[0]["found"];
    let bob_id = rdv_json(&bob, &["status"])[0]["id"].clone();
    let alice_id = rdv_json(&alice, &["status"])[0]["id"].clone();
    assert!(
        found
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == bob_id && c["binding"] == "directory"),
        "{found}"
    );
    let has = |home: &std::path::Path, id: &Value| {
        rdv_json(home, &["contact", "list"])[0]["contacts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| &c["id"] == id)
    };
    assert!(has(&alice, &bob_id) && has(&bob, &alice_id));
    let got = |home: &std::path::Path, from: &Value, text: &str| {
        rdv_json(home, &["inbox", "--limit", "1000"])
            .iter()
            .any(|e| e["kind"] == "message" && &e["from"] == from && e.to_string().contains(text))
    };
    assert!(got(&bob, &alice_id, "Dinner next week?"));
    assert!(got(&alice, &bob_id, "Yes! Thursday at 8?"));

    // Ctrl-C stops everything, cleanly.
    let pid = suite.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = suite.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the suite did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}");
    let log = std::fs::read_to_string(dir.path().join("suite.log")).unwrap();
    assert!(log.contains("stopping"), "{log}");
}

/// Packaging (issue #17): every shipped binary answers `--version`; `rdv`
/// writes a man page per command from the same definitions as `--help`,
/// and shell completions.
#[test]
fn every_binary_has_a_version_and_rdv_has_man_pages_and_completions() {
    for b in [
        "rdv",
        "rdv-mcp",
        "rdv-suite",
        "rdv-directory",
        "rdv-probe-gateway",
        "rdv-relay-bridge",
        "rdv-dev-relay",
    ] {
        let o = run(Command::new(bin(b)).arg("--version"), b"");
        let v = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && v.starts_with(&format!("{b} ")),
            "{b}: {v}"
        );
    }
    let dir = TempDir::new("man");
    let o = run(
        Command::new(bin("rdv")).args(["man", "--out", dir.path().to_str().unwrap()]),
        b"",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let grant = std::fs::read_to_string(dir.path().join("rdv-contact-grant.1")).unwrap();
    assert!(grant.starts_with(".ie") || grant.contains(".TH"), "{grant}");
    assert!(grant.contains("tier"), "{grant}");
    assert!(dir.path().join("rdv.1").is_file());
    assert!(dir.path().join("rdv-demo.1").is_file());
    let o = run(Command::new(bin("rdv")).args(["completions", "bash"]), b"");
    let script = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && script.contains("_rdv"), "{script}");
}
