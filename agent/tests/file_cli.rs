//! `rdv file …` as a process (SPEC §7.7): the direct-transfer setting is
//! changed only at an interactive terminal and is off by default; paths
//! inside a Rendezvous home are refused for prepare; a prepared file is
//! kept privately and listed; fetching needs a task whose start gate
//! passed.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{ok_json, rdv};

fn init(home: &std::path::Path) {
    ok_json(
        home,
        &[
            "init",
            "--relay",
            "wss://relay.example.invalid",
            "--address",
            "alice@example.com",
        ],
    );
}

#[test]
fn direct_transfer_is_off_and_changed_only_at_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("a");
    init(&home);
    let s = ok_json(&home, &["file", "direct-transfer", "status"]);
    assert_eq!(s["direct_transfer"], false);
    for action in ["on", "off"] {
        let o = rdv(&home, &["file", "direct-transfer", action]);
        assert!(!o.ok, "{action} without a terminal must be refused");
        assert!(o.stderr.contains("interactive terminal"), "{}", o.stderr);
    }
    let s = ok_json(&home, &["file", "direct-transfer", "status"]);
    assert_eq!(s["direct_transfer"], false);
}

#[test]
fn a_setting_written_into_the_home_counts_as_off_with_a_notice() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("a");
    init(&home);
    // Something that can write the home (not this command) turns it on in
    // the store: a record without the MAC of §7.7's owner setting.
    let db = rdv_agent::home::Home::at(&home).db_path();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = rdv_agent::store::Store::open(&db).await.unwrap();
        let mut tx = store.begin().await.unwrap();
        tx.write(&[rdv_agent_core::record::Write {
            table: rdv_agent_core::record::Table::Owner,
            key: rdv_agent_core::file::DIRECT_TRANSFER_KEY.into(),
            value: Some(serde_json::json!({"on": true, "since": "2026-12-01T10:00:00Z"})),
        }])
        .await
        .unwrap();
        tx.commit().await.unwrap();
        store.close().await;
    });
    let s = ok_json(&home, &["file", "direct-transfer", "status"]);
    assert_eq!(s["direct_transfer"], false);
    assert_eq!(s["integrity"], "failed");
    assert_eq!(s["notice"], rdv_agent_core::file::DIRECT_TRANSFER_TAMPERED);
    let l = ok_json(&home, &["file", "list"]);
    assert_eq!(l["direct_transfer"], false);
    assert_eq!(l["notice"], rdv_agent_core::file::DIRECT_TRANSFER_TAMPERED);
}

#[test]
fn prepare_refuses_the_home_and_keeps_the_key_private() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("a");
    init(&home);
    let key = home.join("agent.key");
    assert!(key.exists());
    let o = rdv(
        &home,
        &["file", "prepare", key.to_str().unwrap(), "--inline"],
    );
    assert!(!o.ok);
    assert!(
        o.stderr.contains("inside a Rendezvous home"),
        "{}",
        o.stderr
    );
    let plan = dir.path().join("plan.pdf");
    std::fs::write(&plan, b"the Q4 plan").unwrap();
    let copy = dir.path().join("copy.bin");
    let p = ok_json(
        &home,
        &[
            "file",
            "prepare",
            plan.to_str().unwrap(),
            "--out",
            copy.to_str().unwrap(),
        ],
    );
    let sha = p["sha256"].as_str().unwrap().to_string();
    assert_eq!(
        sha,
        rdv_agent_core::file::sha256_hex(&std::fs::read(&copy).unwrap())
    );
    assert_eq!(p["inline"], false);
    let rec = home.join("files/prepared").join(format!("{sha}.json"));
    assert_eq!(
        std::fs::metadata(&rec).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The key is in the record, never on stdout.
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&rec).unwrap()).unwrap();
    let key = kept["meta"]["enc"]["key"].as_str().unwrap().to_string();
    assert!(!p.to_string().contains(&key));
    let l = rdv(&home, &["file", "list"]);
    assert!(l.ok, "{}", l.stderr);
    assert!(l.stdout.contains(&sha));
    assert!(!l.stdout.contains(&key));
    // Fetching needs a task.
    let o = rdv(
        &home,
        &["file", "fetch", "3f9a0000-0000-4000-8000-000000000001"],
    );
    assert!(!o.ok);
    assert!(o.stderr.contains("no task"), "{}", o.stderr);
}
