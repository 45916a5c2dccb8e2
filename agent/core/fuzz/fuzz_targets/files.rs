//! The files extension's parsers (agent/core/src/file.rs, SPEC §7.7) on
//! any bytes: a FilePart, an `rdv/transfer` message, and a task payload
//! carrying file parts, each a JSON value bounded as an envelope's
//! plaintext. Asserts: no panic; a kept part reads back to itself, its
//! name is sanitized (no path separator, control or bidi character, no
//! leading dot, at most 255 characters), its type a lowercase bare
//! type/subtype, every URL https with a host and no userinfo, and what the
//! human is shown carries no key; a transfer message reads back to itself
//! and its data is within 16 KiB and 16 levels; a task payload's files are
//! each one of those kept parts.
//!
//! With `RDV_FUZZ_SEED_DIR=dir`, the init writes the corpus seeds (parts,
//! every transfer step, a request with files) into `dir`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdv_agent_core::file::{self, FilePart};
use rdv_agent_core::task::{self, Incoming, Parsed};
use rdv_proto::consts::EXT_FILES;
use serde_json::{Value, json};

const SHA: &str = "3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a3f9a";

fn seeds() -> Vec<(String, Value)> {
    let reference = json!({"kind": "file",
        "file": {"uri": "https://files.example.com/q4/3f9a", "mimeType": "application/pdf", "name": "../q4-plan.pdf"},
        "metadata": {EXT_FILES: {"sha256": SHA, "size": 412817,
            "enc": {"alg": "aes256gcm", "key": "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=", "nonce": "AQEBAQEBAQEBAQEB", "plain_sha256": SHA},
            "mirrors": ["https://mirror.example.org/3f9a"], "p2p": ["webrtc-datachannel/1"],
            "expires": "2026-11-01T00:00:00Z"},
            "https://example.org/other/v1": {"x": 1}}});
    let inline = json!({"kind": "file", "file": {"bytes": "aGVsbG8=", "name": "note.txt", "mimeType": "text/plain"}});
    let t = |step: &str, extra: Value| {
        let mut v = json!({"type": "rdv/transfer", "file": SHA,
            "task": "00000000-0000-4000-8000-000000000002",
            "transfer": "00000000-0000-4000-8000-000000000004", "step": step});
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        v
    };
    let request = json!({"type": "a2a/message", "message": {
        "kind": "message", "role": "agent", "messageId": "00000000-0000-4000-8000-000000000001",
        "taskId": "00000000-0000-4000-8000-000000000002", "contextId": "00000000-0000-4000-8000-000000000003",
        "extensions": ["https://rendezvous.nesher.co/ext/tasks/v1", "https://rendezvous.nesher.co/ext/request/v1", EXT_FILES],
        "parts": [{"kind": "data", "data": {"rdv": "task/request", "capability": "https://rendezvous.nesher.co/ext/request/v1"}},
            {"kind": "text", "text": "please read"}, reference.clone(), inline.clone()]}});
    vec![
        ("reference".into(), reference),
        ("inline".into(), inline),
        ("request".into(), request),
        (
            "propose".into(),
            t(
                "propose",
                json!({"protocols": ["webrtc-datachannel/1"], "data": {}, "expires": "2026-11-01T00:00:00Z"}),
            ),
        ),
        (
            "accept".into(),
            t("accept", json!({"protocol": "webrtc-datachannel/1"})),
        ),
        (
            "signal".into(),
            t("signal", json!({"data": {"sdp": "v=0", "ice": [{"c": 1}]}})),
        ),
        ("done".into(), t("done", json!({}))),
        ("abort".into(), t("abort", json!({"reason": "no"}))),
    ]
}

fn check_kept(p: &FilePart) {
    let v = p.to_value();
    assert_eq!(file::parse_part_value(&v).as_ref(), Ok(p), "kept form: {v}");
    if let Some(n) = &p.name {
        assert!(!n.is_empty() && n.chars().count() <= 255);
        assert!(!n.starts_with('.'), "{n:?}");
        assert!(
            !n.chars()
                .any(|c| matches!(c, '/' | '\\') || rdv_agent_core::peer_text::is_unsafe(c)),
            "{n:?}"
        );
    }
    if let Some(m) = &p.mime_type {
        assert_eq!(m, &m.to_ascii_lowercase());
        assert_eq!(m.matches('/').count(), 1);
    }
    for u in p.urls() {
        assert!(file::check_url(&u).is_ok(), "{u}");
    }
    assert!(p.bytes.is_some() || p.meta.is_some());
    let shown = p.shown().to_string();
    if let Some(e) = v.pointer(&format!(
        "/metadata/{}/enc/key",
        EXT_FILES.replace('~', "~0").replace('/', "~1")
    )) {
        assert!(!shown.contains(e.as_str().unwrap_or("\u{0}")));
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fn check(v: &Value) {
    if let Ok(p) = file::parse_part_value(v) {
        check_kept(&p);
    }
    if let Ok(m) = file::parse_transfer(v) {
        assert_eq!(file::parse_transfer(&m.to_payload()).as_ref(), Ok(&m));
        let data = match &m.step {
            file::TransferStep::Propose { data, .. } | file::TransferStep::Accept { data, .. } => {
                data.clone()
            }
            file::TransferStep::Signal { data } => Some(data.clone()),
            _ => None,
        };
        if let Some(d) = data {
            assert!(depth(&d) <= 16);
            assert!(rdv_proto::canon::to_vec(&d).map_or(0, |b| b.len()) <= 16 * 1024);
        }
    }
    match task::parse_payload(v) {
        Parsed::Task(Incoming::Request { files, .. })
        | Parsed::Task(Incoming::Input { files, .. }) => {
            files.iter().for_each(check_kept);
        }
        Parsed::Task(Incoming::Artifact { parts, .. }) => {
            task::files_of(&parts).iter().for_each(check_kept);
        }
        _ => {}
    }
}

fuzz_target!(
    init: {
        if let Some(dir) = std::env::var_os("RDV_FUZZ_SEED_DIR") {
            let dir = std::path::Path::new(&dir);
            std::fs::create_dir_all(dir).expect("the seed dir");
            for (name, v) in seeds() {
                std::fs::write(dir.join(name), serde_json::to_vec(&v).expect("json"))
                    .expect("writing a seed");
            }
        }
    },
    |data: &[u8]| {
        if let Ok(v) = rdv_proto::canon::parse(data, rdv_proto::consts::ENVELOPE_MAX_PLAINTEXT) {
            check(&v);
        }
    }
);
